//! The generate loop, shared by every backend: prefill the prompt, then sample, stream
//! and stop (stop tokens, stop strings, max tokens, context length, abort).

mod cpu;
mod gpu_model;
mod gpu_session;
mod stop;

pub use cpu::CpuSession;
pub use gpu_model::{GpuLayer, GpuModel};
pub use gpu_session::{GpuSession, SessionOptions};

use crate::error::{Error, Result};
use crate::sampler::{Sampler, SamplerOptions};

/// Most candidates sampling considers: the GPU selects at most this many tokens, so
/// top-p and min-p act within the 64 most likely (their tail beyond is negligible).
pub const MAX_CANDIDATES: usize = crate::kernels::sample::MAX_K;
use crate::tokenizer::{TextStream, Tokenizer};
use serde::{Deserialize, Serialize};
use stop::StopStrings;
use web_time::Instant;

/// What the caller needs from a forward pass.
#[derive(Clone, Debug)]
pub struct Want<'a> {
    /// `Some(k)`: the k most likely tokens (1 = greedy); `None`: all the logits.
    pub top_k: Option<usize>,
    /// Repetition penalty applied to `penalty_ids` before selection (1 = none).
    pub penalty: f32,
    pub penalty_ids: &'a [u32],
}

impl Want<'_> {
    pub fn logits() -> Want<'static> {
        Want {
            top_k: None,
            penalty: 1.0,
            penalty_ids: &[],
        }
    }
}

/// A forward pass's result for the last token.
#[derive(Clone, Debug, PartialEq)]
pub enum Logits {
    /// Every logit, before any penalty.
    Full(Vec<f32>),
    /// The most likely tokens, best first, after the penalty.
    Top(Vec<(u32, f32)>),
}

/// Something that runs the model: the CPU reference or the GPU engine. It keeps the
/// tokens its KV cache holds, so a conversation only runs what is new.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// Runs `tokens` after those already in the KV cache.
    async fn forward(&mut self, tokens: &[u32], want: Want<'_>) -> Result<Logits>;
    /// Tokens in the KV cache.
    fn tokens(&self) -> &[u32];
    /// Forgets cached tokens from `len` on.
    fn truncate(&mut self, len: usize);
    fn context_length(&self) -> usize;
}

/// How many leading tokens two sequences share.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GenerateOptions {
    pub max_tokens: usize,
    #[serde(flatten)]
    pub sampler: SamplerOptions,
    /// Generation ends before any of these strings; the string itself is not emitted.
    pub stop: Vec<String>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampler: SamplerOptions::default(),
            stop: Vec::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// A stop token or stop string.
    Stop,
    /// max_tokens or the context length.
    Length,
    /// The caller asked to stop.
    Abort,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens found in the KV cache from an earlier turn (not run again).
    pub cached_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

impl Usage {
    pub fn prefill_tokens_per_s(&self) -> f64 {
        rate(self.prompt_tokens, self.prefill_ms)
    }
    /// The first generated token comes from the prefill, so decode made one fewer.
    pub fn decode_tokens_per_s(&self) -> f64 {
        rate(self.generated_tokens.saturating_sub(1), self.decode_ms)
    }
}

fn rate(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1000.0 / ms
    } else {
        0.0
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// Generates after `prompt` (the whole conversation so far), calling
/// `on_text(text, token)` for each piece of text; returning `false` from it aborts.
/// The part of `prompt` already in the backend's KV cache is not run again.
pub async fn generate<B: Backend>(
    backend: &mut B,
    tk: &Tokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_text: impl FnMut(&str, u32) -> bool,
) -> Result<(FinishReason, Usage)> {
    opts.sampler.validate().map_err(Error::invalid)?;
    if prompt.is_empty() {
        return Err(Error::invalid("the prompt is empty"));
    }
    let ctx = backend.context_length();
    if prompt.len() >= ctx {
        return Err(Error::invalid(format!(
            "the prompt has {} tokens but the context holds {ctx} (and one more is needed to answer)",
            prompt.len()
        )));
    }
    // Reuse the KV cache of an earlier turn: run only what differs, at least one token.
    let keep = common_prefix(backend.tokens(), prompt).min(prompt.len() - 1);
    backend.truncate(keep);
    let mut usage = Usage {
        prompt_tokens: prompt.len(),
        cached_tokens: keep,
        ..Default::default()
    };
    let mut sampler = Sampler::new(opts.sampler.clone());
    let mut history = prompt.to_vec();
    let mut text = TextStream::new();
    let mut stops = StopStrings::new(&opts.stop);
    let top_k = if opts.sampler.temperature == 0.0 {
        1
    } else if opts.sampler.top_k == 0 {
        MAX_CANDIDATES
    } else {
        opts.sampler.top_k.min(MAX_CANDIDATES)
    };

    let t0 = Instant::now();
    let ids = sampler.penalized_ids(&history);
    let want = Want {
        top_k: Some(top_k),
        penalty: opts.sampler.repetition_penalty,
        penalty_ids: &ids,
    };
    let mut logits = backend.forward(&prompt[keep..], want).await?;
    usage.prefill_ms = ms_since(t0);
    let t1 = Instant::now();
    let finish = loop {
        if usage.generated_tokens >= opts.max_tokens {
            break FinishReason::Length;
        }
        let token = sampler.choose(logits, &history);
        usage.generated_tokens += 1;
        if tk.stop_tokens().contains(&token) {
            break FinishReason::Stop;
        }
        history.push(token);
        let (piece, hit) = stops.push(&text.push(tk, token)?);
        if !piece.is_empty() && !on_text(&piece, token) {
            break FinishReason::Abort;
        }
        if hit {
            break FinishReason::Stop;
        }
        if usage.generated_tokens >= opts.max_tokens || backend.tokens().len() + 1 >= ctx {
            break FinishReason::Length;
        }
        let ids = sampler.penalized_ids(&history);
        let want = Want {
            top_k: Some(top_k),
            penalty: opts.sampler.repetition_penalty,
            penalty_ids: &ids,
        };
        logits = backend.forward(&[token], want).await?;
    };
    usage.decode_ms = ms_since(t1);
    if finish != FinishReason::Abort {
        let rest = stops.finish(&text.finish(tk)?);
        if !rest.is_empty() {
            on_text(&rest, *history.last().unwrap_or(&0));
        }
    }
    Ok((finish, usage))
}
