//! A model split into several GGUF files (llama.cpp's gguf-split names; the fixture is
//! the default model split in three by gguf-py's writer, scripts/fetch-fixtures): it
//! loads as one model, from its first file's path or from its files in order, on both
//! backends (and through the CLI: `cli/tests/cli.rs`), with one progress over all files; files missing, out
//! of order, repeated or truncated are clear errors.

use crate::common;

use common::{model_path, models_file};
use pippin::engine::{
    Backend, CpuBackend, CpuModel, CpuState, Engine, GpuBackend, GpuModel, GpuSession, Logits,
    ReferenceSession, SessionOptions, Want,
};
use pippin::gguf::split::{shard_names, Shards};
use pippin::gguf::ReadSource;
use pippin::gpu::{Caps, Gpu};
use pippin::quant::kv::KvFormat;
use pippin::testing::{assert_close, assert_finite};
use std::path::PathBuf;

const PROMPT: [u32; 6] = [1, 504, 3575, 282, 4649, 314];

/// The split files, in order.
fn shards() -> Vec<PathBuf> {
    let first = models_file("fixtures/split/SmolLM2-135M-Instruct-00001-of-00003.gguf");
    let names = shard_names(&first.to_string_lossy()).expect("a split's first file");
    names.into_iter().map(PathBuf::from).collect()
}

fn source(path: &PathBuf) -> ReadSource<std::fs::File> {
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len();
    ReadSource {
        reader: file,
        len: Some(len),
    }
}

/// The files at `paths`, in the order given, as one source.
fn files(paths: &[&PathBuf]) -> Shards<ReadSource<std::fs::File>> {
    Shards(paths.iter().map(|p| source(p)).collect())
}

fn cpu_logits(m: &CpuModel) -> Vec<f32> {
    let mut state = CpuState::new(KvFormat::F32);
    let mut b = CpuBackend::new(m, &mut state, None);
    match pollster::block_on(b.forward(&PROMPT, Want::logits())).unwrap() {
        Logits::Full(l) => l,
        Logits::Top(_) => unreachable!("full logits were asked for"),
    }
}

fn load_cpu(src: &mut impl pippin::gguf::ByteSource) -> pippin::Result<CpuModel> {
    let (mut progress, mut check) = (|_, _| {}, |_: &_| Ok(()));
    pollster::block_on(pippin::engine::cpu::load(
        src,
        256,
        &mut progress,
        &mut check,
    ))
    .map(|m| m.0)
}

#[test]
fn the_split_files_load_as_the_whole_file_on_the_cpu_backend() {
    let s = shards();
    assert_eq!(s.len(), 3);
    let whole = cpu_logits(&load_cpu(&mut source(&model_path())).unwrap());
    // The files in order, with one progress over all of them.
    let total: u64 = s.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    let mut last = (0, 0);
    let mut src = files(&[&s[0], &s[1], &s[2]]);
    let mut progress = |read, of| last = (read, of);
    let mut check = |_: &_| Ok(());
    let m = pollster::block_on(pippin::engine::cpu::load(
        &mut src,
        256,
        &mut progress,
        &mut check,
    ))
    .unwrap()
    .0;
    // The same weights: the same logits, bit for bit.
    assert_close("split vs whole, CPU backend", &cpu_logits(&m), &whole, 0.0);
    assert_eq!(last.1, total);
    assert!(last.0 > total * 9 / 10, "{last:?} of {total}");

    // The first file's path finds the others (the engine, as the CLI loads).
    let mut e = pollster::block_on(Engine::load_file_cpu(&s[0], SessionOptions::default()))
        .expect("the split model loads from its first file");
    let mut b = e.backend().unwrap();
    let l = match pollster::block_on(b.forward(&PROMPT, Want::logits())).unwrap() {
        Logits::Full(l) => l,
        Logits::Top(_) => unreachable!(),
    };
    assert_eq!(l.len(), whole.len());
    assert_finite("split, loaded by its first file's path", &l);
}

#[test]
fn the_split_files_load_as_the_whole_file_on_the_gpu() {
    let run = |path: &PathBuf| {
        let gpu = pollster::block_on(Gpu::new(Caps::default())).expect("a GPU adapter");
        let m = pollster::block_on(GpuModel::load_file(gpu, path, &mut |_, _| {}))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .0;
        let opts = SessionOptions {
            max_context: 64,
            kv: KvFormat::F32,
            ..Default::default()
        };
        let mut s = GpuSession::new(&m, opts).unwrap();
        match pollster::block_on(GpuBackend::new(&m, &mut s).forward(&PROMPT, Want::logits())) {
            Ok(Logits::Full(l)) => l,
            other => panic!("{other:?}"),
        }
    };
    let (split, whole) = (run(&shards()[0]), run(&model_path()));
    assert_close("split vs whole, GPU", &split, &whole, 0.0);
}

#[test]
fn missing_reordered_repeated_or_truncated_files_are_clear_errors() {
    let s = shards();
    let err = |mut src: Shards<ReadSource<std::fs::File>>| match load_cpu(&mut src) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    };
    let e = err(files(&[&s[0], &s[1]]));
    assert!(e.contains("split into 3 files; 2 given"), "{e}");
    let e = err(files(&[&s[1], &s[0], &s[2]]));
    assert!(
        e.contains("shard 2 of 3") && e.contains("-00001-of-00003.gguf"),
        "{e}"
    );
    let e = err(files(&[&s[0], &s[2], &s[1]]));
    assert!(e.contains("file 2 given is shard 3 of 3"), "{e}");
    let e = err(files(&[&s[0], &s[1], &s[1]]));
    assert!(e.contains("file 3 given is shard 2 of 3"), "{e}");
    let e = err(files(&[&s[0]]));
    assert!(e.contains("split into 3 files; 1 given"), "{e}");
    let whole = model_path();
    let e = err(files(&[&whole, &s[1]]));
    assert!(
        e.contains("a whole model, not a split one; 2 files given"),
        "{e}"
    );

    // A shard cut short: its own header says it, before any weight is read.
    let dir = common::root().join("target/tmp/split-truncated");
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join("SmolLM2-135M-Instruct-00003-of-00003.gguf");
    let bytes = std::fs::read(&s[2]).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 1000]).unwrap();
    let e = err(files(&[&s[0], &s[1], &cut]));
    assert!(e.contains("file 3 of 3") && e.contains("bytes"), "{e}");

    // A missing file, found by name from the first: named.
    let lonely = dir.join("lonely-00001-of-00002.gguf");
    std::fs::copy(&s[0], &lonely).unwrap();
    let e = pollster::block_on(Engine::load_file_cpu(&lonely, SessionOptions::default()))
        .err()
        .expect("a missing file fails")
        .to_string();
    assert!(e.contains("lonely-00002-of-00002.gguf"), "{e}");
}

/// What reads a model by position — the f32 reference (`load_reference`: `pippin
/// convert`, `perplexity --reference`, the tests) — takes a split model's first file
/// too, and reads every file (`pippin info` and `generate` on it: `cli/tests/cli.rs`).
#[test]
fn the_reference_reads_every_file_of_a_split_model() {
    let reference = |path: &PathBuf| {
        let (g, r) = pippin::model::load_reference(path).unwrap();
        let mut s = ReferenceSession::new(&r);
        match pollster::block_on(s.forward(&PROMPT, Want::logits())).unwrap() {
            Logits::Full(l) => (g.tensors.len(), l),
            Logits::Top(_) => unreachable!("full logits were asked for"),
        }
    };
    let (split, whole) = (reference(&shards()[0]), reference(&model_path()));
    assert_eq!(split.0, whole.0, "tensors");
    assert_close("split vs whole, f32 reference", &split.1, &whole.1, 0.0);
}
