//! What the engine holds of a model loaded on one backend (`LoadedModel`): its weights
//! and live KV cache, the adapters made resident for it, copies of its KV state — each
//! reached through a trait, so the engine never names a backend.

use super::AnyBackend;
use crate::error::Result;
use crate::model::lora::Adapter;
use crate::model::Config;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which backend runs the model, and why (`Engine::backend_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Webgpu,
    Cpu,
}

/// Bytes of the GPU buffers an engine holds, by what they hold (the quantized weights
/// as uploaded; norms and other vectors, a few KB, are not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuBytes {
    pub weights: u64,
    pub kv_cache: u64,
    pub scratch: u64,
    pub adapters: u64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A new adapter id (never 0: "no adapter"), unique per process across backends.
pub fn next_adapter_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// A LoRA adapter as one backend holds it (uploaded to the GPU, or f32 for the CPU).
/// The backend that made it reads it back as its own type (`&dyn Any`, by upcasting).
pub trait LoadedAdapter: Any {
    /// Unique per upload: a KV cache is valid for one adapter only (0: none).
    fn id(&self) -> u64;
    fn bytes(&self) -> u64;
    fn rank(&self) -> usize;
}

/// A copy of a live KV cache, where its backend keeps it (`LoadedModel::snapshot`).
pub trait KvSnapshot: Any {
    fn bytes(&self) -> u64;
}

/// A model loaded on one backend with its conversation state (the live KV cache). As
/// `dyn Any` (upcast) it is the backend's own type, for what only that backend offers
/// (the GPU model to the bench, the CPU model as a draft).
pub trait LoadedModel: Any {
    fn kind(&self) -> BackendKind;
    fn config(&self) -> &Config;
    /// The tokens the live KV cache holds and the adapter they were run with.
    fn held(&self) -> (&[u32], u64);
    /// Tokens the KV cache holds.
    fn len(&self) -> usize {
        self.held().0.len()
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Forgets the conversation (the KV cache stays allocated).
    fn clear(&mut self);
    /// Most tokens a conversation may hold: the KV cache's length.
    fn context_window(&self) -> usize;
    /// Threads the forward pass runs on.
    fn threads(&self) -> usize {
        1
    }

    /// One call's backend, with `adapter` (made by this model's `upload`) or none.
    fn backend<'a>(&'a mut self, adapter: Option<&'a dyn LoadedAdapter>) -> AnyBackend<'a>;
    /// Makes `adapter` resident for this backend.
    fn upload(&self, adapter: Adapter) -> Result<Box<dyn LoadedAdapter>>;
    /// Prepares every pipeline a conversation uses, so the first reply does not.
    fn warm(&mut self) -> Result<()> {
        Ok(())
    }
    /// Dispatches per token of the decode step recorded for adapter `id` (GPU).
    fn recorded_dispatches(&self, _adapter: u64) -> Option<usize> {
        None
    }

    /// A copy of the live KV cache.
    fn snapshot(&mut self) -> Result<Box<dyn KvSnapshot>>;
    /// Makes the live KV cache hold `s` (this backend's snapshot of `tokens` under
    /// `adapter`) again.
    fn restore(&mut self, s: &dyn KvSnapshot, tokens: &[u32], adapter: u64) -> Result<()>;
    /// The live KV cache as bytes (a saved session's state).
    fn write_state(&mut self) -> Pin<Box<dyn Future<Output = Result<Vec<u8>>> + '_>>;
    /// Makes the live KV cache hold saved bytes of `tokens` under `adapter`.
    fn read_state(&mut self, bytes: &[u8], tokens: &[u32], adapter: u64) -> Result<()>;
    /// What a saved state's bytes depend on besides the model and adapter: the
    /// backend, its KV format and layout.
    fn layout(&self) -> String;

    /// Bytes of the model's weights (on the GPU, or in memory on the CPU backend).
    fn weight_bytes(&self) -> u64;
    fn kv_bytes(&self) -> u64;
    /// GPU memory held, adapters not counted (all zero off the GPU).
    fn gpu_bytes(&self) -> GpuBytes {
        GpuBytes::default()
    }
}
