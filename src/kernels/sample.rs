//! Sampling on the GPU, so decode reads back a few (id, logit) pairs or one chosen id
//! instead of the logits: top-k selection (`top_k.wgsl`, k = 1 is argmax), the
//! repetition penalty (`penalty.wgsl`) and the pick itself (`choose.wgsl`).
//! CPU reference: `sampler`.

use super::Pass;
use super::{Bind, Shader};
use crate::error::Result;
use crate::gpu::Gpu;

/// Logits per first-pass workgroup.
const CH: usize = 1024;
/// Largest k the GPU selects; sampling with a larger (or no) top-k considers these
/// most likely tokens only.
pub const MAX_K: usize = 64;

/// Buffers for one vocabulary size.
pub struct TopK {
    vocab: usize,
    stage1: wgpu::Buffer,
    pub out: wgpu::Buffer,
    dummy: wgpu::Buffer,
    /// The allowed tokens of a guided step, a bit each (read when `step.masked`).
    pub mask: wgpu::Buffer,
}

impl TopK {
    pub fn new(gpu: &Gpu, vocab: usize) -> Result<TopK> {
        let [stage1, out, dummy, mask] = Self::buffers(vocab).map(|(what, b)| gpu.storage(what, b));
        Ok(TopK {
            vocab,
            stage1: stage1?,
            out: out?,
            dummy: dummy?,
            mask: mask?,
        })
    }

    /// The buffers for a vocabulary of `vocab` tokens, by name and size (the loader
    /// checks them against the device's limits before they exist).
    pub fn buffers(vocab: usize) -> [(&'static str, u64); 4] {
        let chunks = vocab.div_ceil(CH) as u64;
        [
            ("top-k stage 1", chunks * MAX_K as u64 * 8),
            ("top-k", MAX_K as u64 * 8),
            ("top-k dummy", 8),
            ("top-k mask", (mask_words(vocab) * 4).max(4) as u64),
        ]
    }

    /// GPU bytes these hold for a vocabulary of `vocab` tokens.
    pub fn bytes_for(vocab: usize) -> u64 {
        Self::buffers(vocab).iter().map(|(_, b)| b).sum()
    }

    pub fn bytes(&self) -> u64 {
        Self::bytes_for(self.vocab)
    }

    /// Writes a guided step's mask (bits past `mask` are clear: those tokens are not
    /// allowed); the step's `masked` turns it on.
    pub fn write_mask(&self, gpu: &Gpu, mask: &[u32]) {
        let mut words = vec![0u32; mask_words(self.vocab)];
        let n = words.len().min(mask.len());
        words[..n].copy_from_slice(&mask[..n]);
        gpu.queue
            .write_buffer(&self.mask, 0, bytemuck::cast_slice(&words));
    }

    /// Selects the `step.top_k` largest of `logits` (vocab floats) into `out` as (id,
    /// f32 bits). The count is a uniform: every count uses the same two pipelines.
    pub fn encode(&self, pass: &mut Pass, logits: &wgpu::Buffer) -> Result<()> {
        let chunks = self.vocab.div_ceil(CH);
        // Stage 1: each chunk of CH logits keeps its MAX_K largest; stage 2 merges them.
        let n2 = chunks * MAX_K;
        let first = [
            Bind::f32s(logits, self.vocab),
            (&self.dummy).into(),
            Bind::f32s(&self.stage1, 2 * n2),
        ];
        self.stage(pass, true, (self.vocab, CH), first, chunks)?;
        let second = [
            (&self.dummy).into(),
            Bind::f32s(&self.stage1, 2 * n2),
            Bind::f32s(&self.out, 2 * MAX_K),
        ];
        self.stage(pass, false, (n2, n2), second, 1)
    }

    /// One top-k pass over `n` values in chunks of `ch`, reading logits (stage 1) or
    /// the previous stage's pairs, writing pairs.
    fn stage(
        &self,
        pass: &mut Pass,
        first: bool,
        (n, ch): (usize, usize),
        io: [Bind; 3],
        groups: usize,
    ) -> Result<()> {
        let (k, step) = (pass.kernels, pass.step);
        let constants = [
            ("FIRST", if first { 1.0 } else { 0.0 }),
            ("N", n as f64),
            ("CH", ch as f64),
            ("MAX_K", MAX_K as f64),
        ];
        let p = k.pipe(Shader::TopK, &constants)?;
        let [a, b, c] = io;
        let mask = Bind::f32s(&self.mask, mask_words(self.vocab));
        k.dispatch(
            pass,
            &p,
            &[step.into(), a, b, c, mask],
            [groups as u32, 1, 1],
        )
    }
}

/// Words of a mask with a bit per token.
pub fn mask_words(vocab: usize) -> usize {
    vocab.div_ceil(32).max(1)
}

/// Decodes `kk` read-back pairs, dropping the filler of a vocabulary smaller than k.
pub fn decode_pairs(bytes: &[u8], vocab: usize) -> Vec<(u32, f32)> {
    bytes
        .chunks_exact(8)
        .map(|p| {
            let id = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            (id, f32::from_le_bytes([p[4], p[5], p[6], p[7]]))
        })
        .filter(|(id, _)| (*id as usize) < vocab)
        .collect()
}

/// Applies the repetition penalty `step.penalty` to `logits` for the listed token ids
/// (`ids` holds the count, then distinct ids; a count of 0 changes nothing).
/// With `step.penalize_input`, `tokens[0]` (the step's input, chosen on the GPU) is
/// penalized too unless listed.
pub fn penalty(
    pass: &mut Pass,
    ids: &wgpu::Buffer,
    logits: &wgpu::Buffer,
    tokens: &wgpu::Buffer,
) -> Result<()> {
    let (k, step) = (pass.kernels, pass.step);
    let pipe = k.pipe(Shader::Penalty, &[])?;
    let bufs = [
        step.into(),
        ids.into(),
        logits.into(),
        Bind::f32s(tokens, 1),
    ];
    k.dispatch(pass, &pipe, &bufs, [1, 1, 1])
}

impl TopK {
    /// Picks the next token from `out` (`choose.wgsl`: greedy, or the step's
    /// temperature, top-p, min-p and draw) into `tokens[0]`.
    pub fn choose(&self, pass: &mut Pass, tokens: &wgpu::Buffer) -> Result<()> {
        let (k, step) = (pass.kernels, pass.step);
        let pipe = k.pipe(
            Shader::Choose,
            &[("VOCAB", self.vocab as f64), ("MAX_K", MAX_K as f64)],
        )?;
        let bufs = [
            step.into(),
            Bind::f32s(&self.out, 2 * MAX_K),
            Bind::f32s(tokens, 1),
        ];
        k.dispatch(pass, &pipe, &bufs, [1, 1, 1])
    }
}
