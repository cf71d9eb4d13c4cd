//! A backend seen through the `Backend` trait's defaults only: it does not chain
//! steps (decode one step at a time) and computes a grammar mask before the step
//! (`forward_masked`'s default). Tests compare the real backend against it.

use pippin::engine::{Backend, Logits, Want};
use pippin::Result;

pub struct Plain<B>(pub B);

impl<B: Backend> Backend for Plain<B> {
    async fn forward(&mut self, tokens: &[u32], want: Want<'_>) -> Result<Logits> {
        self.0.forward(tokens, want).await
    }
    fn tokens(&self) -> &[u32] {
        self.0.tokens()
    }
    fn truncate(&mut self, len: usize) {
        self.0.truncate(len)
    }
    async fn log_probs(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.0.log_probs(tokens).await
    }
    fn context_length(&self) -> usize {
        self.0.context_length()
    }
}
