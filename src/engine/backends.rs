//! The two backends as the engine holds them: the model and its conversation state on
//! the GPU or on the CPU (`Body`), their adapters (`Resident`), and the generate loop's
//! view of either (`AnyBackend`).

use super::cpu::{CpuBackend, CpuModel, CpuState};
use super::gpu_adapter::GpuAdapter;
use super::prefix_cache::{KvState, Snapshot};
use super::{Backend, GpuBackend, GpuModel, GpuSession, LateMask, Logits, Want};
use crate::adapters::Adapter;
use crate::error::{Error, Result};

/// An adapter as the backend holds it: uploaded to the GPU, or f32 for the CPU.
pub enum Resident {
    Gpu(GpuAdapter),
    Cpu { id: u64, adapter: Adapter },
}

impl Resident {
    pub fn id(&self) -> u64 {
        match self {
            Resident::Gpu(a) => a.id,
            Resident::Cpu { id, .. } => *id,
        }
    }
    pub fn bytes(&self) -> u64 {
        match self {
            Resident::Gpu(a) => a.bytes,
            Resident::Cpu { adapter, .. } => adapter.bytes(),
        }
    }
    pub fn rank(&self) -> usize {
        match self {
            Resident::Gpu(a) => a.rank,
            Resident::Cpu { adapter, .. } => adapter.rank,
        }
    }
    pub fn gpu(&self) -> Option<&GpuAdapter> {
        match self {
            Resident::Gpu(a) => Some(a),
            Resident::Cpu { .. } => None,
        }
    }
}

/// Which backend runs the model, and why (`Engine::backend_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Webgpu,
    Cpu,
}

/// The model and its conversation state on one backend.
pub enum Body {
    Gpu {
        model: Box<GpuModel>,
        session: Box<GpuSession>,
    },
    Cpu {
        model: Box<CpuModel>,
        state: CpuState,
    },
}

impl Body {
    /// The tokens the live KV cache holds and the adapter they were run with.
    pub fn held(&self) -> (&[u32], u64) {
        match self {
            Body::Gpu { session, .. } => session.held(),
            Body::Cpu { state, .. } => state.held(),
        }
    }

    /// A copy of the live KV cache.
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        let (tokens, adapter) = self.held();
        let (tokens, adapter) = (tokens.to_vec(), adapter);
        let state = match self {
            Body::Gpu { model, session } => KvState::Gpu(session.snapshot(&model.gpu)?),
            Body::Cpu { state, .. } => KvState::Cpu(state.snapshot()),
        };
        Ok(Snapshot {
            tokens,
            adapter,
            state,
        })
    }

    /// Makes the live KV cache hold `s` again.
    pub fn restore(&mut self, s: &Snapshot) -> Result<()> {
        match (self, &s.state) {
            (Body::Gpu { model, session }, KvState::Gpu(g)) => {
                session.restore(&model.gpu, g, &s.tokens, s.adapter)
            }
            (Body::Cpu { state, .. }, KvState::Cpu(c)) => {
                state.restore(c, &s.tokens, s.adapter);
                Ok(())
            }
            _ => Err(Error::gpu(
                "a snapshot of another backend (a bug in Pippin)",
            )),
        }
    }

    /// The live KV cache as bytes (a saved session's state).
    pub async fn write_state(&mut self) -> Result<Vec<u8>> {
        match self {
            Body::Gpu { model, session } => session.write_state(&model.gpu).await,
            Body::Cpu { state, .. } => Ok(state.write_state()),
        }
    }

    /// Makes the live KV cache hold saved bytes of `tokens` under `adapter`.
    pub fn read_state(&mut self, bytes: &[u8], tokens: &[u32], adapter: u64) -> Result<()> {
        match self {
            Body::Gpu { model, session } => session.read_state(&model.gpu, bytes, tokens, adapter),
            Body::Cpu { model, state } => state.read_state(bytes, tokens, adapter, &model.config),
        }
    }

    /// What a saved state's bytes depend on besides the model and adapter: the
    /// backend, its KV format and layout.
    pub fn layout(&self) -> String {
        match self {
            Body::Gpu { session, .. } => session.layout(),
            Body::Cpu { state, .. } => format!("cpu {}", state.format() as u8),
        }
    }
}

/// The backend of one call: the GPU session or the CPU model, with an adapter.
pub enum AnyBackend<'a> {
    Gpu(GpuBackend<'a>),
    Cpu(CpuBackend<'a>),
}

impl Backend for AnyBackend<'_> {
    async fn forward(&mut self, tokens: &[u32], want: Want<'_>) -> Result<Logits> {
        match self {
            AnyBackend::Gpu(b) => b.forward(tokens, want).await,
            AnyBackend::Cpu(b) => b.forward(tokens, want).await,
        }
    }
    fn tokens(&self) -> &[u32] {
        match self {
            AnyBackend::Gpu(b) => b.tokens(),
            AnyBackend::Cpu(b) => b.tokens(),
        }
    }
    fn truncate(&mut self, len: usize) {
        match self {
            AnyBackend::Gpu(b) => b.truncate(len),
            AnyBackend::Cpu(b) => b.truncate(len),
        }
    }
    async fn log_probs(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        match self {
            AnyBackend::Gpu(b) => b.log_probs(tokens).await,
            AnyBackend::Cpu(b) => b.log_probs(tokens).await,
        }
    }
    fn context_length(&self) -> usize {
        match self {
            AnyBackend::Gpu(b) => b.context_length(),
            AnyBackend::Cpu(b) => b.context_length(),
        }
    }
    fn verifies(&self) -> usize {
        match self {
            AnyBackend::Gpu(b) => b.verifies(),
            AnyBackend::Cpu(b) => b.verifies(),
        }
    }
    async fn verify(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        match self {
            AnyBackend::Gpu(b) => b.verify(tokens).await,
            AnyBackend::Cpu(b) => b.verify(tokens).await,
        }
    }
    fn chains(&self) -> bool {
        match self {
            AnyBackend::Gpu(b) => b.chains(),
            AnyBackend::Cpu(b) => b.chains(),
        }
    }
    fn submit(&mut self, tokens: &[u32], want: Want<'_>) -> Result<()> {
        match self {
            AnyBackend::Gpu(b) => b.submit(tokens, want),
            AnyBackend::Cpu(b) => b.submit(tokens, want),
        }
    }
    async fn chosen(&mut self) -> Result<u32> {
        match self {
            AnyBackend::Gpu(b) => b.chosen().await,
            AnyBackend::Cpu(b) => b.chosen().await,
        }
    }
    fn cancel(&mut self) {
        match self {
            AnyBackend::Gpu(b) => b.cancel(),
            AnyBackend::Cpu(b) => b.cancel(),
        }
    }
    async fn forward_masked(
        &mut self,
        tokens: &[u32],
        want: Want<'_>,
        mask: LateMask<'_>,
    ) -> Result<Logits> {
        match self {
            AnyBackend::Gpu(b) => b.forward_masked(tokens, want, mask).await,
            AnyBackend::Cpu(b) => b.forward_masked(tokens, want, mask).await,
        }
    }
}
