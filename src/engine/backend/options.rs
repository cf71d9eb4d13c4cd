//! What a conversation's state may take: its context, KV format, prefill chunk and
//! the memory limits both backends check before a model's weights are read.

use crate::quant::kv::KvFormat;

/// The options of a model's session (its live KV cache and the prefix cache beside).
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Most tokens the conversation may hold (capped at the model's context length).
    pub max_context: usize,
    pub kv: KvFormat,
    /// Tokens per prefill chunk.
    pub chunk: usize,
    /// Bytes of KV state the prefix cache may keep (other sessions' and common
    /// prefixes'); `None`: about one KV cache at `max_context` in int8.
    pub session_memory: Option<u64>,
    /// The CPU backend's memory: a model whose weights, KV cache at `max_context` and
    /// scratch need more is refused before its weights are read (`DeviceLimits`).
    /// The browser sets what a wasm32 instance can address; natively `None`.
    pub cpu_memory: Option<u64>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            max_context: 4096,
            kv: KvFormat::Int8,
            chunk: 64,
            cpu_memory: None,
            session_memory: None,
        }
    }
}

impl SessionOptions {
    /// The browser's defaults: a context of 2048 tokens (a page shares the device's
    /// memory with everything else the user runs) and the CPU backend held to what a
    /// wasm32 instance can still address (`addressable` bytes).
    pub fn in_browser(addressable: u64) -> Self {
        SessionOptions {
            max_context: 2048,
            cpu_memory: Some(addressable),
            ..Default::default()
        }
    }

    /// The prefix cache's budget for a model of config `c`.
    pub fn snapshot_budget(&self, c: &crate::model::Config) -> u64 {
        let context = self.max_context.min(c.context_length) as u64;
        let default = 2 * c.n_layers as u64 * context * c.kv_dim() as u64;
        self.session_memory.unwrap_or(default)
    }
}
