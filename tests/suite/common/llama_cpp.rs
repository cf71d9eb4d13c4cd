//! Comparing a model with llama.cpp's reference outputs (`../shared/testdata/
//! gemma3-reference.json`, `smollm2-q3_k_m-reference.json`). llama.cpp quantizes
//! activations to 8 bits in its dot products, so its logits are ~1 off an f32
//! forward: greedy tokens must agree while llama.cpp's margin was ≥ 1.0, logits within
//! 1.0, and a near-tie may go either way. Logits are compared as differences from the
//! step's best token (log-probability ratios: what sampling sees); a shift common to
//! every logit of a step means nothing.
#![allow(dead_code)]

use super::ids;
use pippin::sampler::argmax;
use serde_json::Value;

/// How far our logits may be from llama.cpp's.
pub const LOGIT_TOL: f32 = 1.0;

/// The reference tokens a free-running greedy generation must reproduce: those up to
/// (not including) the first step llama.cpp decided by a margin under 1.0.
pub fn sure_prefix(result: &Value) -> Vec<u32> {
    let tokens = ids(&result["greedy_token_ids"]);
    let steps = result["steps"].as_array().expect("steps");
    let n = steps
        .iter()
        .position(|s| s["margin"].as_f64().expect("margin") < 1.0)
        .unwrap_or(steps.len());
    tokens[..n].to_vec()
}

/// Teacher-forced checks of our logits at each generated step (`logits[i]` predicts
/// reference token i): the reference token is our argmax where its margin was ≥ 1,
/// within LOGIT_TOL of our best elsewhere; the first step's top-5 logits within
/// LOGIT_TOL.
pub fn check_steps(what: &str, result: &Value, logits: &[Vec<f32>]) {
    let steps = result["steps"].as_array().expect("steps");
    assert_eq!(logits.len(), steps.len(), "{what}: steps");
    for (i, (l, s)) in logits.iter().zip(steps).enumerate() {
        pippin::testing::assert_finite(&format!("{what} step {i}"), l);
        let id = s["id"].as_u64().expect("id") as usize;
        let margin = s["margin"].as_f64().expect("margin") as f32;
        let top = argmax(l);
        if margin >= 1.0 {
            assert_eq!(
                top, id,
                "{what} step {i}: our argmax {top}, llama.cpp's {id} by {margin}"
            );
        } else {
            assert!(
                l[top] - l[id] <= LOGIT_TOL,
                "{what} step {i}: llama.cpp's {id} is {} below our {top}",
                l[top] - l[id]
            );
        }
        if let (Some(r), Some(ro)) = (s["runner_up_id"].as_u64(), s["runner_up_logit"].as_f64()) {
            let logit = s["logit"].as_f64().expect("logit");
            let (ours, theirs) = (l[id] - l[r as usize], (logit - ro) as f32);
            assert!(
                (ours - theirs).abs() <= LOGIT_TOL,
                "{what} step {i}: {id} leads {r} by {ours} here, {theirs} in llama.cpp"
            );
        }
    }
    check_top5(
        &format!("{what} first step"),
        &result["top5_first_position"],
        &logits[0],
        false,
    );
}

/// llama.cpp's top 5 (`[[id, logit]; 5]`) against ours: each logit within LOGIT_TOL;
/// with `same_ids`, our 5 best are llama.cpp's 5, except where a token at the edge is
/// in a near-tie (within NEAR_TIE of our 5th best), which 8-bit activations can swap.
pub fn check_top5(what: &str, top5: &Value, l: &[f32], same_ids: bool) {
    let want: Vec<(usize, f32)> = top5
        .as_array()
        .expect("top5")
        .iter()
        .map(|e| {
            (
                e[0].as_u64().expect("id") as usize,
                e[1].as_f64().expect("logit") as f32,
            )
        })
        .collect();
    assert_eq!(want.len(), 5, "{what}");
    let (best, best_logit) = want[0];
    for &(id, logit) in &want[1..] {
        let (ours, theirs) = (l[best] - l[id], best_logit - logit);
        assert!(
            (ours - theirs).abs() <= LOGIT_TOL,
            "{what}: {best} leads {id} by {ours} here, {theirs} in llama.cpp"
        );
    }
    if !same_ids {
        return;
    }
    let mut ours: Vec<usize> = (0..l.len()).collect();
    ours.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
    let fifth = l[ours[4]];
    for &(id, _) in &want {
        assert!(
            ours[..5].contains(&id) || l[id] >= fifth - NEAR_TIE,
            "{what}: llama.cpp's top-5 token {id} is at {} here, our 5th best is {fifth}",
            l[id]
        );
    }
    for &id in &ours[..5] {
        assert!(
            want.iter().any(|e| e.0 == id) || l[id] <= l[want[4].0] + NEAR_TIE,
            "{what}: our top-5 token {id} ({}) is not in llama.cpp's top 5",
            l[id]
        );
    }
}

/// Logits this close at the edge of a top 5 may be ordered either way.
pub const NEAR_TIE: f32 = 0.3;
