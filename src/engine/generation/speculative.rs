//! A reply's speculative checks: guesses (prompt lookup or a draft model) checked in
//! one forward, kept while they are what plain decoding would pick, the cache cut
//! back after the last one used.

use super::{ms_since, Decode, Generation};
use crate::engine::backend::AnyBackend;
use crate::engine::backend::{common_prefix, Backend, Logits, Want};
use crate::engine::speculate::{self, Lookup};
use crate::error::Result;
use crate::tokenizer::Tokenizer;
use web_time::Instant;

impl Generation {
    /// Runs the prompt through the draft model too, as part of the prefill, so its
    /// first guesses do not wait for it (nothing when the reply does not speculate).
    pub async fn prefill_draft(&mut self, d: &mut AnyBackend<'_>) -> Result<()> {
        let h = &self.history;
        if self.policy.is_none() || h.len() >= d.context_length() {
            return Ok(());
        }
        let t0 = Instant::now();
        let keep = common_prefix(d.tokens(), h).min(h.len() - 1);
        d.truncate(keep);
        let have = d.tokens().len().min(keep);
        speculate::greedy(d, &h[have..]).await?;
        self.usage.prefill_ms += ms_since(t0);
        self.started = Instant::now();
        Ok(())
    }

    /// A speculative step: `t` (picked, not run yet) and the guesses (the draft
    /// model's, else prompt lookup's) in one forward, then a pick at every position as
    /// one-token steps make it, the guesses kept while they are the pick; the cache is
    /// cut after the last position used. False (nothing done) without a guess.
    pub(super) async fn speculate<B: Backend>(
        &mut self,
        backend: &mut B,
        draft: Option<&mut AnyBackend<'_>>,
        tk: &Tokenizer,
        t: u32,
    ) -> Result<bool> {
        let Some(policy) = &mut self.policy else {
            return Ok(false);
        };
        let (base, ctx) = (backend.tokens().len(), backend.context_length());
        // Each position picks a token: the last one's within max_tokens and the context.
        let room = (self
            .opts
            .max_tokens
            .saturating_sub(self.usage.generated_tokens))
        .saturating_sub(1)
        .min(ctx.saturating_sub(base + 2))
        .min(policy.guesses());
        let guesses = match draft {
            Some(d) => {
                let started = Instant::now();
                let (g, ran) = speculate::draft(d, &self.history, room, tk.vocab_size()).await?;
                // A draft that caught up on more than the last check's tokens (after
                // steps without guesses) ran a prefill: not what a guess costs.
                if ran <= 2 && !g.is_empty() {
                    policy.drafted(ms_since(started) / g.len() as f64);
                }
                g
            }
            None => Lookup.propose(&self.history, room),
        };
        if guesses.is_empty() {
            return Ok(false);
        }
        let mut input = vec![t];
        input.extend_from_slice(&guesses);
        let started = Instant::now();
        let rows = match backend.verify(&input).await {
            Ok(rows) => rows,
            Err(e) => {
                // As a failed one-token step: `t` runs again on the next call.
                backend.truncate(base);
                return Err(e);
            }
        };
        let ms = ms_since(started);
        self.decode = Decode::Idle;
        let stats = &mut self.usage.speculation;
        stats.forwards += 1;
        stats.proposed += guesses.len();
        let mut kept = 0;
        for (i, row) in rows.into_iter().enumerate() {
            // The cache before this position's pick, as one-token decode has it.
            let cached = base + 1 + i;
            let picked = self
                .pick_full(row)
                .and_then(|token| Ok((token, self.handle(tk, token, cached, ctx)?)));
            match picked {
                Ok((token, true)) if guesses.get(i) == Some(&token) => kept += 1,
                Ok((token, goes_on)) => {
                    self.rewind(backend, cached).await?;
                    if goes_on {
                        self.decode = Decode::ToRun(token);
                    }
                    break;
                }
                Err(e) => {
                    self.rewind(backend, cached).await?;
                    return Err(e);
                }
            }
        }
        self.usage.speculation.accepted += kept;
        if let Some(p) = &mut self.policy {
            p.checked(guesses.len(), kept, ms);
        }
        Ok(true)
    }

    /// Cuts the cache back to `len` positions (guesses past the last one used); a
    /// backend that cannot resume there (a state that does not reach back) runs the
    /// conversation's tokens again up to it.
    pub(super) async fn rewind<B: Backend>(&mut self, backend: &mut B, len: usize) -> Result<()> {
        backend.truncate(len);
        let kept = backend.tokens().len();
        if kept < len {
            backend
                .forward(&self.history[kept..len], Want::top(1))
                .await?;
        }
        Ok(())
    }

    /// Picks from one position's full logits (guided: its mask computed first).
    pub(super) fn pick_full(&mut self, logits: Vec<f32>) -> Result<u32> {
        if let Some(g) = &mut self.guide {
            g.update()?;
        }
        Ok(self.choose(Logits::Full(logits)))
    }

    /// Back on the chain after speculative checks: `t` (handled, not run) runs in a
    /// pipelined step that picks the next token on the device.
    pub(super) fn rejoin<B: Backend>(&mut self, backend: &mut B, t: u32) -> Result<()> {
        let n = self.opts.sampler.repeat_last_n;
        let recent = &self.history[self.history.len().saturating_sub(n)..];
        let ids = self.sampler.penalized_ids(recent);
        let pick = self.next_pick(false);
        if let Err(e) = backend.submit(&[t], self.want(&ids, pick)) {
            backend.cancel();
            return Err(e);
        }
        self.decode = Decode::InFlight;
        self.usage.speculation.forwards += 1;
        Ok(())
    }

    /// Whether a pipelined reply should leave its chain for a speculative check: the
    /// policy guesses now and the conversation's end occurred before (a match that
    /// the token being read will likely continue).
    pub(super) fn wants_check(&mut self) -> bool {
        self.policy.as_mut().is_some_and(|p| p.guesses() > 0)
            && !Lookup.propose(&self.history, 1).is_empty()
    }
}
