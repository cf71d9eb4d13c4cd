//! Pipelined decode steps: the next token's step submitted before this one's pick is
//! read, picked on the device.

use super::{ms_since, Decode, Generation};
use crate::engine::backend::Backend;
use crate::engine::FinishReason;
use crate::error::Result;
use crate::tokenizer::Tokenizer;
use web_time::Instant;

impl Generation {
    /// A pipelined step: submits the step that runs the next token (picked on the
    /// device) before reading it, when another token may follow; a token that ends
    /// the reply drops that step and what it ran. With speculation, the chain is left
    /// (the token read is not run yet: `to_run`) when a check looks worth it.
    pub(super) async fn step_chained<B: Backend>(
        &mut self,
        backend: &mut B,
        tk: &Tokenizer,
    ) -> Result<()> {
        let (max, ctx) = (self.opts.max_tokens, backend.context_length());
        if self.usage.generated_tokens >= max {
            backend.cancel();
            self.decode = Decode::Idle;
            return self.finish(tk, FinishReason::Length);
        }
        // The cache before the token handled now runs: the same test `handle` makes.
        let cached = backend.tokens().len();
        let ahead = self.usage.generated_tokens + 1 < max && cached + 1 < ctx;
        let n = self.opts.sampler.repeat_last_n;
        let started = Instant::now();
        let mut leave = false;
        let token = match self.decode {
            Decode::Picked(t) => {
                if ahead {
                    // Its input is known: the penalty window is listed whole.
                    let mut recent = self.history[self.history.len().saturating_sub(n)..].to_vec();
                    recent.push(t);
                    let ids = self.sampler.penalized_ids(&recent);
                    let pick = self.next_pick(false);
                    backend.submit(&[t], self.want(&ids, pick))?;
                    self.usage.speculation.forwards += 1;
                }
                self.decode = if ahead {
                    Decode::InFlight
                } else {
                    Decode::Idle
                };
                t
            }
            Decode::InFlight => {
                leave = ahead && self.wants_check();
                if ahead && !leave {
                    // Its input is the pick not read yet: the device penalizes it, the
                    // rest of the window is listed.
                    let keep = n.saturating_sub(1);
                    let recent = &self.history[self.history.len().saturating_sub(keep)..];
                    let ids = if keep > 0 {
                        self.sampler.penalized_ids(recent)
                    } else {
                        vec![]
                    };
                    let pick = self.next_pick(true);
                    backend.submit(&[], self.want(&ids, pick))?;
                    self.usage.speculation.forwards += 1;
                }
                let t = backend.chosen().await?;
                let goes_on = ahead && !leave;
                self.decode = if goes_on {
                    Decode::InFlight
                } else {
                    Decode::Idle
                };
                self.piped = if goes_on { self.piped + 1 } else { 0 };
                if let (true, Some(p)) = (self.piped >= 2, &mut self.policy) {
                    // A pipelined step's time: what checks are weighed against.
                    p.stepped(ms_since(started));
                }
                t
            }
            _ => return self.finish(tk, FinishReason::Length),
        };
        if !self.handle(tk, token, cached, ctx)? {
            backend.cancel();
            self.decode = Decode::Idle;
        } else if leave {
            self.decode = Decode::ToRun(token);
        }
        Ok(())
    }

    /// After a failed pipelined step: steps in flight are dropped with what they ran,
    /// and decode goes on one step at a time from the last token handled.
    pub(super) fn unchain<B: Backend>(&mut self, backend: &mut B) {
        if let Decode::InFlight = self.decode {
            backend.cancel();
            self.decode = match self.history.last() {
                Some(&t) => Decode::ToRun(t),
                None => Decode::Idle,
            };
        }
        self.chained = false;
    }
}
