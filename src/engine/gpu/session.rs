//! A conversation on the GPU: its KV cache, activation buffers and position. One
//! command buffer per decode step; prefill in chunks; only the sampled candidates
//! (or, for tests, the logits) are read back.

use super::lora::GpuLoraAdapter;
use super::model::GpuModel;
use crate::engine::backend::{LateMask, Logits, SessionOptions, Want};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::kernels::attention::{self, LayerCache};
use crate::kernels::elementwise::{self, NormOut};
use crate::kernels::matmul::{self, Io};
use crate::kernels::sample::{self, TopK};
use crate::kernels::Pass;
use crate::kernels::{Plan, Step};
use std::collections::HashMap;

mod backend;
mod buffers;
mod chain;
mod footprint;
mod forward;
mod snapshot;

pub use backend::GpuBackend;
pub use snapshot::GpuSnapshot;

use buffers::Buffers;

pub use footprint::GpuFootprint;
use footprint::{Sizes, MAX_PENALTY_IDS};

use chain::InFlight;

pub struct GpuSession {
    opts: SessionOptions,
    cache: Vec<LayerCache>,
    b: Buffers,
    topk: TopK,
    tokens: Vec<u32>,
    /// The adapter the KV cache was computed with (0 = none).
    adapter_id: u64,
    /// The first position the ring caches of sliding-window layers still hold.
    ring_lo: usize,
    /// Recorded steps by adapter id and shape: decode steps (one token, candidates
    /// out) and speculative checks (every position's logits out). A step replays one
    /// and creates nothing. Each plan with the number of its dispatches before the
    /// pick (top-k, choose).
    plans: HashMap<(u64, Shape), (Plan, usize)>,
    /// Most positions `verify` runs in one pass.
    verify_rows: usize,
    /// False: encode every decode step from scratch, as before plans (the bench's
    /// "before" figure).
    replay: bool,
    /// False: a decode step runs the chunk path's kernels (norms, RoPE, the cache
    /// write and the attention reduce apart), for measuring what fusion saves.
    fused: bool,
    /// Submitted steps whose picked token was not read yet, oldest first.
    inflight: std::collections::VecDeque<InFlight>,
    /// The read-back buffer the next submitted step copies its pick into.
    next_choice: usize,
}

impl GpuSession {
    /// A session for `m`; it must only ever run with that model (see `GpuBackend`).
    pub fn new(m: &GpuModel, opts: SessionOptions) -> Result<Self> {
        let c = &m.config;
        let g = &m.gpu;
        let opts = footprint::fit(c, opts, g.max_binding());
        let z = Sizes::of(c, &opts, g.max_binding());
        let b = Buffers::new(m, &opts, &z)?;
        let cache = (0..c.n_layers)
            .map(|l| match c.is_conv(l) {
                true => LayerCache::conv(g, c),
                false => {
                    let window = c.block(l).cache_window();
                    LayerCache::with_window(g, c, opts.kv, opts.max_context, window, opts.chunk)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let topk = TopK::new(g, c.vocab_size)?;
        g.take_error()?;
        Ok(GpuSession {
            opts,
            cache,
            b,
            topk,
            tokens: Vec::new(),
            adapter_id: 0,
            ring_lo: 0,
            plans: HashMap::new(),
            verify_rows: z.verify_rows,
            replay: true,
            fused: true,
            inflight: Default::default(),
            next_choice: 0,
        })
    }

    /// Whether decode steps replay their recorded plan (the default) or are encoded
    /// from scratch each time (for measuring what recording saves).
    #[cfg(feature = "dev")]
    pub fn set_replay(&mut self, on: bool) {
        self.replay = on;
    }

    /// Whether a decode step runs the fused kernels (the default: norms folded into
    /// the GEMVs, the GLU in the gate|up epilogue, one-pass attention) or the chunk
    /// path's separate ones (the bench's "unfused" figures). Recorded plans are dropped.
    #[cfg(feature = "dev")]
    pub fn set_fused(&mut self, on: bool) {
        self.fused = on;
        self.plans.clear();
    }

    /// Dispatches of a decode step with `adapter`, and how many of them are outside
    /// the layers (embedding, output head, sampling).
    pub fn decode_dispatch_counts(
        &mut self,
        m: &GpuModel,
        adapter: Option<&GpuLoraAdapter>,
    ) -> Result<(usize, usize)> {
        let total = self.plan(m, adapter, Shape::Step)?.0.len();
        let outside = m
            .kernels
            .record(&m.gpu, &self.b.step, |pass| {
                matmul::embed(pass, &m.embed, &self.b.tokens, &self.b.x, 1, 1.0)?;
                self.encode_head(m, pass, 1, false)?;
                self.encode_pick(pass)
            })?
            .len();
        Ok((total, outside))
    }

    /// Compiles every pipeline a conversation uses (a prefill chunk, a decode step,
    /// speculative checks) and records the decode step of the base model: after this,
    /// the first reply creates nothing it would not create anyway (its adapter's
    /// plans).
    pub fn warm(&mut self, m: &GpuModel) -> Result<()> {
        let n = self.opts.chunk;
        m.kernels.record(&m.gpu, &self.b.step, |pass| {
            self.encode_layers(m, None, pass, n, 0)?;
            self.encode_head(m, pass, n, false)
        })?;
        self.plan(m, None, Shape::Step)?;
        // Checks compile the GEMVs' several-token kinds (4 and 8 tokens): after these,
        // the first check of a reply only records its plan.
        if self.verify_rows > 1 && self.fused {
            for n in [self.verify_rows.min(4), self.verify_rows] {
                self.plan(m, None, Shape::Check(n))?;
            }
        }
        if self.opts.max_context > attention::ONE_PASS_MAX {
            self.plan(m, None, Shape::SplitStep)?;
        }
        m.gpu.take_error()
    }

    /// The plan of `shape` with `adapter`, recorded on first use, and how many of its
    /// dispatches come before the pick (a decode step's sampling; a check has none).
    /// Plans of other adapters than this one and none are dropped (their bind groups
    /// hold buffers).
    fn plan(
        &mut self,
        m: &GpuModel,
        adapter: Option<&GpuLoraAdapter>,
        shape: Shape,
    ) -> Result<(&Plan, usize)> {
        let id = (adapter.map_or(0, |a| a.id), shape);
        if !self.plans.contains_key(&id) {
            self.plans.retain(|k, _| k.0 == 0 || k.0 == id.0);
            let recorded = match shape {
                // Any position of the same kind records the same dispatches.
                Shape::Step | Shape::SplitStep => {
                    let at = if shape == Shape::SplitStep {
                        attention::ONE_PASS_MAX
                    } else {
                        0
                    };
                    let mut plan = m.kernels.record(&m.gpu, &self.b.step, |pass| {
                        self.encode_layers(m, adapter, pass, 1, at)?;
                        self.encode_head(m, pass, 1, false)
                    })?;
                    let body = plan.len();
                    plan.extend(
                        m.kernels
                            .record(&m.gpu, &self.b.step, |pass| self.encode_pick(pass))?,
                    );
                    (plan, body)
                }
                Shape::Check(n) => {
                    let plan = m.kernels.record(&m.gpu, &self.b.step, |pass| {
                        self.encode_layers(m, adapter, pass, n, 0)?;
                        self.encode_head(m, pass, n, true)
                    })?;
                    let len = plan.len();
                    (plan, len)
                }
            };
            self.plans.insert(id, recorded);
        }
        self.plans
            .get(&id)
            .map(|(p, body)| (p, *body))
            .ok_or_else(|| Error::gpu("a plan was not recorded"))
    }

    /// Dispatches per decode step (with `adapter`): the figure the bench reports.
    pub fn decode_dispatches(
        &mut self,
        m: &GpuModel,
        adapter: Option<&GpuLoraAdapter>,
    ) -> Result<usize> {
        Ok(self.plan(m, adapter, Shape::Step)?.0.len())
    }

    /// Dispatches of the short-context plan recorded for adapter `id` (0: none), if
    /// there is one.
    pub fn recorded_dispatches(&self, id: u64) -> Option<usize> {
        self.plans.get(&(id, Shape::Step)).map(|(p, _)| p.len())
    }

    /// Most tokens the conversation may hold.
    pub fn max_context(&self) -> usize {
        self.opts.max_context
    }

    /// Tokens in the KV cache.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Forgets the conversation; the next call starts from position 0.
    pub fn clear(&mut self) {
        self.inflight.clear();
        self.tokens.clear();
        self.ring_lo = 0;
    }

    /// Keeps the first `len` cached tokens. Entries past `len` are overwritten before
    /// they are read again; but a sliding-window layer's ring may no longer hold the
    /// window behind `len` (it was overwritten by later positions): then the whole
    /// conversation is run again.
    pub fn truncate(&mut self, len: usize) {
        self.abandon();
        self.truncate_cache(len);
    }

    fn truncate_cache(&mut self, len: usize) {
        if len >= self.tokens.len() {
            return;
        }
        let needs = self
            .cache
            .iter()
            .filter(|c| c.window > 0)
            .map(|c| (len + 1).saturating_sub(c.window))
            .min();
        if needs.is_some_and(|first| self.ring_lo > first) {
            self.clear();
        } else {
            self.tokens.truncate(len);
        }
    }

    /// Records that positions up to `end` were written: a ring of `slots` positions
    /// now holds only the last `slots` of them.
    fn wrote(&mut self, end: usize) {
        if let Some(slots) = self
            .cache
            .iter()
            .filter(|c| c.window > 0)
            .map(|c| c.slots)
            .min()
        {
            self.ring_lo = self.ring_lo.max(end.saturating_sub(slots));
        }
    }

    pub fn kv_bytes(&self) -> u64 {
        self.cache.iter().map(LayerCache::bytes).sum()
    }

    /// GPU bytes of activations, RoPE tables, candidates and read-back buffers.
    pub fn scratch_bytes(&self) -> u64 {
        self.b.bytes() + self.topk.bytes()
    }

    async fn run(
        &mut self,
        m: &GpuModel,
        adapter: Option<&GpuLoraAdapter>,
        tokens: &[u32],
        want: Want<'_>,
        mut late: Option<LateMask<'_>>,
    ) -> Result<Logits> {
        self.abandon();
        self.check(m, tokens)?;
        let chunks: Vec<&[u32]> = tokens.chunks(self.opts.chunk).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            let (w, l) = if last {
                (Some(&want), late.take())
            } else {
                (None, None)
            };
            let out = self.run_chunk(m, adapter, chunk, w, l).await?;
            self.tokens.extend_from_slice(chunk);
            self.wrote(self.tokens.len());
            if let Some(l) = out {
                return Ok(l);
            }
        }
        Err(Error::invalid("no tokens to run"))
    }

    /// Tokens that may run next: in the vocabulary, within the context, on a live device.
    fn check(&self, m: &GpuModel, tokens: &[u32]) -> Result<()> {
        let c = &m.config;
        if tokens.is_empty() {
            return Err(Error::invalid("no tokens to run"));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
            return Err(Error::invalid(format!(
                "token id {t} is outside the vocabulary of {}",
                c.vocab_size
            )));
        }
        if self.tokens.len() + tokens.len() > self.opts.max_context {
            return Err(Error::context_full(format!(
                "{} tokens do not fit in the session's context of {} ({} already used)",
                tokens.len(),
                self.opts.max_context,
                self.tokens.len()
            )));
        }
        m.gpu.check_lost()
    }

    /// Runs `tokens` and scores each next one: the final norm and the head over every
    /// position of a chunk (a GEMM), read back chunk by chunk.
    async fn log_probs(
        &mut self,
        m: &GpuModel,
        adapter: Option<&GpuLoraAdapter>,
        tokens: &[u32],
    ) -> Result<Vec<f32>> {
        self.abandon();
        self.check(m, tokens)?;
        let (g, c) = (&m.gpu, &m.config);
        let row_bytes = c.vocab_size as u64 * 4;
        // The chunk's logits are one binding: fewer tokens a chunk where they would
        // be over it (Gemma's 262K-token rows are 1 MiB each).
        let fit = (g.max_binding() / row_bytes).max(1) as usize;
        let chunk = self.opts.chunk.min(fit);
        let scores = g.storage("scores", chunk as u64 * row_bytes)?;
        let mut out = Vec::with_capacity(tokens.len());
        for (ci, part) in tokens.chunks(chunk).enumerate() {
            let (n, pos0) = self.upload_step(g, part, None, false);
            let mut enc = g.device.create_command_encoder(&Default::default());
            {
                let mut inner = enc.begin_compute_pass(&Default::default());
                let mut pass = Pass::new(&m.kernels, &self.b.step, &mut inner);
                self.encode_layers(m, adapter, &mut pass, n, pos0)?;
                let b = &self.b;
                elementwise::rmsnorm(
                    &mut pass,
                    &m.output_norm,
                    &b.x,
                    &b.h,
                    c.hidden,
                    c.rms_eps,
                    n,
                    NormOut::default(),
                )?;
                let io = Io {
                    scale: c.logit_scale,
                    cap: c.final_softcap,
                    ..Io::new((&b.h, c.hidden), (&scores, c.vocab_size))
                };
                matmul::matmul(&mut pass, m.head(), &io, n)?;
            }
            let bytes = g
                .submit_and_read(enc, &scores, 0, n as u64 * row_bytes)
                .await?;
            let logits: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
            self.tokens.extend_from_slice(part);
            self.wrote(self.tokens.len());
            let start = ci * chunk;
            let next = &tokens[start + 1..(start + n + 1).min(tokens.len())];
            out.extend(
                logits
                    .chunks_exact(c.vocab_size)
                    .zip(next)
                    .map(|(row, &t)| crate::sampler::log_prob(row, t)),
            );
        }
        Ok(out)
    }

    /// Most positions `verify` runs in one pass at the current position (0 where the
    /// context is past one-pass attention: one-token steps check there).
    pub fn verifies(&self) -> usize {
        match self.fused && attention::one_pass(self.tokens.len() + self.verify_rows) {
            true => self.verify_rows,
            false => 0,
        }
    }

    /// Runs `tokens` after the cache in one pass (a speculative check) and returns
    /// every position's logits, each bit for bit a one-token step's: the same kernels
    /// with each weight decoded once for all the positions (`decodes`).
    async fn verify(
        &mut self,
        m: &GpuModel,
        adapter: Option<&GpuLoraAdapter>,
        tokens: &[u32],
    ) -> Result<Vec<Vec<f32>>> {
        self.abandon();
        self.check(m, tokens)?;
        let n = tokens.len();
        if n > self.verifies() {
            return Err(Error::invalid(format!(
                "{n} positions to verify; at most {} here in one pass",
                self.verifies()
            )));
        }
        let g = &m.gpu;
        let at = self.upload_step(g, tokens, None, false);
        let (plan, len) = self.plan(m, adapter, Shape::Check(n))?;
        let mut enc = g.device.create_command_encoder(&Default::default());
        let mut pass = enc.begin_compute_pass(&Default::default());
        plan.replay_range(&mut pass, 1, 0..len)?;
        drop(pass);
        let row = m.config.vocab_size;
        let bytes = (n * row * 4) as u64;
        let out = g
            .submit_and_read_into(enc, &self.b.logits, 0, &self.b.read_logits, bytes)
            .await?;
        self.tokens.extend_from_slice(tokens);
        self.wrote(at.1 + n);
        let logits: Vec<f32> = bytemuck::pod_collect_to_vec(&out);
        Ok(logits.chunks_exact(row).map(<[f32]>::to_vec).collect())
    }

    /// Writes a chunk's token ids and its step (length, first position, what the head
    /// keeps, how the next token is picked) for the kernels; returns (length, first
    /// position). No ids (a chained step): its one input is the token the step before
    /// picked, already in the token buffer.
    /// Writes a step's tokens and uniform; `late_mask`: the grammar mask is written
    /// after the step's layers are submitted.
    fn upload_step(
        &self,
        g: &Gpu,
        tokens: &[u32],
        want: Option<&Want<'_>>,
        late_mask: bool,
    ) -> (usize, usize) {
        let (n, pos0) = (tokens.len().max(1), self.tokens.len());
        let mut step = Step::new(n, pos0);
        let mut ids = vec![0u32];
        if let Some(w) = want {
            step.top_k = w.top_k.unwrap_or(1).clamp(1, sample::MAX_K) as u32;
            if w.penalty != 1.0 {
                step.penalty = w.penalty;
                let listed = &w.penalty_ids[..w.penalty_ids.len().min(MAX_PENALTY_IDS)];
                ids[0] = listed.len() as u32;
                ids.extend_from_slice(listed);
                step.penalize_input = (w.pick.penalize_input && tokens.is_empty()) as u32;
            }
            step.temperature = w.pick.temperature;
            step.top_p = w.pick.top_p;
            step.min_p = w.pick.min_p;
            step.u = w.pick.u;
            if let (Some(mask), Some(_)) = (w.mask, w.top_k) {
                self.topk.write_mask(g, mask);
                step.masked = 1;
            }
            if late_mask && w.top_k.is_some() {
                step.masked = 1;
            }
        }
        if !tokens.is_empty() {
            g.queue
                .write_buffer(&self.b.tokens, 0, bytemuck::cast_slice(tokens));
        }
        g.queue
            .write_buffer(&self.b.step, 0, bytemuck::bytes_of(&step));
        g.queue
            .write_buffer(&self.b.penalty_ids, 0, bytemuck::cast_slice(&ids));
        (n, pos0)
    }

    /// Records a chunk (its step uploaded) into a command encoder: a decode step
    /// replays its recorded plan; with candidates wanted, the head, top-k and the
    /// pick run too. `part` picks the dispatches before the pick, the pick, or both.
    fn encode_chunk(
        &mut self,
        m: &GpuModel,
        adapter: Option<&GpuLoraAdapter>,
        (n, pos0): (usize, usize),
        want: Option<&Want<'_>>,
        part: Part,
    ) -> Result<wgpu::CommandEncoder> {
        let mut enc = m.gpu.device.create_command_encoder(&Default::default());
        let picks = matches!(want, Some(Want { top_k: Some(_), .. }));
        if picks && n == 1 && self.replay {
            let splits = ((pos0 + 1) as u32).div_ceil(attention::CHUNK);
            let (plan, body) = self.plan(m, adapter, Shape::decoding(pos0))?;
            let range = match part {
                Part::Whole => 0..plan.len(),
                Part::Body => 0..body,
                Part::Pick => body..plan.len(),
            };
            let mut pass = enc.begin_compute_pass(&Default::default());
            plan.replay_range(&mut pass, splits, range)?;
            drop(pass);
            return Ok(enc);
        }
        let mut inner = enc.begin_compute_pass(&Default::default());
        let mut pass = Pass::new(&m.kernels, &self.b.step, &mut inner);
        if part != Part::Pick {
            self.encode_layers(m, adapter, &mut pass, n, pos0)?;
            if want.is_some() {
                self.encode_head(m, &mut pass, n, false)?;
            }
        }
        if part != Part::Body && picks {
            self.encode_pick(&mut pass)?;
        }
        drop(inner);
        Ok(enc)
    }

    /// Top-k of the logits, then the pick into the token buffer (`choose.wgsl`).
    fn encode_pick(&self, pass: &mut Pass) -> Result<()> {
        let b = &self.b;
        self.topk.encode(pass, &b.logits)?;
        self.topk.choose(pass, &b.tokens)
    }

    async fn run_chunk(
        &mut self,
        m: &GpuModel,
        adapter: Option<&GpuLoraAdapter>,
        tokens: &[u32],
        want: Option<&Want<'_>>,
        late: Option<LateMask<'_>>,
    ) -> Result<Option<Logits>> {
        let g = &m.gpu;
        let at = self.upload_step(g, tokens, want, late.is_some());
        let Some(want) = want else {
            let enc = self.encode_chunk(m, adapter, at, None, Part::Whole)?;
            g.queue.submit([enc.finish()]);
            return g.take_error().map(|_| None);
        };
        let enc = match late {
            None => self.encode_chunk(m, adapter, at, Some(want), Part::Whole)?,
            Some(mask) => {
                let body = self.encode_chunk(m, adapter, at, Some(want), Part::Body)?;
                g.queue.submit([body.finish()]);
                // The device runs the layers while the mask is computed; it reaches
                // the device before the pick is submitted.
                let bits = mask()?;
                if want.top_k.is_some() {
                    self.topk.write_mask(g, &bits);
                }
                self.encode_chunk(m, adapter, at, Some(want), Part::Pick)?
            }
        };
        let (src, staging, bytes) = match want.top_k {
            Some(kk) => (
                &self.topk.out,
                &self.b.read_top,
                kk.clamp(1, sample::MAX_K) as u64 * 8,
            ),
            None => (
                &self.b.logits,
                &self.b.read_logits,
                m.config.vocab_size as u64 * 4,
            ),
        };
        let out = g.submit_and_read_into(enc, src, 0, staging, bytes).await?;
        Ok(Some(match want.top_k {
            Some(_) => Logits::Top(sample::decode_pairs(&out, m.config.vocab_size)),
            None => Logits::Full(bytemuck::pod_collect_to_vec(&out)),
        }))
    }
}

/// What a recorded plan runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Shape {
    /// A decode step with one-pass attention.
    Step,
    /// A decode step with attention split over the context (`attention::ONE_PASS_MAX`).
    SplitStep,
    /// A speculative check of this many positions (one-pass attention).
    Check(usize),
}

impl Shape {
    /// The decode step that runs the token at `pos`.
    fn decoding(pos: usize) -> Shape {
        match attention::one_pass(pos + 1) {
            true => Shape::Step,
            false => Shape::SplitStep,
        }
    }
}

/// Which dispatches of a step `encode_chunk` records.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Whole,
    /// Up to the logits.
    Body,
    /// Top-k and the pick.
    Pick,
}
