//! LoRA adapters in PEFT's format on the default model (cut to its first layers,
//! `common::small_model_path`): the GPU with an adapter
//! against the CPU reference with merged weights W + s·B·A, B = 0, switching,
//! and bad adapter files.

use crate::common;

use common::small_model_path;
use pippin::adapters::fixture::{self, FixtureSpec};
use pippin::adapters::{self, reorder_rows, Adapter, RowOrder};
use pippin::engine::{
    Backend, GpuBackend, GpuLoraAdapter, GpuSession, Logits, SessionOptions, Want,
};
use pippin::model::{load_reference, KvCache, RopeStyle};

use crate::common::small_gpu_model as model;

fn make(rank: usize, modules: &[&str], seed: u64, zero_b: bool) -> Adapter {
    let spec = FixtureSpec {
        zero_b,
        half: seed.is_multiple_of(2),
        ..FixtureSpec::new(rank, modules, seed)
    };
    let (config, weights) = fixture::write(&model().config, &spec);
    adapters::parse(config.as_bytes(), &weights, &model().config).expect("fixture parses")
}

const PROMPT: [u32; 5] = [504, 3575, 282, 4649, 314];
const NEXT: [u32; 2] = [7042, 30];

/// Logits after the prompt and after each of NEXT, on the GPU.
fn gpu_logits(adapter: Option<&GpuLoraAdapter>, session: &mut GpuSession) -> Vec<Vec<f32>> {
    let mut b = GpuBackend::with_adapter(model(), session, adapter);
    let mut out = Vec::new();
    let mut run = |t: &[u32]| match pollster::block_on(b.forward(t, Want::logits())).unwrap() {
        Logits::Full(l) => l,
        Logits::Top(_) => unreachable!(),
    };
    out.push(run(&PROMPT));
    for t in NEXT {
        out.push(run(&[t]));
    }
    out
}

fn cpu_merged_logits(adapter: &Adapter) -> Vec<Vec<f32>> {
    let (_, mut r) = load_reference(&small_model_path()).unwrap();
    adapters::merge_into(&mut r.weights, adapter);
    let mut cache = KvCache::new(&r.config);
    let mut out = vec![r.forward(&mut cache, &PROMPT, false).unwrap()];
    for t in NEXT {
        out.push(r.forward(&mut cache, &[t], false).unwrap());
    }
    out
}

fn session() -> GpuSession {
    GpuSession::new(
        model(),
        SessionOptions {
            max_context: 64,
            ..crate::common::f32_session()
        },
    )
    .unwrap()
}

/// Over every position's logits (NaN- and length-aware, as all comparisons).
fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len(), "positions");
    pippin::testing::max_abs_diff(&a.concat(), &b.concat())
}

#[test]
fn gpu_with_adapter_matches_cpu_with_merged_weights() {
    let all = pippin::adapters::MODULES;
    let base = cpu_merged_logits(&make(8, &["q_proj"], 1, true));
    for (rank, modules, seed) in [(8, &all[..4], 3u64), (16, &all[..], 4)] {
        let a = make(rank, modules, seed, false);
        let want = cpu_merged_logits(&a);
        let shift = max_diff(&want, &base);
        assert!(shift > 0.05, "the adapter changes the logits ({shift})");
        let ga = GpuLoraAdapter::upload(&model().gpu, &a).unwrap();
        let got = gpu_logits(Some(&ga), &mut session());
        let d = max_diff(&got, &want);
        eprintln!(
            "rank {rank} {} modules: GPU vs merged CPU max diff {d}, adapter shift {shift}",
            modules.len()
        );
        assert!(d < 1e-3, "rank {rank}: GPU vs merged CPU differ by {d}");
    }
}

#[test]
fn a_zero_b_adapter_changes_nothing_and_switching_is_exact() {
    let zero = GpuLoraAdapter::upload(
        &model().gpu,
        &make(8, &["q_proj", "v_proj", "down_proj"], 5, true),
    )
    .unwrap();
    let a =
        GpuLoraAdapter::upload(&model().gpu, &make(8, &["q_proj", "v_proj"], 6, false)).unwrap();
    let b = GpuLoraAdapter::upload(
        &model().gpu,
        &make(16, &["gate_proj", "up_proj", "o_proj"], 7, false),
    )
    .unwrap();
    let fresh = |ad: Option<&GpuLoraAdapter>| gpu_logits(ad, &mut session());
    let none = fresh(None);
    assert_eq!(
        fresh(Some(&zero)),
        none,
        "B = 0 gives exactly the base model"
    );
    let (fa, fb) = (fresh(Some(&a)), fresh(Some(&b)));
    assert!(max_diff(&fa, &none) > 0.05 && max_diff(&fb, &none) > 0.05);
    // One session switching A → B → none → A: each equals a fresh session.
    let mut s = session();
    for (ad, want) in [
        (Some(&a), &fa),
        (Some(&b), &fb),
        (None, &none),
        (Some(&a), &fa),
    ] {
        assert_eq!(&gpu_logits(ad, &mut s), want);
    }
}

#[test]
fn unloading_frees_the_adapter_and_memory_is_counted() {
    let ad = make(16, &pippin::adapters::MODULES, 8, false);
    let ga = GpuLoraAdapter::upload(&model().gpu, &ad).unwrap();
    // Rank 16 is padded to 32 on the GPU; A is f16 for this (even-seed) fixture.
    assert!(
        ga.bytes > ad.bytes() / 4 && ga.bytes < 4 * ad.bytes(),
        "{} vs {}",
        ga.bytes,
        ad.bytes()
    );
}

#[test]
fn bad_adapters_are_clear_errors_and_the_model_keeps_working() {
    // The full model's shapes: every layer has the modules the fixture picks.
    let (g, _) = pippin::gguf::Gguf::open(&common::model_path()).unwrap();
    let c = &pippin::model::Config::from_gguf(&g).unwrap();
    let before = gpu_logits(None, &mut session());
    let spec = FixtureSpec::new(8, &["q_proj", "v_proj"], 9);
    let (config, weights) = fixture::write(c, &spec);
    let err = |cfg: &str, w: &[u8], c: &pippin::model::Config| {
        adapters::parse(cfg.as_bytes(), w, c)
            .unwrap_err()
            .to_string()
    };
    let e = err(&config.replace("\"r\": 8", "\"r\": 4"), &weights, c);
    assert!(
        e.contains("config says rank 4") && e.contains("layer 0 q_proj"),
        "{e}"
    );
    let mut small = c.clone();
    small.hidden = 512;
    let e = err(&config, &weights, &small);
    assert!(e.contains("the model needs"), "{e}");
    let mut fewer = c.clone();
    fewer.n_layers = 10;
    assert!(err(&config, &weights, &fewer).contains("the model has 10"));
    let e = err(&config, &weights[..weights.len() / 2], c);
    assert!(e.contains("adapter_model.safetensors"), "{e}");
    let e = err("{ not json", &weights, c);
    assert!(e.contains("adapter_config.json is not valid"), "{e}");
    // A lora_B without its lora_A.
    let only_b = {
        let st = safetensors::SafeTensors::deserialize(&weights).unwrap();
        let keep: Vec<(String, safetensors::tensor::TensorView)> = st
            .tensors()
            .into_iter()
            .filter(|(n, _)| !n.contains("layers.3.self_attn.v_proj.lora_A"))
            .collect();
        safetensors::serialize(keep, None).unwrap()
    };
    let e = err(&config, &only_b, c);
    assert!(
        e.contains("no matching lora_A") && e.contains("layers.3"),
        "{e}"
    );
    // The model is untouched.
    let after = gpu_logits(None, &mut session());
    assert_eq!(max_diff(&after, &before), 0.0, "the model's logits changed");
}

/// The row permutation for q/k is what makes Hugging Face's half-split RoPE equal the
/// GGUF's adjacent-pair RoPE: checked here from RoPE itself, not from the converter.
#[test]
fn q_k_row_permutation_matches_rope_layouts() {
    let (heads, hd, cols) = (3, 8, 5);
    let mut rng = pippin::sampler::Rng::new(3);
    let w_hf: Vec<f32> = (0..heads * hd * cols).map(|_| rng.next_f32()).collect();
    let x: Vec<f32> = (0..cols).map(|_| rng.next_f32()).collect();
    let w_gguf = reorder_rows(&w_hf, cols, heads, hd, RowOrder::Gguf);
    let freqs: Vec<f32> = (0..hd / 2)
        .map(|i| 10_000f32.powf(-2.0 * i as f32 / hd as f32))
        .collect();
    let mut q_hf = pippin::model::reference::matmul(&x, &w_hf, cols);
    let mut q_gguf = pippin::model::reference::matmul(&x, &w_gguf, cols);
    pippin::model::reference::rope(
        &mut q_hf,
        heads * hd,
        hd,
        RopeStyle::HalfSplit,
        &freqs,
        7,
        1.0,
    );
    pippin::model::reference::rope(
        &mut q_gguf,
        heads * hd,
        hd,
        RopeStyle::Adjacent,
        &freqs,
        7,
        1.0,
    );
    let q_hf_permuted = reorder_rows(&q_hf, 1, heads, hd, RowOrder::Gguf);
    pippin::testing::assert_close("RoPE of permuted rows", &q_gguf, &q_hf_permuted, 1e-5);
}
