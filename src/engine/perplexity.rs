//! Token-level perplexity over a text with a sliding window (as Hugging Face's
//! "perplexity of fixed-length models"): windows of `window` tokens advance by
//! `stride`; each token is scored once, with at least `window - stride` tokens of
//! context except at the start.

use super::backend::Backend;
use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    /// Tokens scored (every token of the text but the first).
    pub tokens: usize,
    /// Mean negative log-likelihood, in nats per token.
    pub nll: f64,
    pub perplexity: f64,
}

pub use crate::sampler::{log_prob, log_probs_from_logits};

/// Perplexity of `tokens` under the model behind `b` (its cache is cleared first).
pub async fn perplexity<B: Backend>(
    b: &mut B,
    tokens: &[u32],
    window: usize,
    stride: usize,
) -> Result<Perplexity> {
    if tokens.len() < 2 {
        return Err(Error::invalid(
            "perplexity needs a text of at least 2 tokens",
        ));
    }
    let window = window.min(b.context_length()).max(2);
    let stride = stride.clamp(1, window - 1);
    let (mut nll, mut scored, mut begin, mut done) = (0f64, 0usize, 0usize, 1usize);
    loop {
        let end = (begin + window).min(tokens.len());
        b.truncate(0);
        // lp[i] scores tokens[begin + 1 + i].
        let lp = b.log_probs(&tokens[begin..end]).await?;
        for target in done.max(begin + 1)..end {
            nll -= lp[target - begin - 1] as f64;
            scored += 1;
        }
        done = end;
        if end == tokens.len() {
            break;
        }
        begin += stride;
    }
    let mean = nll / scored as f64;
    Ok(Perplexity {
        tokens: scored,
        nll: mean,
        perplexity: mean.exp(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_prob_is_a_normalized_log_softmax() {
        let logits = [1.0f32, 2.0, 3.0, -1.0];
        let total: f32 = (0..4).map(|t| log_prob(&logits, t).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!((log_prob(&[0.0; 4], 2) - 0.25f32.ln()).abs() < 1e-6);
    }
}
