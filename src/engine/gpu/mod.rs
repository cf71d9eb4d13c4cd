//! The GPU backend: the model's weights uploaded in their formats (`GpuModel`), a
//! conversation's KV cache and activations with its decode step recorded once and
//! replayed (`GpuSession`), LoRA adapters as GPU matrices (`GpuLoraAdapter`), and the
//! three as the engine holds them (`GpuLoaded`, a `LoadedModel`).

mod lora;
mod model;
pub(crate) mod session;

pub use lora::{GpuLora, GpuLoraAdapter};
pub use model::{GpuLayer, GpuModel};
pub use session::{GpuBackend, GpuFootprint, GpuSession, GpuSnapshot};

use super::backend::{AnyBackend, BackendKind, GpuBytes, KvSnapshot, LoadedAdapter, LoadedModel};
use crate::adapters::Adapter;
use crate::error::{Error, Result};
use crate::model::Config;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;

/// A model on the GPU with its conversation.
pub struct GpuLoaded {
    pub model: Box<GpuModel>,
    pub session: Box<GpuSession>,
}

impl LoadedAdapter for GpuLoraAdapter {
    fn id(&self) -> u64 {
        self.id
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }
    fn rank(&self) -> usize {
        self.rank
    }
}

impl KvSnapshot for GpuSnapshot {
    fn bytes(&self) -> u64 {
        GpuSnapshot::bytes(self)
    }
}

/// The error of handing one backend another's adapter or snapshot.
pub(crate) fn foreign(what: &str) -> Error {
    Error::internal(format!("{what} of another backend (a bug in Pippin)"))
}

impl LoadedModel for GpuLoaded {
    fn kind(&self) -> BackendKind {
        BackendKind::Webgpu
    }
    fn config(&self) -> &Config {
        &self.model.config
    }
    fn held(&self) -> (&[u32], u64) {
        self.session.held()
    }
    fn len(&self) -> usize {
        self.session.len()
    }
    fn clear(&mut self) {
        self.session.clear()
    }
    fn context_window(&self) -> usize {
        self.session.max_context()
    }
    fn backend<'a>(&'a mut self, adapter: Option<&'a dyn LoadedAdapter>) -> AnyBackend<'a> {
        // An adapter another backend made is none of this one's (`upload` made ours).
        let adapter = adapter.and_then(|a| (a as &dyn Any).downcast_ref::<GpuLoraAdapter>());
        Box::new(GpuBackend::with_adapter(
            &self.model,
            &mut self.session,
            adapter,
        ))
    }
    fn upload(&self, adapter: Adapter) -> Result<Box<dyn LoadedAdapter>> {
        Ok(Box::new(GpuLoraAdapter::upload(&self.model.gpu, &adapter)?))
    }
    fn warm(&mut self) -> Result<()> {
        self.session.warm(&self.model)
    }
    fn recorded_dispatches(&self, adapter: u64) -> Option<usize> {
        self.session.recorded_dispatches(adapter)
    }
    fn snapshot(&mut self) -> Result<Box<dyn KvSnapshot>> {
        Ok(Box::new(self.session.snapshot(&self.model.gpu)?))
    }
    fn restore(&mut self, s: &dyn KvSnapshot, tokens: &[u32], adapter: u64) -> Result<()> {
        let s = (s as &dyn Any)
            .downcast_ref()
            .ok_or_else(|| foreign("a snapshot"))?;
        self.session.restore(&self.model.gpu, s, tokens, adapter)
    }
    fn write_state(&mut self) -> Pin<Box<dyn Future<Output = Result<Vec<u8>>> + '_>> {
        Box::pin(self.session.write_state(&self.model.gpu))
    }
    fn read_state(&mut self, bytes: &[u8], tokens: &[u32], adapter: u64) -> Result<()> {
        self.session
            .read_state(&self.model.gpu, bytes, tokens, adapter)
    }
    fn layout(&self) -> String {
        self.session.layout()
    }
    fn weight_bytes(&self) -> u64 {
        self.model.weight_bytes
    }
    fn kv_bytes(&self) -> u64 {
        self.session.kv_bytes()
    }
    fn gpu_bytes(&self) -> GpuBytes {
        GpuBytes {
            weights: self.model.weight_bytes,
            kv_cache: self.session.kv_bytes(),
            scratch: self.session.scratch_bytes(),
            adapters: 0,
        }
    }
}
