//! Calibration text the original model writes itself (LLM-QAT's data-free
//! distillation, Liu et al. 2023): samples that start at a random ordinary token, take
//! the model's most likely tokens for a few steps (a random first token alone makes an
//! incoherent start) and then sample at temperature 1, so that they follow the
//! model's own distribution over every kind of text it knows, where a few thousand
//! words of one project's prose cover one register. The student is then fitted to the
//! teacher where the teacher actually puts its probability.

use crate::engine::{Backend, Engine, Logits, SessionOptions, Want};
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::sampler::{argmax, Sampler, SamplerOptions};
use crate::tokenizer::Tokenizer;
use std::path::Path;

/// The greedy steps after the random first token (LLM-QAT: 3 to 5).
const GREEDY: usize = 4;

/// `n` samples of up to `len` tokens each from the model in `source` (the CPU
/// backend), one after another; a sample ends early at an end-of-text or other
/// special token. Deterministic for `seed`. `progress` hears (samples done, n).
pub async fn self_written(
    source: &Path,
    n: usize,
    len: usize,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<u32>> {
    let session = SessionOptions {
        max_context: len.max(2),
        ..SessionOptions::default()
    };
    let mut engine = Engine::load_file_cpu(source, session).await?;
    let ordinary = ordinary_tokens(engine.tokenizer());
    let vocab = ordinary.len() as u32;
    if !ordinary.contains(&true) {
        return Err(Error::invalid(
            "the model's vocabulary has no ordinary token to start a sample from",
        ));
    }
    let mut pick = Rng::new(seed);
    let mut out = Vec::with_capacity(n * len);
    let mut b = engine.backend()?;
    for i in 0..n {
        let first = loop {
            let id = (pick.next_f32() * vocab as f32) as u32 % vocab.max(1);
            if ordinary[id as usize] {
                break id;
            }
        };
        let mut sampler = Sampler::new(SamplerOptions {
            temperature: 1.0,
            top_p: 1.0,
            seed: seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ..SamplerOptions::default()
        });
        b.truncate(0);
        let mut sample = vec![first];
        while sample.len() < len {
            let last = sample[sample.len() - 1];
            let Logits::Full(mut logits) = b.forward(&[last], Want::logits()).await? else {
                return Err(Error::internal("the CPU backend gives full logits"));
            };
            let next = match sample.len() <= GREEDY {
                true => argmax(&logits) as u32,
                false => sampler.sample(&mut logits, &sample),
            };
            if !ordinary.get(next as usize).copied().unwrap_or(false) {
                break; // end of text, a chat marker: the sample is over
            }
            sample.push(next);
        }
        out.extend(sample);
        progress(i + 1, n);
    }
    Ok(out)
}

/// Which tokens are text: not a stop token and not special (a special token's text
/// is skipped when decoding), and not empty.
fn ordinary_tokens(tk: &Tokenizer) -> Vec<bool> {
    let stops = tk.stop_tokens();
    (0..tk.vocab_size() as u32)
        .map(|id| {
            let text = |skip| tk.decode(&[id], skip).unwrap_or_default();
            let kept = text(true);
            !stops.contains(&id) && !kept.is_empty() && kept == text(false)
        })
        .collect()
}
