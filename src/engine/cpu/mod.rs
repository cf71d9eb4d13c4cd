//! The CPU backend: the forward pass of `model::Reference` over weights kept in their
//! quantized form (`QMatrix`), with 16-bit activations and integer dot products where
//! the format allows (wasm SIMD128 in the browser). It runs where WebGPU is missing or
//! only a software adapter exists, and natively with `pippin generate --cpu`.
//! `ReferenceSession` runs the f32 reference itself (the ground truth of tests).

pub mod dot;
mod footprint;
pub mod kv;
mod load;
mod loaded;
pub mod matrix;
pub mod team;

use super::backend::{Backend, Logits, Reader, Want, Writer};
use crate::adapters::Adapter;
use crate::error::{Error, Result};
use crate::model::reference::KvStore;
use crate::model::{Linear, Reference};
use crate::quant::kv::KvFormat;
pub use footprint::Footprint;
use kv::Cache;
pub use load::{load, load_shared};
pub use loaded::{CpuAdapter, CpuLoaded};
pub use matrix::{QMatrix, TOKENWISE};
use std::sync::Arc;
use team::Team;

/// The model of the CPU backend.
pub type CpuModel = Reference<QMatrix>;

/// What a CPU conversation keeps between calls: the KV cache (int8 or f32), the tokens
/// it holds and the adapter they were run with (a cache is valid for one adapter).
pub struct CpuState {
    format: KvFormat,
    /// The threads holding parts of the model, if any (their failure fails every call).
    team: Option<Arc<dyn Team>>,
    cache: Option<Cache>,
    tokens: Vec<u32>,
    adapter: u64,
}

impl Default for CpuState {
    fn default() -> Self {
        Self::new(KvFormat::F32)
    }
}

impl CpuState {
    /// A state whose KV cache is f32 (`KvFormat::F32`) or int8 (any other format).
    pub fn new(format: KvFormat) -> Self {
        CpuState {
            format,
            team: None,
            cache: None,
            tokens: Vec::new(),
            adapter: 0,
        }
    }

    /// This state's model runs on `team`'s threads.
    pub fn with_team(mut self, team: Option<Arc<dyn Team>>) -> Self {
        self.team = team;
        self
    }

    /// Threads the model runs on.
    pub fn threads(&self) -> usize {
        self.team.as_ref().map_or(1, |t| t.helpers() + 1)
    }

    /// Fails once a thread holding part of the model is lost.
    fn check_team(&self) -> Result<()> {
        match self.team.as_ref().and_then(|t| t.failure()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub fn clear(&mut self) {
        self.cache = None;
        self.tokens.clear();
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Bytes of the KV cache (keys, values and their scales, of every layer).
    pub fn kv_bytes(&self) -> u64 {
        self.cache.as_ref().map_or(0, Cache::bytes)
    }

    /// The tokens held and the adapter they were run with.
    pub fn held(&self) -> (&[u32], u64) {
        (&self.tokens, self.adapter)
    }

    /// A copy of the KV cache (the prefix cache's snapshot).
    pub fn snapshot(&self) -> CpuSnapshot {
        CpuSnapshot(self.cache.clone())
    }

    /// Holds `s` again: the keys and values of `tokens` under adapter `adapter`.
    pub fn restore(&mut self, s: &CpuSnapshot, tokens: &[u32], adapter: u64) {
        self.cache = s.0.clone();
        self.tokens = tokens.to_vec();
        self.adapter = adapter;
    }

    /// The KV cache's bytes for a saved session (`Cache::write`).
    pub fn write_state(&self) -> Vec<u8> {
        let mut w = Writer::default();
        if let Some(c) = &self.cache {
            c.write(&mut w);
        }
        w.0
    }

    /// Holds the saved keys and values `bytes` of `tokens` under `adapter`.
    pub fn read_state(
        &mut self,
        bytes: &[u8],
        tokens: &[u32],
        adapter: u64,
        c: &crate::model::Config,
    ) -> Result<()> {
        let cache = match bytes.is_empty() {
            true => None,
            false => Some(Cache::read(&mut Reader::new(bytes), c, self.format)?),
        };
        let len = cache.as_ref().map_or(0, Cache::positions);
        if len != tokens.len() {
            return Err(crate::engine::backend::damaged());
        }
        self.cache = cache;
        self.tokens = tokens.to_vec();
        self.adapter = adapter;
        Ok(())
    }

    /// The KV cache's format (what a saved session must match).
    pub fn format(&self) -> KvFormat {
        self.format
    }
}

/// A copy of a CPU conversation's KV cache.
pub struct CpuSnapshot(Option<Cache>);

impl CpuSnapshot {
    pub fn bytes(&self) -> u64 {
        self.0.as_ref().map_or(0, Cache::bytes)
    }
}

/// A model, its state and the adapter a call runs with: a generate-loop backend.
pub struct CpuBackend<'a, M = QMatrix> {
    model: &'a Reference<M>,
    state: &'a mut CpuState,
    adapter: Option<&'a Adapter>,
}

impl<'a, M: Linear> CpuBackend<'a, M> {
    /// The model with an adapter (`id`, never 0) or none. A KV cache computed with
    /// another adapter is dropped now, before the caller asks which tokens it holds:
    /// the conversation is run again from its start.
    pub fn new(
        model: &'a Reference<M>,
        state: &'a mut CpuState,
        adapter: Option<(u64, &'a Adapter)>,
    ) -> Self {
        let id = adapter.map_or(0, |a| a.0);
        if id != state.adapter {
            state.clear();
            state.adapter = id;
        }
        CpuBackend {
            model,
            state,
            adapter: adapter.map(|a| a.1),
        }
    }

    fn run(&mut self, tokens: &[u32], all: bool) -> Result<Vec<f32>> {
        self.state.check_team()?;
        let (config, format) = (&self.model.config, self.state.format);
        let cache = self
            .state
            .cache
            .get_or_insert_with(|| Cache::new(config, format));
        // One forward for both formats (dyn: a copy of the forward is wasm bytes).
        let kv: &mut dyn KvStore = match cache {
            Cache::F32(c) => c,
            Cache::Int8(c) => c,
        };
        let logits = self.model.forward_adapted(kv, tokens, all, self.adapter)?;
        // A round that failed left NaNs: the call fails, and the cache holds positions
        // its tokens do not record (every later call fails the same way).
        self.state.check_team()?;
        self.state.tokens.extend_from_slice(tokens);
        Ok(logits)
    }
}

impl<M: Linear> Backend for CpuBackend<'_, M> {
    /// Always the full logits: the sampler applies the penalty and filters on the CPU.
    async fn forward(&mut self, tokens: &[u32], _want: Want<'_>) -> Result<Logits> {
        Ok(Logits::Full(self.run(tokens, false)?))
    }
    fn tokens(&self) -> &[u32] {
        &self.state.tokens
    }
    async fn log_probs(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let logits = self.run(tokens, true)?;
        let vocab = self.model.config.vocab_size;
        Ok(crate::sampler::log_probs_from_logits(
            &logits, tokens, vocab,
        ))
    }
    fn truncate(&mut self, len: usize) {
        let kept = match &mut self.state.cache {
            Some(c) => c.truncate(len, &self.model.config),
            None => 0,
        };
        self.state.tokens.truncate(kept);
    }
    fn context_length(&self) -> usize {
        self.model.config.context_length
    }
    fn verifies(&self) -> usize {
        TOKENWISE
    }
    /// One pass over up to `TOKENWISE` tokens takes the one-token kernels for each:
    /// every position's logits are those of one-token steps, bit for bit.
    async fn verify(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        if tokens.len() > TOKENWISE {
            return Err(Error::invalid(format!(
                "{} positions to verify; at most {TOKENWISE} in one pass",
                tokens.len()
            )));
        }
        let logits = self.run(tokens, true)?;
        let vocab = self.model.config.vocab_size;
        Ok(logits.chunks_exact(vocab).map(<[f32]>::to_vec).collect())
    }
}

/// The f32 reference as a generation backend (tests, `pippin quality`).
pub struct ReferenceSession<'m> {
    model: &'m Reference,
    state: CpuState,
}

impl<'m> ReferenceSession<'m> {
    pub fn new(model: &'m Reference) -> Self {
        ReferenceSession {
            model,
            state: CpuState::default(),
        }
    }

    fn backend(&mut self) -> CpuBackend<'_, Vec<f32>> {
        CpuBackend::new(self.model, &mut self.state, None)
    }
}

impl Backend for ReferenceSession<'_> {
    async fn forward(&mut self, tokens: &[u32], want: Want<'_>) -> Result<Logits> {
        self.backend().forward(tokens, want).await
    }
    fn tokens(&self) -> &[u32] {
        &self.state.tokens
    }
    async fn log_probs(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.backend().log_probs(tokens).await
    }
    fn truncate(&mut self, len: usize) {
        self.backend().truncate(len)
    }
    fn context_length(&self) -> usize {
        self.model.config.context_length
    }
    fn verifies(&self) -> usize {
        TOKENWISE
    }
    async fn verify(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        self.backend().verify(tokens).await
    }
}
