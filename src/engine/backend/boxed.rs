//! Any backend behind one pointer: `Backend`'s async methods are not callable through
//! `dyn`, so `DynBackend` mirrors them with boxed futures, every `Backend` is one
//! (blanket impl), and the box is a `Backend` again. The engine dispatches through
//! this and nothing else: a new backend implements `Backend`, never a match arm here.

use super::{Backend, Logits, Masked, Want};
use crate::error::Result;
use std::future::Future;
use std::pin::Pin;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + 'a>>;

/// One call's backend, whichever runs the model.
pub type AnyBackend<'a> = Box<dyn DynBackend + 'a>;

/// `Backend` callable through `dyn` (one allocation a call: a step's cost is the
/// forward pass, not this).
pub trait DynBackend {
    fn dyn_forward<'a>(&'a mut self, tokens: &'a [u32], want: Want<'a>) -> Boxed<'a, Logits>;
    fn dyn_tokens(&self) -> &[u32];
    fn dyn_truncate(&mut self, len: usize);
    fn dyn_log_probs<'a>(&'a mut self, tokens: &'a [u32]) -> Boxed<'a, Vec<f32>>;
    fn dyn_context_length(&self) -> usize;
    fn dyn_verifies(&self) -> usize;
    fn dyn_verify<'a>(&'a mut self, tokens: &'a [u32]) -> Boxed<'a, Vec<Vec<f32>>>;
    fn dyn_chains(&self) -> bool;
    fn dyn_submit(&mut self, tokens: &[u32], want: Want<'_>) -> Result<()>;
    fn dyn_chosen(&mut self) -> Boxed<'_, u32>;
    fn dyn_cancel(&mut self);
    fn dyn_forward_masked<'a>(&'a mut self, step: Masked<'a>) -> Boxed<'a, Logits>;
}

impl<B: Backend> DynBackend for B {
    fn dyn_forward<'a>(&'a mut self, tokens: &'a [u32], want: Want<'a>) -> Boxed<'a, Logits> {
        Box::pin(self.forward(tokens, want))
    }
    fn dyn_tokens(&self) -> &[u32] {
        self.tokens()
    }
    fn dyn_truncate(&mut self, len: usize) {
        self.truncate(len)
    }
    fn dyn_log_probs<'a>(&'a mut self, tokens: &'a [u32]) -> Boxed<'a, Vec<f32>> {
        Box::pin(self.log_probs(tokens))
    }
    fn dyn_context_length(&self) -> usize {
        self.context_length()
    }
    fn dyn_verifies(&self) -> usize {
        self.verifies()
    }
    fn dyn_verify<'a>(&'a mut self, tokens: &'a [u32]) -> Boxed<'a, Vec<Vec<f32>>> {
        Box::pin(self.verify(tokens))
    }
    fn dyn_chains(&self) -> bool {
        self.chains()
    }
    fn dyn_submit(&mut self, tokens: &[u32], want: Want<'_>) -> Result<()> {
        self.submit(tokens, want)
    }
    fn dyn_chosen(&mut self) -> Boxed<'_, u32> {
        Box::pin(self.chosen())
    }
    fn dyn_cancel(&mut self) {
        self.cancel()
    }
    fn dyn_forward_masked<'a>(&'a mut self, step: Masked<'a>) -> Boxed<'a, Logits> {
        Box::pin(self.forward_masked(step))
    }
}

impl Backend for AnyBackend<'_> {
    async fn forward(&mut self, tokens: &[u32], want: Want<'_>) -> Result<Logits> {
        self.as_mut().dyn_forward(tokens, want).await
    }
    fn tokens(&self) -> &[u32] {
        self.as_ref().dyn_tokens()
    }
    fn truncate(&mut self, len: usize) {
        self.as_mut().dyn_truncate(len)
    }
    async fn log_probs(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.as_mut().dyn_log_probs(tokens).await
    }
    fn context_length(&self) -> usize {
        self.as_ref().dyn_context_length()
    }
    fn verifies(&self) -> usize {
        self.as_ref().dyn_verifies()
    }
    async fn verify(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        self.as_mut().dyn_verify(tokens).await
    }
    fn chains(&self) -> bool {
        self.as_ref().dyn_chains()
    }
    fn submit(&mut self, tokens: &[u32], want: Want<'_>) -> Result<()> {
        self.as_mut().dyn_submit(tokens, want)
    }
    async fn chosen(&mut self) -> Result<u32> {
        self.as_mut().dyn_chosen().await
    }
    fn cancel(&mut self) {
        self.as_mut().dyn_cancel()
    }
    async fn forward_masked(&mut self, step: Masked<'_>) -> Result<Logits> {
        // Rebuilt: the mask's borrow shortens to this call's (a struct does not coerce).
        let Masked { tokens, want, mask } = step;
        self.as_mut()
            .dyn_forward_masked(Masked { tokens, want, mask })
            .await
    }
}
