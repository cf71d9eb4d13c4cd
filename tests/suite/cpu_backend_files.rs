//! The CPU backend on real K-quant files (its integer K-quant dot products): Gemma 3
//! 270M Q4_K_M and SmolLM2 requantized by llama.cpp to Q3_K_M against llama.cpp's
//! reference outputs, and every requantized fixture (Q2_K … Q6_K, Q5_0, Q5_1, IQ4_NL)
//! against the f32 reference forward of the same file, teacher-forced and greedy.

use crate::common;

use common::llama_cpp::{check_steps, sure_prefix};
use common::{gemma_path, ids, models_file, testdata};
use pippin::engine::{Backend, CpuBackend, CpuModel, CpuState, Logits, Want};
use pippin::model::{load_reference, KvCache};
use pippin::quant::kv::KvFormat;
use pippin::sampler::argmax;
use pippin::testing::max_abs_diff;
use std::path::Path;

fn load_cpu(path: &Path) -> CpuModel {
    common::load_cpu(path, None)
}

fn logits(b: &mut CpuBackend, tokens: &[u32]) -> Vec<f32> {
    match pollster::block_on(b.forward(tokens, Want::logits())).unwrap() {
        Logits::Full(l) => l,
        Logits::Top(_) => panic!("full logits were asked for"),
    }
}

/// The CPU backend's logits (f32 KV cache) after `prompt` and after each token of
/// `cont` but its last: the predictions of `cont`, teacher-forced.
fn teacher_forced(m: &CpuModel, prompt: &[u32], cont: &[u32]) -> Vec<Vec<f32>> {
    let mut state = CpuState::new(KvFormat::F32);
    let mut b = CpuBackend::new(m, &mut state, None);
    let mut out = vec![logits(&mut b, prompt)];
    for &t in &cont[..cont.len() - 1] {
        out.push(logits(&mut b, &[t]));
    }
    out
}

#[test]
fn kquant_files_match_llama_cpp_on_the_cpu_backend() {
    let gemma = testdata("gemma3-reference.json");
    let q3 = testdata("smollm2-q3_k_m-reference.json");
    let cases = [
        (gemma_path(), &gemma["results"].as_array().unwrap()[..2]),
        (
            models_file("fixtures/SmolLM2-135M-Instruct.Q3_K_M.gguf"),
            &q3["models"]["Q3_K_M"]["results"].as_array().unwrap()[..],
        ),
    ];
    for (path, results) in cases {
        let m = load_cpu(&path);
        for r in results {
            let what = format!("{} {}", path.display(), r["name"]);
            let (prompt, cont) = (ids(&r["prompt_token_ids"]), ids(&r["greedy_token_ids"]));
            check_steps(&what, r, &teacher_forced(&m, &prompt, &cont));
            // Free-running: the tokens llama.cpp was sure of.
            let want = sure_prefix(r);
            let mut state = CpuState::new(KvFormat::F32);
            let mut b = CpuBackend::new(&m, &mut state, None);
            let mut l = logits(&mut b, &prompt);
            let mut got = Vec::new();
            for _ in 0..want.len() {
                got.push(argmax(&l) as u32);
                l = logits(&mut b, &got[got.len() - 1..]);
            }
            assert_eq!(got, want, "{what}");
        }
    }
}

/// Each requantized fixture on the CPU backend against the f32 reference of the same
/// file: "The capital of France is" and 8 greedy steps, logits within 2e-2 (16-bit
/// activations), the same tokens wherever the reference's choice is not a near-tie.
#[test]
fn every_requantized_fixture_matches_the_f32_reference() {
    const PROMPT: [u32; 5] = [504, 3575, 282, 4649, 314];
    for ty in ["Q2_K", "Q4_K_M", "Q5_K_M", "Q6_K", "Q5_0", "Q5_1", "IQ4_NL"] {
        let path = models_file(&format!("fixtures/SmolLM2-135M-Instruct.{ty}.gguf"));
        let (m, reference) = (load_cpu(&path), load_reference(&path).unwrap().1);
        let mut cache = KvCache::new(&reference.config);
        let mut state = CpuState::new(KvFormat::F32);
        let mut b = CpuBackend::new(&m, &mut state, None);
        let mut want = reference.forward(&mut cache, &PROMPT, false).unwrap();
        let mut got = logits(&mut b, &PROMPT);
        for step in 0..8 {
            let d = max_abs_diff(&got, &want);
            assert!(d < 2e-2, "{ty} step {step}: logits differ by {d}");
            let next = argmax(&want);
            let mut sorted = want.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            if sorted[0] - sorted[1] > 4e-2 {
                assert_eq!(argmax(&got), next, "{ty} step {step}");
            }
            want = reference
                .forward(&mut cache, &[next as u32], false)
                .unwrap();
            got = logits(&mut b, &[next as u32]);
        }
    }
}

/// A model over the CPU backend's memory is refused from its header, with the sizes,
/// before its weights are read; under the limit it loads.
#[test]
fn a_model_over_the_cpu_memory_is_refused_before_its_weights_are_read() {
    use pippin::engine::{Engine, SessionOptions};
    let path = common::model_path();
    let len = std::fs::metadata(&path).unwrap().len();
    let load = |limit: u64| {
        let read = std::rc::Rc::new(std::cell::Cell::new(0));
        let file = common::Counting(std::fs::File::open(&path).unwrap(), read.clone());
        let mut src = pippin::gguf::ReadSource {
            reader: file,
            len: Some(len),
        };
        let so = SessionOptions {
            max_context: 2048,
            cpu_memory: Some(limit),
            ..Default::default()
        };
        let e = pollster::block_on(Engine::load_cpu(&mut src, so, &mut |_, _| {}, "test"));
        (e, read.get())
    };
    let (e, read) = load(60_000_000);
    let err = e.err().expect("refused");
    assert_eq!(err.code(), "DeviceLimits");
    let msg = err.to_string();
    // Weights as stored (97 MB: the file less its header), the int8 KV cache at
    // 2,048 tokens: 30 layers × 2,048 × 2 × (3 × 64 + 3 × 4) bytes = 25.07 MB.
    assert!(msg.contains("97 MB of weights"), "{msg}");
    assert!(msg.contains("26 MB of KV cache"), "{msg}");
    assert!(msg.contains("60 MB"), "{msg}");
    assert!(read < len / 10, "{read} of {len} bytes were read");
    let (e, _) = load(400_000_000);
    assert!(e.is_ok());
}
