//! Pipelined decode: a step picks the next token on the GPU (`choose.wgsl`) into the
//! token buffer the next step's embedding reads, so the caller submits step N+1
//! before it reads step N's token back — the GPU does not wait for the CPU between
//! tokens. Each submitted step copies its pick into one of two read-back buffers;
//! `chosen` reads them in order. A chained step's input is unknown when it is
//! submitted: the session holds a placeholder for it until the step before is read.

use super::{GpuSession, Part};
use crate::engine::backend::Want;
use crate::engine::gpu::lora::GpuLoraAdapter;
use crate::engine::gpu::GpuModel;
use crate::error::{Error, Result};

/// Where a chained step's input token will go once known.
const PLACEHOLDER: u32 = u32::MAX;

/// A submitted step whose pick has not been read.
pub(super) struct InFlight {
    /// Which `read_choice` buffer holds its pick.
    staging: usize,
    /// Where its input tokens start in the session's tokens.
    input_at: usize,
    /// The placeholder its pick fills (the input of the step chained on it).
    fills: Option<usize>,
}

impl GpuSession {
    /// Runs `tokens` (a prompt, in chunks) — or, when empty, the token the last
    /// submitted step picks — and picks the next token with `want`, without waiting.
    /// At most two steps are in flight (two read-back buffers).
    pub(super) fn submit(
        &mut self,
        m: &GpuModel,
        adapter: Option<&GpuLoraAdapter>,
        tokens: &[u32],
        want: &Want<'_>,
    ) -> Result<()> {
        if want.top_k.is_none() {
            return Err(Error::internal(
                "a submitted step picks a token from candidates",
            ));
        }
        if self.inflight.len() >= 2 {
            return Err(Error::internal(
                "two steps are in flight already: read one first",
            ));
        }
        let chained = tokens.is_empty();
        if chained {
            if self.inflight.is_empty() {
                return Err(Error::internal("no submitted step to chain on"));
            }
            if self.tokens.len() >= self.opts.max_context {
                return Err(Error::context_full(format!(
                    "the session's context of {} tokens is full",
                    self.opts.max_context
                )));
            }
            m.gpu.check_lost()?;
        } else {
            self.check(m, tokens)?;
        }
        let input_at = self.tokens.len();
        let (head, last) = match tokens.len() {
            0 => (&[][..], &[][..]),
            n => tokens.split_at((n - 1) / self.opts.chunk * self.opts.chunk),
        };
        // A long prompt's earlier chunks run first (nothing read back).
        for chunk in head.chunks(self.opts.chunk) {
            let at = self.upload_step(&m.gpu, chunk, None, false);
            let enc = self.encode_chunk(m, adapter, at, None, Part::Whole)?;
            m.gpu.queue.submit([enc.finish()]);
            self.tokens.extend_from_slice(chunk);
            self.wrote(self.tokens.len());
        }
        let at = self.upload_step(&m.gpu, last, Some(want), false);
        let mut enc = self.encode_chunk(m, adapter, at, Some(want), Part::Whole)?;
        let staging = self.next_choice;
        enc.copy_buffer_to_buffer(&self.b.tokens, 0, &self.b.read_choice[staging], 0, 4);
        m.gpu.queue.submit([enc.finish()]);
        m.gpu.take_error()?;
        self.next_choice = 1 - staging;
        if chained {
            let at = self.tokens.len();
            if let Some(prev) = self.inflight.back_mut() {
                prev.fills = Some(at);
            }
            self.tokens.push(PLACEHOLDER);
        } else {
            self.tokens.extend_from_slice(last);
        }
        self.wrote(self.tokens.len());
        self.inflight.push_back(InFlight {
            staging,
            input_at,
            fills: None,
        });
        Ok(())
    }

    /// The pick of the oldest step in flight, once it is done. On an error the step
    /// stays in flight (`cancel` drops it and what it ran).
    pub(super) async fn chosen(&mut self, m: &GpuModel) -> Result<u32> {
        let f = self
            .inflight
            .front()
            .ok_or_else(|| Error::internal("no submitted step to read"))?;
        let bytes = m.gpu.map_read(&self.b.read_choice[f.staging]).await?;
        let t = bytes
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .filter(|&t| (t as usize) < m.config.vocab_size)
            .ok_or_else(|| Error::gpu("the GPU picked no token in the vocabulary"))?;
        if let Some(f) = self.inflight.pop_front() {
            if let Some(slot) = f.fills.and_then(|at| self.tokens.get_mut(at)) {
                *slot = t;
            }
        }
        Ok(t)
    }

    /// Drops the steps in flight and the tokens they ran from the cache.
    pub(super) fn cancel(&mut self) {
        if let Some(first) = self.inflight.front() {
            let at = first.input_at;
            self.inflight.clear();
            self.truncate_cache(at);
        }
    }

    /// Forgets steps nobody will read (a reply that ended while one ran): what they
    /// ran stays cached, but an input never learned (a placeholder) is cut off.
    pub(super) fn abandon(&mut self) {
        self.inflight.clear();
        if let Some(p) = self.tokens.iter().position(|&t| t == PLACEHOLDER) {
            self.truncate_cache(p);
        }
    }
}
