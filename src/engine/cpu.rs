//! The CPU reference model as a generation backend (`pippin generate --cpu`).

use super::{Backend, Logits, Want};
use crate::error::Result;
use crate::model::{KvCache, Reference};

pub struct CpuSession<'m> {
    model: &'m Reference,
    cache: KvCache,
    tokens: Vec<u32>,
}

impl<'m> CpuSession<'m> {
    pub fn new(model: &'m Reference) -> Self {
        CpuSession {
            model,
            cache: KvCache::new(&model.config),
            tokens: Vec::new(),
        }
    }
}

impl Backend for CpuSession<'_> {
    /// Always the full logits: the sampler applies the penalty and filters on the CPU.
    async fn forward(&mut self, tokens: &[u32], _want: Want<'_>) -> Result<Logits> {
        let logits = self.model.forward(&mut self.cache, tokens, false)?;
        self.tokens.extend_from_slice(tokens);
        Ok(Logits::Full(logits))
    }
    fn tokens(&self) -> &[u32] {
        &self.tokens
    }
    async fn log_probs(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let logits = self.model.forward(&mut self.cache, tokens, true)?;
        self.tokens.extend_from_slice(tokens);
        let vocab = self.model.config.vocab_size;
        Ok(super::perplexity::log_probs_from_logits(
            &logits, tokens, vocab,
        ))
    }
    fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
        self.cache.truncate(len, self.model.config.kv_dim());
    }
    fn context_length(&self) -> usize {
        self.model.config.context_length
    }
}
