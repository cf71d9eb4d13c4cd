//! Writes adapters in the exact file layout PEFT saves (`adapter_config.json` and
//! `adapter_model.safetensors`, Hugging Face module names and row order), with random
//! A and B: the test fixtures for the default model. `pippin make-adapter` writes one.

use super::write::{self, PeftLora, PeftSpec};
use crate::model::Config;
use crate::model::Proj;
use crate::rng::Rng;

pub struct FixtureSpec<'a> {
    pub rank: usize,
    pub alpha: f32,
    /// Hugging Face module names, e.g. ["q_proj", "v_proj"].
    pub modules: &'a [&'a str],
    pub seed: u64,
    /// B = 0: the adapter changes nothing (PEFT's initial state).
    pub zero_b: bool,
    /// Store f16 instead of f32.
    pub half: bool,
}

impl<'a> FixtureSpec<'a> {
    /// Rank `rank` on `modules` with alpha = 2 · rank (PEFT's common choice), B random,
    /// stored as f32.
    pub fn new(rank: usize, modules: &'a [&'a str], seed: u64) -> Self {
        FixtureSpec {
            rank,
            alpha: 2.0 * rank as f32,
            modules,
            seed,
            zero_b: false,
            half: false,
        }
    }
}

fn random(n: usize, rng: &mut Rng, amp: f32) -> Vec<f32> {
    (0..n).map(|_| (rng.next_f32() * 2.0 - 1.0) * amp).collect()
}

/// (adapter_config.json, adapter_model.safetensors) for model `c`.
pub fn write(c: &Config, spec: &FixtureSpec) -> (String, Vec<u8>) {
    let mut rng = Rng::new(spec.seed);
    let mut loras = Vec::new();
    for layer in 0..c.n_layers {
        for &name in spec.modules {
            let Some(proj) = Proj::ALL.into_iter().find(|p| p.hf_name() == name) else {
                continue;
            };
            let (rows, cols) = proj.shape(c);
            let a = random(spec.rank * cols, &mut rng, 1.0 / (cols as f32).sqrt());
            let b = random(
                rows * spec.rank,
                &mut rng,
                if spec.zero_b { 0.0 } else { 0.05 },
            );
            loras.push(PeftLora { layer, proj, a, b });
        }
    }
    let peft = PeftSpec {
        rank: spec.rank,
        alpha: spec.alpha,
        half: spec.half,
        base_model: "HuggingFaceTB/SmolLM2-135M-Instruct",
    };
    // The shapes are the model's own: writing cannot fail.
    write::write(c, &peft, &loras).unwrap_or_default()
}
