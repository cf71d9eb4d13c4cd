//! The engine: a loaded model with its tokenizer, adapters and conversation (`Engine`),
//! the replies it generates (`Generation`) and what a reply is asked and answers
//! (`GenerateOptions`, `Event`, `Usage`). It drives the backends (`gpu`, `cpu`) only
//! through the interface below it (`backend`); nothing under `backend`, `gpu` or `cpu`
//! imports from here.

pub mod backend;
pub mod choice;
pub mod cpu;
pub mod generation;
pub mod gpu;
mod instance;
pub mod logprobs;
pub mod perplexity;
pub mod prefix_cache;
pub mod speculate;
mod stop;
pub mod tools;

pub use crate::gguf::{ByteSource, Progress, ReadSource};
pub use backend::{
    common_prefix, verify_by_steps, AnyBackend, Backend, BackendKind, GpuBytes, LateMask, Logits,
    Masked, Pick, SessionOptions, Want,
};
pub use cpu::{CpuBackend, CpuModel, CpuState, QMatrix, ReferenceSession};
pub use gpu::{GpuBackend, GpuFootprint, GpuLayer, GpuLora, GpuLoraAdapter, GpuModel, GpuSession};
pub use instance::{busy, AdapterChoice, Engine, Prompt, ResidentAdapter};
pub use logprobs::{LogitBias, TokenLogprob};
pub use speculate::{Speculation, SpeculationStats};

use crate::guided::ResponseFormat;
use crate::sampler::SamplerOptions;
pub use generation::{generate, generate_calls, generate_drafted, Generation};

/// Most candidates sampling considers: the GPU selects at most this many tokens, so
/// top-p and min-p act within the 64 most likely (their tail beyond is negligible).
pub const MAX_CANDIDATES: usize = crate::kernels::sample::MAX_K;
use crate::tokenizer::{Tool, ToolCall};
use serde::{Deserialize, Serialize};
pub use tools::{CallReader, ToolChoice, ToolMode};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GenerateOptions {
    pub max_tokens: usize,
    #[serde(flatten)]
    pub sampler: SamplerOptions,
    /// Generation ends before any of these strings; the string itself is not emitted.
    pub stop: Vec<String>,
    /// The shape the reply must have (guided generation); it ends ("stop") when the
    /// shape is complete.
    pub response_format: Option<ResponseFormat>,
    /// Tools the model may call (a chat only; see `tools::prepare`).
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    /// Speculative decoding (the same text either way; see `speculate`).
    pub speculation: Speculation,
    /// `Some(n)`: each generated token's log-probability, with the `n` (0 to 20) most
    /// likely tokens at its position (see `logprobs`).
    pub logprobs: Option<usize>,
    /// Added to these tokens' logits before sampling (-100 to 100).
    pub logit_bias: LogitBias,
}

impl GenerateOptions {
    /// The defaults (greedy, no stop strings), at most `max_tokens` tokens.
    pub fn up_to(max_tokens: usize) -> Self {
        GenerateOptions {
            max_tokens,
            ..Default::default()
        }
    }
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampler: SamplerOptions::default(),
            stop: Vec::new(),
            response_format: None,
            tools: Vec::new(),
            tool_choice: None,
            speculation: Speculation::Auto,
            logprobs: None,
            logit_bias: LogitBias::default(),
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
    /// The reply is a tool call (returned parsed, not as text).
    #[serde(rename = "tool_calls")]
    ToolCalls,
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
    /// From the reply's start (its template and tokens included) to its first
    /// piece of text: what a user waits for (0 until there is one).
    pub time_to_first_token_ms: f64,
    /// Speculative decoding's guesses, kept guesses and forwards.
    pub speculation: SpeculationStats,
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

/// What a generation yields: pieces of text, then one `Done`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Text (valid UTF-8, possibly several tokens' worth) and the last token in it;
    /// with `logprobs` asked for, those of the tokens handled since the last text.
    Text {
        text: String,
        token: u32,
        logprobs: Vec<TokenLogprob>,
    },
    Done {
        finish: FinishReason,
        usage: Usage,
        /// The calls of a reply that ends `ToolCalls`.
        calls: Vec<ToolCall>,
    },
}
