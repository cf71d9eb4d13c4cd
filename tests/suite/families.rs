//! Model families as code (`pippin::model::arch`): each family's tiny synthetic file
//! (its own tensors, random weights) reads back as that family and runs alike on the
//! f32 reference, the CPU backend and the GPU (`pippin info` naming its module:
//! `cli/tests/cli.rs`).

use crate::common;
use common::synthetic::{self, Spec};
use pippin::engine::cpu::CpuState;
use pippin::engine::{
    Backend, CpuBackend, GpuBackend, GpuModel, GpuSession, Logits, SessionOptions, Want,
};
use pippin::gpu::{Caps, Gpu};
use pippin::model::{load_reference, Arch, KvCache};
use pippin::quant::kv::KvFormat;
use pippin::testing::max_abs_diff;
use std::path::{Path, PathBuf};

fn file(arch: Arch) -> PathBuf {
    let dir = common::root().join("target/test-synthetic");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("family-{}.gguf", arch.name()));
    let spec = Spec::family(arch);
    spec.write(&path).unwrap();
    path
}

fn full(l: Logits) -> Vec<f32> {
    match l {
        Logits::Full(l) => l,
        Logits::Top(_) => unreachable!("full logits were asked for"),
    }
}

/// Teacher-forced logits of `tokens` (a prompt, then one token at a time) through
/// `backend`.
fn steps(b: &mut impl Backend, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut out = vec![full(
        pollster::block_on(b.forward(&tokens[..12], Want::logits())).unwrap(),
    )];
    for t in &tokens[12..] {
        out.push(full(
            pollster::block_on(b.forward(&[*t], Want::logits())).unwrap(),
        ));
    }
    out
}

fn gpu(path: &Path) -> GpuModel {
    let gpu = pollster::block_on(Gpu::new(Caps::default())).expect("a GPU adapter");
    pollster::block_on(GpuModel::load_file(gpu, path, &mut |_, _| {}))
        .unwrap()
        .0
}

#[test]
fn every_family_runs_alike_on_the_reference_the_cpu_backend_and_the_gpu() {
    // Past Gemma's window of 8: its ring cache wraps.
    let tokens: Vec<u32> = (0..20)
        .map(|i| (i * 37 + 3) % synthetic::VOCAB as u32)
        .collect();
    for arch in Arch::ALL {
        let path = file(arch);
        let (_, r) = load_reference(&path).unwrap();
        assert_eq!(r.config.arch, arch);
        let mut cache = KvCache::new(&r.config);
        let mut want = vec![r.forward(&mut cache, &tokens[..12], false).unwrap()];
        for t in &tokens[12..] {
            want.push(r.forward(&mut cache, &[*t], false).unwrap());
        }

        let cpu = common::load_cpu(&path, None);
        let mut state = CpuState::new(KvFormat::F32);
        let got = steps(&mut CpuBackend::new(&cpu, &mut state, None), &tokens);
        let m = gpu(&path);
        let opts = SessionOptions {
            max_context: 64,
            kv: KvFormat::F32,
            ..Default::default()
        };
        let mut s = GpuSession::new(&m, opts).unwrap();
        let on_gpu = steps(&mut GpuBackend::new(&m, &mut s), &tokens);
        for (i, w) in want.iter().enumerate() {
            let name = arch.name();
            let d = max_abs_diff(&got[i], w);
            assert!(
                d < 1e-2,
                "{name}: CPU backend, step {i}: logits differ by {d}"
            );
            let d = max_abs_diff(&on_gpu[i], w);
            assert!(d < 1e-3, "{name}: GPU, step {i}: logits differ by {d}");
        }
    }
}
