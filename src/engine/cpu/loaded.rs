//! The CPU backend as the engine holds it (`CpuLoaded`, a `LoadedModel`): the model,
//! its conversation, and adapters kept as parsed (f32).

use super::{CpuBackend, CpuModel, CpuSnapshot, CpuState};
use crate::engine::backend::{
    next_adapter_id, AnyBackend, BackendKind, KvSnapshot, LoadedAdapter, LoadedModel,
};
use crate::error::{Error, Result};
use crate::model::lora::Adapter;
use crate::model::Config;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;

/// A model on the CPU backend with its conversation.
pub struct CpuLoaded {
    pub model: Box<CpuModel>,
    pub state: CpuState,
}

/// An adapter on the CPU backend: as parsed, with its id.
pub struct CpuAdapter {
    pub id: u64,
    pub adapter: Adapter,
}

impl LoadedAdapter for CpuAdapter {
    fn id(&self) -> u64 {
        self.id
    }
    fn bytes(&self) -> u64 {
        self.adapter.bytes()
    }
    fn rank(&self) -> usize {
        self.adapter.rank
    }
}

impl KvSnapshot for CpuSnapshot {
    fn bytes(&self) -> u64 {
        CpuSnapshot::bytes(self)
    }
}

impl LoadedModel for CpuLoaded {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }
    fn config(&self) -> &Config {
        &self.model.config
    }
    fn held(&self) -> (&[u32], u64) {
        self.state.held()
    }
    fn clear(&mut self) {
        self.state.clear()
    }
    fn context_window(&self) -> usize {
        self.model.config.context_length
    }
    fn threads(&self) -> usize {
        self.state.threads()
    }
    fn backend<'a>(&'a mut self, adapter: Option<&'a dyn LoadedAdapter>) -> AnyBackend<'a> {
        // An adapter another backend made is none of this one's (`upload` made ours).
        let lora = adapter
            .and_then(|a| (a as &dyn Any).downcast_ref::<CpuAdapter>())
            .map(|a| (a.id, &a.adapter));
        Box::new(CpuBackend::new(&self.model, &mut self.state, lora))
    }
    fn upload(&self, adapter: Adapter) -> Result<Box<dyn LoadedAdapter>> {
        let id = next_adapter_id();
        Ok(Box::new(CpuAdapter { id, adapter }))
    }
    fn snapshot(&mut self) -> Result<Box<dyn KvSnapshot>> {
        Ok(Box::new(self.state.snapshot()))
    }
    fn restore(&mut self, s: &dyn KvSnapshot, tokens: &[u32], adapter: u64) -> Result<()> {
        let s = (s as &dyn Any)
            .downcast_ref()
            .ok_or_else(|| Error::internal("a snapshot of another backend (a bug in Pippin)"))?;
        self.state.restore(s, tokens, adapter);
        Ok(())
    }
    fn write_state(&mut self) -> Pin<Box<dyn Future<Output = Result<Vec<u8>>> + '_>> {
        let bytes = self.state.write_state();
        Box::pin(async move { Ok(bytes) })
    }
    fn read_state(&mut self, bytes: &[u8], tokens: &[u32], adapter: u64) -> Result<()> {
        let c = &self.model.config;
        self.state.read_state(bytes, tokens, adapter, c)
    }
    fn layout(&self) -> String {
        format!("cpu {}", self.state.format() as u8)
    }
    fn weight_bytes(&self) -> u64 {
        let w = &self.model.weights;
        let layers: u64 = w
            .layers
            .iter()
            .map(|l| l.proj.0.iter().map(|m| m.bytes()).sum::<u64>())
            .sum();
        layers + w.token_embd.bytes() + w.output.as_ref().map_or(0, |o| o.bytes())
    }
    fn kv_bytes(&self) -> u64 {
        self.state.kv_bytes()
    }
}
