//! The backend interface, below the engine: what the generate loop asks of whatever
//! runs the model (`Backend`, one call's view with an adapter chosen), what the engine
//! holds of a loaded model on one backend (`LoadedModel`: weights, KV cache, adapters),
//! and the bytes of a saved KV state. `engine::gpu` and `engine::cpu` implement it; the
//! engine reaches them only through these traits, so a backend is one implementation.

mod boxed;
mod loaded;
mod options;
mod saved;

pub use boxed::{AnyBackend, DynBackend};
pub use loaded::{next_adapter_id, BackendKind, GpuBytes, KvSnapshot, LoadedAdapter, LoadedModel};
pub use options::SessionOptions;
pub use saved::{damaged, Reader, Writer};

use crate::error::{Error, Result};
pub use crate::sampler::Logits;

/// What the caller needs from a forward pass.
#[derive(Clone, Debug)]
pub struct Want<'a> {
    /// `Some(k)`: the k most likely tokens (1 = greedy); `None`: all the logits.
    pub top_k: Option<usize>,
    /// Repetition penalty applied to `penalty_ids` before selection (1 = none).
    pub penalty: f32,
    pub penalty_ids: &'a [u32],
    /// How a backend that picks the next token itself (`Backend::submit`) picks it.
    pub pick: Pick,
    /// Guided generation: only tokens whose bit is set may be picked (bit `t % 32` of
    /// word `t / 32`), applied where candidates are selected. Full logits are
    /// returned unmasked (the generate loop masks them).
    pub mask: Option<&'a [u32]>,
}

impl Want<'_> {
    pub fn logits() -> Want<'static> {
        Want {
            top_k: None,
            penalty: 1.0,
            penalty_ids: &[],
            pick: Pick::default(),
            mask: None,
        }
    }

    /// The `k` best candidates (1: greedy), nothing penalized.
    pub fn top(k: usize) -> Want<'static> {
        Want {
            top_k: Some(k),
            ..Want::logits()
        }
    }
}

/// How the device picks the next token among the candidates (as `Sampler::pick`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pick {
    /// 0: greedy.
    pub temperature: f32,
    pub top_p: f32,
    pub min_p: f32,
    /// The draw in [0, 1) (`Sampler::next_u`).
    pub u: f32,
    /// A chained step's input (chosen on the device) is penalized too: the caller
    /// lists the rest of the penalty window.
    pub penalize_input: bool,
}

impl Default for Pick {
    fn default() -> Self {
        Pick {
            temperature: 0.0,
            top_p: 1.0,
            min_p: 0.0,
            u: 0.0,
            penalize_input: false,
        }
    }
}

/// Something that runs the model: the CPU reference or the GPU engine. It keeps the
/// tokens its KV cache holds, so a conversation only runs what is new.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// Runs `tokens` after those already in the KV cache.
    async fn forward(&mut self, tokens: &[u32], want: Want<'_>) -> Result<Logits>;
    /// Tokens in the KV cache.
    fn tokens(&self) -> &[u32];
    /// Forgets cached tokens from `len` on; may forget more (down to none) when the
    /// cache cannot resume at `len`: callers read `tokens()` again.
    fn truncate(&mut self, len: usize);
    /// Runs `tokens` after the cache and returns, for each but the last, the
    /// log-probability of the token that follows it (for perplexity).
    async fn log_probs(&mut self, tokens: &[u32]) -> Result<Vec<f32>>;
    fn context_length(&self) -> usize;

    /// How many positions `verify` runs in one pass (0: it does not; speculative
    /// decoding is then off).
    fn verifies(&self) -> usize {
        0
    }
    /// Runs `tokens` after the cache in one pass and returns every position's full
    /// logits, each bit for bit what `forward` gives running the tokens one at a
    /// time (speculative decoding's check: its picks are plain decoding's).
    async fn verify(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>>
    where
        Self: Sized,
    {
        verify_by_steps(self, tokens).await
    }

    /// Whether the backend picks tokens itself and chains steps (`submit`): decode is
    /// then pipelined, the next step submitted before this one's token is read.
    fn chains(&self) -> bool {
        false
    }
    /// Runs `tokens` after the cache — or, when empty, the token the last submitted
    /// step picks — and picks the next token with `want.pick`, without waiting.
    /// Steps run in order; `chosen` reads their picks in order.
    fn submit(&mut self, _tokens: &[u32], _want: Want<'_>) -> Result<()> {
        Err(Error::unsupported("this backend does not chain steps"))
    }
    /// The pick of the oldest submitted step not read yet (waits for it).
    async fn chosen(&mut self) -> Result<u32> {
        Err(Error::unsupported("this backend does not chain steps"))
    }
    /// Drops the submitted steps not read yet, and the tokens they ran, from the cache.
    fn cancel(&mut self) {}

    /// As `forward`, with the grammar mask (`Want::mask`) given by `step.mask`, which
    /// a backend calls while the device runs the step's layers (the mask is needed
    /// only where candidates are chosen); this one computes it first.
    async fn forward_masked(&mut self, step: Masked<'_>) -> Result<Logits> {
        let bits = (step.mask)()?;
        let want = Want {
            mask: Some(&bits),
            ..step.want
        };
        self.forward(step.tokens, want).await
    }
}

/// `Backend::verify` as one-token forwards: the same logits, no saving (a backend
/// without a one-pass check, or past where its check reaches).
pub async fn verify_by_steps<B: Backend>(b: &mut B, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
    let mut rows = Vec::with_capacity(tokens.len());
    for t in tokens {
        match b.forward(std::slice::from_ref(t), Want::logits()).await? {
            Logits::Full(l) => rows.push(l),
            Logits::Top(_) => return Err(Error::unsupported("full logits to verify")),
        }
    }
    Ok(rows)
}

/// Computes a step's grammar mask when the backend asks (see `forward_masked`).
pub type LateMask<'a> = &'a mut dyn FnMut() -> Result<Vec<u32>>;

/// A step of `forward_masked`: its tokens, what it wants, and its mask computed late.
pub struct Masked<'a> {
    pub tokens: &'a [u32],
    pub want: Want<'a>,
    pub mask: LateMask<'a>,
}

/// How many leading tokens two sequences share.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
