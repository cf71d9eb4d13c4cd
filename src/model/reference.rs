//! The whole forward pass in plain f32 Rust on the CPU: the ground truth for every GPU
//! kernel and for the engine. Clear over clever; matmuls run on all cores.

use super::arch::block::{self, Block, LayerOps, Norm, Projs};
use super::config::{Activation, Config, RopeStyle};
use super::linear::Linear;
pub use super::linear::{dot, matmul};
use super::lora::Adapter;
use super::short_conv::ConvState;
use super::weights::{Layer, Weights};
use super::Proj;
use crate::error::{Error, Result};
use crate::par::*;
use std::ops::Range;

/// Keys and values of every position seen so far, per layer, `[pos][kv_dim]` flattened,
/// and the state of convolution layers.
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    pub k: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
    pub conv: ConvState,
    pub len: usize,
}

impl KvCache {
    pub fn new(c: &Config) -> Self {
        KvCache {
            k: vec![Vec::new(); c.n_layers],
            v: vec![Vec::new(); c.n_layers],
            conv: ConvState::new(c.n_layers),
            len: 0,
        }
    }
    /// Forgets positions from `len` on (to rewind a conversation), or all of them
    /// where the convolution state no longer reaches back to `len`. Returns the
    /// positions kept.
    pub fn truncate(&mut self, len: usize, c: &Config) -> usize {
        self.len = self.conv.cut(self.len.min(len), c.conv_taps, c.hidden);
        for l in self.k.iter_mut().chain(self.v.iter_mut()) {
            l.truncate(self.len * c.kv_dim());
        }
        self.len
    }
}

/// Where a forward pass keeps keys and values: f32 here (`KvCache`), int8 in the CPU
/// backend.
pub trait KvStore {
    /// Positions cached.
    fn positions(&self) -> usize;
    /// Appends layer `l`'s keys and values of the new tokens (`[t][kv_dim]` each).
    fn append(&mut self, l: usize, k: &[f32], v: &[f32]);
    /// Causal attention of the new tokens' queries `q` over layer `l`'s positions.
    fn attend(&self, l: usize, q: &[f32], s: AttnShape) -> Vec<f32>;
    /// Counts the new tokens in, once every layer has appended them.
    fn advance(&mut self, t: usize);
    /// Convolution layer `l`'s `short_conv` of the new tokens' B ⊙ x rows, which
    /// join its state.
    fn conv(&mut self, l: usize, bx: &[f32], taps: &[f32], n_taps: usize) -> Vec<f32>;
}

impl KvStore for KvCache {
    fn positions(&self) -> usize {
        self.len
    }
    fn append(&mut self, l: usize, k: &[f32], v: &[f32]) {
        self.k[l].extend_from_slice(k);
        self.v[l].extend_from_slice(v);
    }
    fn attend(&self, l: usize, q: &[f32], s: AttnShape) -> Vec<f32> {
        let kv_len = self.k[l].len() / (s.n_kv_heads * s.head_dim);
        attention(q, &self.k[l], &self.v[l], kv_len, s)
    }
    fn advance(&mut self, t: usize) {
        self.len += t;
    }
    fn conv(&mut self, l: usize, bx: &[f32], taps: &[f32], n_taps: usize) -> Vec<f32> {
        self.conv.run(l, self.len, bx, taps, n_taps)
    }
}

/// The inputs of a layer's matmuls: q/k/v share one, gate/up another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Site {
    /// The normed input of q, k and v.
    Attention,
    /// The attention output, input of `attn_output`.
    AttentionOutput,
    /// The normed input of gate and up.
    Ffn,
    /// The SwiGLU output, input of `ffn_down`.
    FfnDown,
}

/// Sees each site's input: `(layer, site, [tokens][width])`.
pub type Observer<'a> = &'a mut dyn FnMut(usize, Site, &[f32]);

/// The forward pass over weights whose matrices are `M`: f32 (`Vec<f32>`, the
/// reference) or the CPU backend's quantized ones.
pub struct Reference<M = Vec<f32>> {
    pub config: Config,
    pub weights: Weights<M>,
}

impl<M: Linear> Reference<M> {
    pub fn new(config: Config, weights: Weights<M>) -> Self {
        Reference { config, weights }
    }

    /// Runs `tokens` at positions `cache.len..`, appending to the cache. Returns the
    /// logits of every position when `all_logits`, else of the last one only.
    pub fn forward(
        &self,
        cache: &mut dyn KvStore,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<Vec<f32>> {
        self.forward_adapted(cache, tokens, all_logits, None)
    }

    /// As `forward`, with a LoRA adapter applied beside each matmul it updates.
    pub fn forward_adapted(
        &self,
        cache: &mut dyn KvStore,
        tokens: &[u32],
        all_logits: bool,
        adapter: Option<&Adapter>,
    ) -> Result<Vec<f32>> {
        let x = self.hidden(cache, tokens, adapter)?;
        Ok(self.logits(&x, all_logits))
    }

    /// As `forward`, but the logits of the positions `at` (indices into `tokens`)
    /// only: long teacher-forced prompts without the head over every position.
    pub fn forward_at(
        &self,
        cache: &mut dyn KvStore,
        tokens: &[u32],
        at: &[usize],
    ) -> Result<Vec<Vec<f32>>> {
        let h = self.config.hidden;
        if let Some(&bad) = at.iter().find(|&&i| i >= tokens.len()) {
            return Err(Error::invalid(format!(
                "position {bad} is past the {} tokens",
                tokens.len()
            )));
        }
        let x = self.hidden(cache, tokens, None)?;
        Ok(at
            .iter()
            .map(|&i| self.logits(&x[i * h..(i + 1) * h], false))
            .collect())
    }

    /// The final hidden states of `tokens` (before the output norm), appended to the
    /// cache.
    fn hidden(
        &self,
        cache: &mut dyn KvStore,
        tokens: &[u32],
        adapter: Option<&Adapter>,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        if tokens.is_empty() {
            return Err(Error::invalid("no tokens to run"));
        }
        if cache.positions() + tokens.len() > c.context_length {
            return Err(Error::context_full(format!(
                "{} tokens do not fit in the context of {} ({} already used)",
                tokens.len(),
                c.context_length,
                cache.positions()
            )));
        }
        let mut x = self.embed(tokens)?;
        let mut ignore = |_: usize, _: Site, _: &[f32]| {};
        for l in 0..c.n_layers {
            self.layer(l, &mut x, cache, &mut ignore, adapter)?;
        }
        cache.advance(tokens.len());
        Ok(x)
    }

    /// The layers' input for `tokens`: embedding rows, scaled as the model says.
    pub fn embed(&self, tokens: &[u32]) -> Result<Vec<f32>> {
        let c = &self.config;
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
            return Err(Error::invalid(format!(
                "token id {t} is outside the vocabulary of {}",
                c.vocab_size
            )));
        }
        let mut x = Vec::with_capacity(tokens.len() * c.hidden);
        self.weights
            .token_embd
            .append_rows(tokens, c.hidden, &mut x);
        if c.embed_scale != 1.0 {
            x.iter_mut().for_each(|v| *v *= c.embed_scale);
        }
        Ok(x)
    }

    /// Runs the hidden states `x` through `layers`, calling `observe(layer,
    /// site, input)` with the input of each matmul site (calibration statistics). The
    /// caller advances `cache.len` afterwards.
    pub fn layers(
        &self,
        layers: Range<usize>,
        x: &mut [f32],
        cache: &mut dyn KvStore,
        observe: Observer,
    ) -> Result<()> {
        for l in layers {
            self.layer(l, x, cache, observe, None)?;
        }
        Ok(())
    }

    fn layer(
        &self,
        l: usize,
        x: &mut [f32],
        cache: &mut dyn KvStore,
        observe: Observer,
        adapter: Option<&Adapter>,
    ) -> Result<()> {
        let c = &self.config;
        let mut ops = RefLayer {
            r: self,
            w: &self.weights.layers[l],
            at: Matmuls { l, adapter },
            x,
            cache,
            observe,
        };
        block::run(&mut ops, &c.block(l))
    }

    /// The output head over the final hidden states: every position's logits, or the
    /// last one's.
    pub fn logits(&self, x: &[f32], all: bool) -> Vec<f32> {
        let c = &self.config;
        let last = if all { x } else { &x[x.len() - c.hidden..] };
        let h = rmsnorm(last, &self.weights.output_norm, c.rms_eps);
        let mut logits = self.weights.head_matrix().apply(&h, c.hidden);
        if c.logit_scale != 1.0 || c.final_softcap > 0.0 {
            let (scale, cap) = (c.logit_scale, c.final_softcap);
            logits
                .iter_mut()
                .for_each(|v| *v = softcap(*v * scale, cap));
        }
        logits
    }
}

/// One layer of the reference's forward: the block's operations over rows of floats.
struct RefLayer<'a, 'o, M> {
    r: &'a Reference<M>,
    w: &'a Layer<M>,
    at: Matmuls<'a>,
    /// The residual stream `[tokens][hidden]`.
    x: &'a mut [f32],
    cache: &'a mut dyn KvStore,
    observe: Observer<'o>,
}

/// Values between the reference's operations: one array per projection of a group
/// (`[tokens][width]` each), or one.
type Rows = Vec<Vec<f32>>;

fn one(mut v: Rows) -> Result<Vec<f32>> {
    match v.len() {
        1 => Ok(v.swap_remove(0)),
        _ => Err(Error::internal(
            "reference: several arrays where one was due",
        )),
    }
}

/// Where a group's input is seen by calibration.
fn site(ps: Projs) -> Site {
    match ps {
        Projs::Mixer => Site::Attention,
        Projs::Out => Site::AttentionOutput,
        Projs::GateUp => Site::Ffn,
        Projs::Down => Site::FfnDown,
    }
}

impl<M: Linear> RefLayer<'_, '_, M> {
    fn norm_weights(&self, n: Norm) -> Result<&[f32]> {
        let w = self.w;
        match n {
            Norm::Attn => Some(&w.attn_norm[..]),
            Norm::Ffn => Some(&w.ffn_norm[..]),
            Norm::PostAttn => w.post_attn_norm.as_deref(),
            Norm::PostFfn => w.post_ffn_norm.as_deref(),
        }
        .ok_or_else(|| Error::internal("reference: a layer lacks a norm its block runs"))
    }
}

impl<M: Linear> LayerOps for RefLayer<'_, '_, M> {
    type Value = Rows;

    fn norm(&mut self, n: Norm) -> Result<Rows> {
        let eps = self.r.config.rms_eps;
        Ok(vec![rmsnorm(self.x, self.norm_weights(n)?, eps)])
    }

    fn project(&mut self, x: Rows, ps: Projs) -> Result<Rows> {
        let x = one(x)?;
        (self.observe)(self.at.l, site(ps), &x);
        let tokens = self.x.len() / self.r.config.hidden;
        let cols = x.len() / tokens.max(1);
        let out = (ps.members().iter()).map(|&p| {
            let mut y = self.at.apply(p, self.w.proj(p), &x, cols);
            if let Some(b) = &self.w.biases[p] {
                add_rows(&mut y, b);
            }
            y
        });
        Ok(out.collect())
    }

    fn attend(&mut self, qkv: Rows, b: &Block) -> Result<Rows> {
        let (c, l) = (&self.r.config, self.at.l);
        let [mut q, mut k, v]: [Vec<f32>; 3] = qkv
            .try_into()
            .map_err(|_| Error::internal("attention takes q, k and v"))?;
        if let (Some(qn), Some(kn)) = (&self.w.q_norm, &self.w.k_norm) {
            q = rmsnorm(&q, qn, c.rms_eps);
            k = rmsnorm(&k, kn, c.rms_eps);
        }
        if b.rope.is_some() {
            let freqs = c.rope_freqs(self.r.weights.rope_freqs.as_deref(), l);
            let pos0 = self.cache.positions();
            let (style, m) = (c.rope_style, c.rope_mscale);
            rope(&mut q, c.q_dim(), c.head_dim, style, &freqs, pos0, m);
            rope(&mut k, c.kv_dim(), c.head_dim, style, &freqs, pos0, m);
        }
        self.cache.append(l, &k, &v);
        Ok(vec![self.cache.attend(l, &q, AttnShape::of(c, b.window))])
    }

    fn short_conv(&mut self, bcx: Rows) -> Result<Rows> {
        let c = &self.r.config;
        let [b, gate, mut bx]: [Vec<f32>; 3] = bcx
            .try_into()
            .map_err(|_| Error::internal("a short convolution takes B, C and x"))?;
        bx.iter_mut().zip(&b).for_each(|(v, b)| *v *= b);
        let taps = self.w.conv.as_deref().unwrap_or_default();
        let mut y = self.cache.conv(self.at.l, &bx, taps, c.conv_taps);
        y.iter_mut().zip(&gate).for_each(|(v, g)| *v *= g);
        Ok(vec![y])
    }

    fn glu(&mut self, gate_up: Rows, act: Activation) -> Result<Rows> {
        match &gate_up[..] {
            [gate, up] => Ok(vec![glu(act, gate, up)]),
            _ => Err(Error::internal("a GLU takes gate and up")),
        }
    }

    fn residual(&mut self, out: Rows, post: Option<Norm>, scale: f32) -> Result<()> {
        let mut out = one(out)?;
        if let Some(n) = post {
            out = rmsnorm(&out, self.norm_weights(n)?, self.r.config.rms_eps);
        }
        if scale != 1.0 {
            out.iter_mut().for_each(|v| *v *= scale);
        }
        add_in_place(self.x, &out);
        Ok(())
    }
}

/// Adds `bias` to every row of `x`.
pub fn add_rows(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        add_in_place(row, bias);
    }
}

/// A layer's matmuls, each with the adapter's update of that projection (if any).
#[derive(Clone, Copy)]
struct Matmuls<'a> {
    l: usize,
    adapter: Option<&'a Adapter>,
}

impl Matmuls<'_> {
    /// `x·Wᵀ`, plus `(x·Aᵀ)·Bᵀ` when the adapter updates `p` (B is already scaled).
    fn apply(&self, p: Proj, w: &impl Linear, x: &[f32], cols: usize) -> Vec<f32> {
        let mut y = w.apply(x, cols);
        let lora = self.adapter.and_then(|a| a.layers.get(self.l)?[p].as_ref());
        if let Some(lora) = lora {
            let t = matmul(x, &lora.a, lora.cols);
            add_in_place(&mut y, &matmul(&t, &lora.b, lora.rank));
        }
        y
    }
}

/// Rows of the embedding table for `tokens`.
pub fn embed(table: &[f32], hidden: usize, vocab: usize, tokens: &[u32]) -> Result<Vec<f32>> {
    let mut x = Vec::with_capacity(tokens.len() * hidden);
    for &t in tokens {
        if t as usize >= vocab {
            return Err(Error::invalid(format!(
                "token id {t} is outside the vocabulary of {vocab}"
            )));
        }
        x.extend_from_slice(&table[t as usize * hidden..][..hidden]);
    }
    Ok(x)
}

/// RMSNorm of each `weight.len()`-long row of `x` (also per-head QK norm).
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let n = weight.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / n as f32;
        let scale = 1.0 / (ms + eps).sqrt();
        out.extend(row.iter().zip(weight).map(|(v, w)| v * scale * w));
    }
    out
}

/// Rotates every head of `x` (`[tokens][n_heads * head_dim]`); row t is at position
/// `pos0 + t`. Dimensions past `rope_dim` in each head are left as they are. cos and
/// sin are multiplied by `mscale` (LongRoPE's attention factor: the rotated dimensions
/// of queries and keys grow by it, the others do not; 1 elsewhere).
pub fn rope(
    x: &mut [f32],
    row_len: usize,
    head_dim: usize,
    style: RopeStyle,
    freqs: &[f32],
    pos0: usize,
    mscale: f32,
) {
    let half = freqs.len();
    for (t, row) in x.chunks_exact_mut(row_len).enumerate() {
        let pos = (pos0 + t) as f32;
        for head in row.chunks_exact_mut(head_dim) {
            for (i, f) in freqs.iter().enumerate() {
                let (sin, cos) = (pos * f).sin_cos();
                let (sin, cos) = (sin * mscale, cos * mscale);
                let (a, b) = match style {
                    RopeStyle::Adjacent => (2 * i, 2 * i + 1),
                    RopeStyle::HalfSplit => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos - x1 * sin;
                head[b] = x0 * sin + x1 * cos;
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Scores are q·k times this (usually 1/√head_dim).
    pub scale: f32,
    /// Then soft-capped: cap·tanh(score/cap) (0: not capped).
    pub softcap: f32,
    /// Keys visible behind each query, itself included (`usize::MAX`: all).
    pub window: usize,
}

impl AttnShape {
    /// Model `c`'s attention with a sliding window of `window` keys (0 or
    /// `usize::MAX`: all).
    pub fn of(c: &Config, window: usize) -> AttnShape {
        AttnShape {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            scale: c.attn_scale,
            softcap: c.attn_softcap,
            window: if window == 0 { usize::MAX } else { window },
        }
    }

    /// The score softmax reads for a query·key dot product.
    pub fn score(&self, dot: f32) -> f32 {
        softcap(dot * self.scale, self.softcap)
    }
}

/// `cap·tanh(x/cap)`: x squashed into (-cap, cap), nearly unchanged where |x| ≪ cap
/// (0: x as is).
pub fn softcap(x: f32, cap: f32) -> f32 {
    if cap > 0.0 {
        cap * (x / cap).tanh()
    } else {
        x
    }
}

/// Causal grouped-query attention of `q` (`[t][n_heads * head_dim]`, the last t of
/// `kv_len` positions) over cached `k`, `v` (`[kv_len][n_kv_heads * head_dim]`).
pub fn attention(q: &[f32], k: &[f32], v: &[f32], kv_len: usize, s: AttnShape) -> Vec<f32> {
    let (hd, q_dim, kv_dim) = (
        s.head_dim,
        s.n_heads * s.head_dim,
        s.n_kv_heads * s.head_dim,
    );
    let t = q.len() / q_dim;
    let group = s.n_heads / s.n_kv_heads;
    let mut out = vec![0f32; q.len()];
    out.par_chunks_mut(hd).enumerate().for_each(|(idx, o)| {
        let (ti, h) = (idx / s.n_heads, idx % s.n_heads);
        let qh = &q[ti * q_dim + h * hd..][..hd];
        let kvh = h / group;
        let visible = kv_len - t + ti + 1;
        let first = visible.saturating_sub(s.window);
        let mut scores: Vec<f32> = (first..visible)
            .map(|p| s.score(dot(qh, &k[p * kv_dim + kvh * hd..][..hd])))
            .collect();
        softmax(&mut scores);
        for (p, &w) in (first..).zip(&scores) {
            axpy(o, w, &v[p * kv_dim + kvh * hd..][..hd]);
        }
    });
    out
}

/// `y += a·x`.
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    pippin_cpu_kernels::fastest::axpy_f32(y, a, x)
}

pub fn softmax(x: &mut [f32]) {
    let max = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    x.iter_mut().for_each(|v| *v /= sum);
}

pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh approximation (as Gemma and ggml compute it).
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x)).tanh())
}

pub fn swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    glu(Activation::Silu, gate, up)
}

/// The gated MLP's middle: act(gate) · up.
pub fn glu(act: Activation, gate: &[f32], up: &[f32]) -> Vec<f32> {
    let f = match act {
        Activation::Silu => silu,
        Activation::GeluTanh => gelu_tanh,
    };
    gate.iter().zip(up).map(|(&g, &u)| f(g) * u).collect()
}
