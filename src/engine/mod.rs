//! The generate loop, shared by every backend: prefill the prompt, then sample, stream
//! and stop (stop tokens, stop strings, max tokens, context length, abort).

mod cpu;
mod stop;

pub use cpu::CpuSession;

use crate::error::{Error, Result};
use crate::sampler::{Sampler, SamplerOptions};
use crate::tokenizer::{TextStream, Tokenizer};
use serde::{Deserialize, Serialize};
use stop::StopStrings;
use web_time::Instant;

/// Something that runs the model: the CPU reference now, the GPU engine later.
pub trait Backend {
    /// Runs `tokens` after those already in the KV cache; returns the logits of the
    /// last one.
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>>;
    /// Tokens in the KV cache.
    fn position(&self) -> usize;
    fn context_length(&self) -> usize;
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

/// Generates after `prompt`, calling `on_text(text, token)` for each piece of text;
/// returning `false` from it aborts. The backend's KV cache keeps everything that
/// was run, so a later call continues the conversation.
pub fn generate<B: Backend>(
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
    let (used, ctx) = (backend.position(), backend.context_length());
    if used + prompt.len() >= ctx {
        return Err(Error::invalid(format!(
            "the prompt has {} tokens but only {} of the context of {ctx} are left",
            prompt.len(),
            ctx.saturating_sub(used + 1)
        )));
    }
    let mut usage = Usage {
        prompt_tokens: prompt.len(),
        ..Default::default()
    };
    let mut sampler = Sampler::new(opts.sampler.clone());
    let mut history = prompt.to_vec();
    let mut text = TextStream::new();
    let mut stops = StopStrings::new(&opts.stop);

    let t0 = Instant::now();
    let mut logits = backend.forward(prompt)?;
    usage.prefill_ms = ms_since(t0);
    let t1 = Instant::now();
    let finish = loop {
        if usage.generated_tokens >= opts.max_tokens {
            break FinishReason::Length;
        }
        let token = sampler.sample(&mut logits, &history);
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
        if usage.generated_tokens >= opts.max_tokens || backend.position() + 1 >= ctx {
            break FinishReason::Length;
        }
        logits = backend.forward(&[token])?;
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
