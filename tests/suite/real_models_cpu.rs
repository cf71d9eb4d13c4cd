//! Real downloaded GGUF files on the CPU reference against llama.cpp: Gemma 3 270M
//! (Q4_K_M: Q5_0, Q8_0, Q4_K, Q6_K tensors; SentencePiece; sliding windows) and
//! SmolLM2 requantized to Q3_K_M (Q4_0, Q4_K, Q5_0, Q5_1, Q5_K tensors).

use crate::common;

use common::llama_cpp::{check_steps, check_top5, sure_prefix};
use common::{gemma_path, ids, models_file, testdata};
use pippin::model::{load_reference, KvCache, Reference};
use pippin::sampler::argmax;
use serde_json::Value;
use std::sync::OnceLock;

fn gemma() -> &'static Reference {
    static M: OnceLock<Reference> = OnceLock::new();
    M.get_or_init(|| load_reference(&gemma_path()).expect("Gemma 3 loads").1)
}

fn q3_k_m() -> &'static Reference {
    static M: OnceLock<Reference> = OnceLock::new();
    M.get_or_init(|| {
        load_reference(&models_file("fixtures/SmolLM2-135M-Instruct.Q3_K_M.gguf"))
            .expect("Q3_K_M loads")
            .1
    })
}

/// Teacher-forced logits at each step of the reference continuation, plus those of
/// the extra prompt positions `at` (indices into the prompt).
fn teacher_forced(m: &Reference, r: &Value, at: &[usize]) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let prompt = ids(&r["prompt_token_ids"]);
    let cont = ids(&r["greedy_token_ids"]);
    let mut tokens = prompt.clone();
    tokens.extend_from_slice(&cont[..cont.len() - 1]);
    let mut positions: Vec<usize> = (prompt.len() - 1..tokens.len()).collect();
    positions.extend_from_slice(at);
    let mut all = m
        .forward_at(&mut KvCache::new(&m.config), &tokens, &positions)
        .unwrap();
    let extra = all.split_off(cont.len());
    (all, extra)
}

/// Free-running greedy decode: the tokens llama.cpp was sure of come out the same.
fn greedy_agrees(m: &Reference, r: &Value) {
    let want = sure_prefix(r);
    let mut cache = KvCache::new(&m.config);
    let mut l = m
        .forward(&mut cache, &ids(&r["prompt_token_ids"]), false)
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..want.len() {
        let t = argmax(&l) as u32;
        got.push(t);
        l = m.forward(&mut cache, &[t], false).unwrap();
    }
    assert_eq!(
        got, want,
        "{}: greedy tokens llama.cpp was sure of",
        r["name"]
    );
}

#[test]
fn gemma3_short_prompts_match_llama_cpp() {
    let refdata = testdata("gemma3-reference.json");
    for r in refdata["results"].as_array().unwrap().iter().take(2) {
        let (steps, _) = teacher_forced(gemma(), r, &[]);
        check_steps(r["name"].as_str().unwrap(), r, &steps);
        greedy_agrees(gemma(), r);
    }
}

/// 1,065 tokens, past the 512-token window of the sliding layers: the continuation
/// and llama.cpp's top 5 at positions before, at and well past the window's edge.
#[test]
fn gemma3_long_prompt_past_the_sliding_window_matches_llama_cpp() {
    let refdata = testdata("gemma3-reference.json");
    let r = &refdata["results"][2];
    assert_eq!(r["name"], "long_manifesto");
    let mid = r["mid_positions_top5"].as_object().unwrap();
    let at: Vec<usize> = mid.keys().map(|k| k.parse().unwrap()).collect();
    assert!(at.iter().any(|&p| p > 1000));
    let (steps, extra) = teacher_forced(gemma(), r, &at);
    check_steps("long_manifesto", r, &steps);
    for ((pos, top5), l) in mid.iter().zip(&extra) {
        check_top5(&format!("position {pos}"), top5, l, true);
    }
}

#[test]
fn smollm2_q3_k_m_matches_llama_cpp() {
    let refdata = testdata("smollm2-q3_k_m-reference.json");
    let results = refdata["models"]["Q3_K_M"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for r in results {
        let (steps, _) = teacher_forced(q3_k_m(), r, &[]);
        check_steps(r["name"].as_str().unwrap(), r, &steps);
        greedy_agrees(q3_k_m(), r);
    }
}

/// The file's sliding layers see 512 keys: the same prompt with the window removed
/// gives other logits once it is longer than the window, the same ones before.
#[test]
fn gemma3_window_matters_only_past_512_tokens() {
    let m = gemma();
    // A window longer than the prompt: the same layers (and their RoPE), no window.
    let mut full = Reference::new(m.config.clone(), m.weights.clone());
    full.config.sliding_window = 1 << 20;
    let refdata = testdata("gemma3-reference.json");
    let prompt = ids(&refdata["results"][2]["prompt_token_ids"]);
    let at = [300usize, 700];
    let windowed = m
        .forward_at(&mut KvCache::new(&m.config), &prompt[..701], &at)
        .unwrap();
    let unwindowed = full
        .forward_at(&mut KvCache::new(&full.config), &prompt[..701], &at)
        .unwrap();
    assert!(pippin::testing::max_abs_diff(&windowed[0], &unwindowed[0]) < 1e-3);
    assert!(pippin::testing::max_abs_diff(&windowed[1], &unwindowed[1]) > 0.1);
}
