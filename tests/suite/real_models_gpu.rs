//! Real downloaded GGUF files on the GPU (lavapipe here): the requantized SmolLM2 files
//! (every K-quant, Q5_0, Q5_1, IQ4_NL, mixed tensor by tensor) and Gemma 3 270M run
//! like the CPU reference and reproduce llama.cpp's greedy tokens; the sliding-window
//! ring cache gives the logits of a full cache.

use crate::common;

use common::llama_cpp::sure_prefix;
use common::{gemma_path, ids, models_file, synthetic, testdata};
use pippin::engine::{
    generate, Backend, GenerateOptions, GpuBackend, GpuFootprint, GpuModel, GpuSession, Logits,
    ReferenceSession, SessionOptions, Want,
};
use pippin::gguf::Gguf;
use pippin::model::{load_reference, KvCache, Reference};
use pippin::quant::kv::KvFormat;
use pippin::sampler::argmax;
use pippin::testing::max_abs_diff;
use pippin::tokenizer::Tokenizer;
use std::path::Path;

use crate::common::load_gpu as gpu_model;

fn session(m: &GpuModel, kv: KvFormat, chunk: usize) -> GpuSession {
    let opts = SessionOptions {
        max_context: 256,
        kv,
        chunk,
        cpu_memory: None,
        session_memory: None,
    };
    GpuSession::new(m, opts).unwrap()
}

fn logits(m: &GpuModel, s: &mut GpuSession, tokens: &[u32]) -> Vec<f32> {
    match pollster::block_on(GpuBackend::new(m, s).forward(tokens, Want::logits())).unwrap() {
        Logits::Full(l) => l,
        Logits::Top(_) => unreachable!("full logits were asked for"),
    }
}

/// Greedy decode on the GPU (f32 KV): the tokens and each step's logits.
fn gpu_greedy(m: &GpuModel, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut s = session(m, KvFormat::F32, 64);
    let mut l = logits(m, &mut s, prompt);
    let (mut toks, mut all) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = argmax(&l) as u32;
        toks.push(t);
        all.push(l);
        l = logits(m, &mut s, &[t]);
    }
    (toks, all)
}

/// The CPU reference's logits along `tokens` after `prompt`.
fn cpu_along(r: &Reference, prompt: &[u32], tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut all = prompt.to_vec();
    all.extend_from_slice(&tokens[..tokens.len().saturating_sub(1)]);
    let at: Vec<usize> = (prompt.len() - 1..all.len()).collect();
    r.forward_at(&mut KvCache::new(&r.config), &all, &at)
        .unwrap()
}

/// GPU greedy tokens equal the CPU's, and every step's logits are within `tol` (of
/// the step's largest logit, for models with large ones).
fn gpu_like_cpu(what: &str, m: &GpuModel, r: &Reference, prompt: &[u32], n: usize) -> Vec<u32> {
    let (toks, gpu) = gpu_greedy(m, prompt, n);
    let cpu = cpu_along(r, prompt, &toks);
    for (i, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
        let scale = c.iter().fold(1f32, |a, v| a.max(v.abs()));
        let d = max_abs_diff(g, c);
        assert!(
            d < 1e-3 * scale.max(10.0),
            "{what} step {i}: GPU vs CPU logits differ by {d}"
        );
        assert_eq!(argmax(g), argmax(c), "{what} step {i}: greedy token");
    }
    toks
}

/// The text the generate loop writes (greedy, f32 KV on the GPU).
fn texts(path: &Path, m: &GpuModel, r: &Reference, prompt: &str) -> (String, String) {
    let tk = Tokenizer::from_gguf(&Gguf::open(path).unwrap().0.metadata).unwrap();
    let ids = tk.encode_prompt(prompt, false).unwrap();
    let opts = GenerateOptions::up_to(8);
    let mut gpu = String::new();
    let mut s = session(m, KvFormat::F32, 64);
    pollster::block_on(generate(
        &mut GpuBackend::new(m, &mut s),
        &tk,
        &ids,
        &opts,
        |t, _| {
            gpu.push_str(t);
            true
        },
    ))
    .unwrap();
    let mut cpu = String::new();
    pollster::block_on(generate(
        &mut ReferenceSession::new(r),
        &tk,
        &ids,
        &opts,
        |t, _| {
            cpu.push_str(t);
            true
        },
    ))
    .unwrap();
    (gpu, cpu)
}

#[test]
fn every_requantized_smollm2_file_runs_like_the_cpu_reference() {
    let prompt = [504u32, 3575, 282, 4649, 314]; // "The capital of France is"
    for name in [
        "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q5_0", "Q5_1", "IQ4_NL",
    ] {
        let file = models_file(&format!("fixtures/SmolLM2-135M-Instruct.{name}.gguf"));
        // The format's kernels, not the depth: its first layers (Q4_K_M's Q6_K
        // attn_v and ffn_down included) and its own embedding and head.
        let path = common::truncated_copy(&file, common::SMALL_LAYERS);
        let m = gpu_model(&path);
        let (_, r) = load_reference(&path).unwrap();
        gpu_like_cpu(name, &m, &r, &prompt, 6);
        // The generate loop is the same for every format: its text once.
        if name == "Q4_K_M" {
            let (gpu, cpu) = texts(&path, &m, &r, "Once upon a time");
            assert_eq!(gpu, cpu, "{name}: GPU and CPU texts");
            eprintln!("{name}: {gpu:?}");
        }
    }
}

#[test]
fn smollm2_q3_k_m_on_the_gpu_writes_llama_cpp_greedy_tokens() {
    let m = gpu_model(&models_file("fixtures/SmolLM2-135M-Instruct.Q3_K_M.gguf"));
    let refdata = testdata("smollm2-q3_k_m-reference.json");
    for r in refdata["models"]["Q3_K_M"]["results"].as_array().unwrap() {
        let want = sure_prefix(r);
        let (got, _) = gpu_greedy(&m, &ids(&r["prompt_token_ids"]), want.len());
        assert_eq!(got, want, "{}", r["name"]);
    }
}

#[test]
fn gemma3_on_the_gpu_matches_llama_cpp_and_the_cpu_reference() {
    let path = gemma_path();
    let m = gpu_model(&path);
    assert!(
        m.embed.parts.len() > 1 || m.gpu.max_binding() > 200 << 20,
        "the 178 MB embedding is split where bindings are smaller"
    );
    let (_, r) = load_reference(&path).unwrap();
    let refdata = testdata("gemma3-reference.json");
    for res in refdata["results"].as_array().unwrap().iter().take(2) {
        let prompt = ids(&res["prompt_token_ids"]);
        let want = sure_prefix(res);
        let got = gpu_like_cpu(
            res["name"].as_str().unwrap(),
            &m,
            &r,
            &prompt,
            want.len().max(4),
        );
        assert_eq!(
            &got[..want.len()],
            &want[..],
            "{}: llama.cpp's greedy tokens",
            res["name"]
        );
    }
    let (gpu, cpu) = texts(&path, &m, &r, "The capital of France is");
    assert_eq!(gpu, cpu);
    assert!(gpu.starts_with(" the capital of"), "{gpu:?}");
}

/// A tiny Gemma 3 whose sliding layers see 8 keys, run in chunks of 8 (a ring of 16
/// slots): prefill, decode and rewinds give the CPU reference's logits (full cache,
/// masked), in f32 and int8 KV.
#[test]
fn sliding_window_ring_cache_gives_the_full_cache_logits() {
    let dir = common::root().join("target/test-synthetic");
    std::fs::create_dir_all(&dir).unwrap();
    let path = synthetic::tiny_gemma3(&dir, 8).unwrap();
    let m = gpu_model(&path);
    let (_, r) = load_reference(&path).unwrap();
    assert!(r.config.is_sliding(0) && !r.config.is_sliding(2));
    let tokens: Vec<u32> = (0..60)
        .map(|i| (i * 37 + 11) % synthetic::VOCAB as u32)
        .collect();
    let cpu = r
        .forward_at(
            &mut KvCache::new(&r.config),
            &tokens,
            &(0..60).collect::<Vec<_>>(),
        )
        .unwrap();
    for kv in [KvFormat::F32, KvFormat::Int8] {
        // int8 keys and values (one scale per head) move logits by ~1% of their size.
        let size = cpu.iter().flatten().fold(1f32, |m, v| m.max(v.abs()));
        let tol = if kv == KvFormat::F32 {
            1e-3
        } else {
            2e-2 * size
        };
        let mut s = session(&m, kv, 8);
        // The header's estimate (ring caches, a RoPE table per kind of layer) is
        // what the session holds.
        let so = SessionOptions {
            max_context: 256,
            kv,
            chunk: 8,
            cpu_memory: None,
            session_memory: None,
        };
        let (g, _) = Gguf::open(&path).unwrap();
        let f = GpuFootprint::check(&g, &r.config, &so, m.gpu.max_binding()).unwrap();
        assert_eq!((f.kv, f.scratch), (s.kv_bytes(), s.scratch_bytes()));
        // 40 tokens of prefill in 5 chunks (the ring wraps), then 10 decode steps.
        let got = logits(&m, &mut s, &tokens[..40]);
        assert!(max_abs_diff(&got, &cpu[39]) < tol, "{kv:?} prefill");
        for p in 40..50 {
            let got = logits(&m, &mut s, &tokens[p..p + 1]);
            let d = max_abs_diff(&got, &cpu[p]);
            assert!(d < tol, "{kv:?} decode at {p}: {d}");
        }
        // Rewind a little: the ring still holds the window behind position 45.
        let mut b = GpuBackend::new(&m, &mut s);
        b.truncate(45);
        assert_eq!(b.tokens().len(), 45);
        let got = logits(&m, &mut s, &tokens[45..52]);
        assert!(
            max_abs_diff(&got, &cpu[51]) < tol,
            "{kv:?} after a short rewind"
        );
        // Rewind far: the ring no longer holds position 20's window; the session
        // starts over and running the conversation again gives the same logits.
        let mut b = GpuBackend::new(&m, &mut s);
        b.truncate(20);
        assert_eq!(b.tokens().len(), 0, "a rewind past the ring starts over");
        let got = logits(&m, &mut s, &tokens[..60]);
        assert!(
            max_abs_diff(&got, &cpu[59]) < tol,
            "{kv:?} after a long rewind"
        );
    }
}

/// Decode steps replay a recorded plan of each kind: one-pass attention up to
/// `attention::ONE_PASS_MAX` positions, split + reduce past it. A tiny model decodes
/// across the limit; every replayed step's candidates carry the CPU reference's logits.
#[test]
fn decode_plans_on_both_sides_of_the_one_pass_limit() {
    use pippin::gguf::Value;
    use pippin::kernels::attention::{one_pass, ONE_PASS_MAX};
    let dir = common::root().join("target/test-synthetic");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny-llama-4k.gguf");
    let mut spec = synthetic::Spec::llama();
    spec.extra = vec![("llama.context_length".into(), Value::U32(4096))];
    spec.write(&path).unwrap();
    let m = gpu_model(&path);
    let (_, r) = load_reference(&path).unwrap();
    let (first, end) = (ONE_PASS_MAX - 2, ONE_PASS_MAX + 3);
    assert!(one_pass(first + 1) && !one_pass(end));
    let tokens: Vec<u32> = (0..end)
        .map(|i| (i * 29 + 5) as u32 % synthetic::VOCAB as u32)
        .collect();
    let at: Vec<usize> = (first..end).collect();
    let cpu = r
        .forward_at(&mut KvCache::new(&r.config), &tokens, &at)
        .unwrap();
    let opts = SessionOptions {
        max_context: 4096,
        ..crate::common::f32_session()
    };
    let mut s = GpuSession::new(&m, opts).unwrap();
    let mut b = GpuBackend::new(&m, &mut s);
    let want = || Want::top(8);
    pollster::block_on(b.forward(&tokens[..first], want())).unwrap();
    for (p, want_logits) in (first..end).zip(&cpu) {
        let got = pollster::block_on(b.forward(&tokens[p..p + 1], want())).unwrap();
        let Logits::Top(top) = got else {
            panic!("candidates were asked for")
        };
        assert_eq!(top.len(), 8);
        for (id, l) in top {
            let d = (want_logits[id as usize] - l).abs();
            assert!(
                d < 1e-3,
                "position {p}, token {id}: {l} vs {}",
                want_logits[id as usize]
            );
        }
    }
}
