//! A session running on its model: the `Backend` the generate loop drives.

use super::GpuSession;
use crate::engine::backend::{Backend, Logits, Masked, Want};
use crate::engine::gpu::lora::GpuLoraAdapter;
use crate::engine::gpu::GpuModel;
use crate::error::Result;

/// A session running on its model: what the generate loop drives.
pub struct GpuBackend<'a> {
    model: &'a GpuModel,
    session: &'a mut GpuSession,
    adapter: Option<&'a GpuLoraAdapter>,
}

impl<'a> GpuBackend<'a> {
    /// The base model.
    pub fn new(model: &'a GpuModel, session: &'a mut GpuSession) -> Self {
        Self::with_adapter(model, session, None)
    }

    /// The model with a LoRA adapter (or none). A KV cache computed with another
    /// adapter is dropped: the conversation is run again from its start.
    pub fn with_adapter(
        model: &'a GpuModel,
        session: &'a mut GpuSession,
        adapter: Option<&'a GpuLoraAdapter>,
    ) -> Self {
        let id = adapter.map_or(0, |a| a.id);
        if session.adapter_id != id {
            session.clear();
            session.adapter_id = id;
        }
        GpuBackend {
            model,
            session,
            adapter,
        }
    }
}

impl Backend for GpuBackend<'_> {
    async fn log_probs(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.session
            .log_probs(self.model, self.adapter, tokens)
            .await
    }
    async fn forward(&mut self, tokens: &[u32], want: Want<'_>) -> Result<Logits> {
        self.session
            .run(self.model, self.adapter, tokens, want, None)
            .await
    }
    async fn forward_masked(&mut self, step: Masked<'_>) -> Result<Logits> {
        let Masked { tokens, want, mask } = step;
        self.session
            .run(self.model, self.adapter, tokens, want, Some(mask))
            .await
    }
    fn tokens(&self) -> &[u32] {
        &self.session.tokens
    }
    fn truncate(&mut self, len: usize) {
        self.session.truncate(len);
    }
    fn context_length(&self) -> usize {
        self.session.opts.max_context
    }
    fn chains(&self) -> bool {
        true
    }
    fn verifies(&self) -> usize {
        match self.model.config.has_conv() {
            // A convolution's state ring cannot be cut back past rejected guesses.
            true => 0,
            false => self.session.verify_rows,
        }
    }
    async fn verify(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        if tokens.len() <= self.session.verifies() {
            return self.session.verify(self.model, self.adapter, tokens).await;
        }
        // Past one-pass attention: one-token steps (the same logits, no saving).
        crate::engine::backend::verify_by_steps(self, tokens).await
    }
    fn submit(&mut self, tokens: &[u32], want: Want<'_>) -> Result<()> {
        self.session.submit(self.model, self.adapter, tokens, &want)
    }
    async fn chosen(&mut self) -> Result<u32> {
        self.session.chosen(self.model).await
    }
    fn cancel(&mut self) {
        self.session.cancel();
    }
}
