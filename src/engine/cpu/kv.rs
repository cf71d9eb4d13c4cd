//! The CPU backend's KV cache: int8 keys and values with one f32 scale per (position,
//! KV head), as the GPU's default cache (`KvFormat::Int8`), or f32 (`KvCache`, the
//! reference's). Both grow with the conversation.

use crate::engine::backend::{damaged, Reader, Writer};
use crate::error::Result;
use crate::model::reference::{softmax, AttnShape, KvStore};
use crate::model::short_conv::ConvState;
use crate::model::{Config, KvCache};
use crate::par::*;
use crate::quant::kv::KvFormat;
use pippin_cpu_kernels::fastest::{axpy8, dot8};

/// One layer's keys and values, `[position][kv head][head dim]`, and their scales
/// `[position][kv head]`.
#[derive(Clone, Default)]
struct Layer8 {
    k: Vec<i8>,
    v: Vec<i8>,
    ks: Vec<f32>,
    vs: Vec<f32>,
}

#[derive(Clone)]
pub struct Int8Kv {
    layers: Vec<Layer8>,
    /// Convolution layers' state (LFM2), in f32: a few rows a layer.
    conv: ConvState,
    kv_heads: usize,
    head_dim: usize,
    len: usize,
}

/// Appends `x` (rows of heads) as int8, each head scaled so its largest value is 127.
fn quantize(x: &[f32], head_dim: usize, q: &mut Vec<i8>, scales: &mut Vec<f32>) {
    for head in x.chunks_exact(head_dim) {
        let amax = head.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        // Ties to even, as the GPU's cache rounds (`quant::kv::round_trip`).
        q.extend(head.iter().map(|v| (v * id).round_ties_even() as i8));
        scales.push(d);
    }
}

impl Int8Kv {
    pub fn new(c: &Config) -> Self {
        Self::with_shape(c.n_layers, c.n_kv_heads, c.head_dim)
    }

    pub fn with_shape(layers: usize, kv_heads: usize, head_dim: usize) -> Self {
        Int8Kv {
            layers: (0..layers).map(|_| Layer8::default()).collect(),
            conv: ConvState::new(layers),
            kv_heads,
            head_dim,
            len: 0,
        }
    }

    /// As `KvCache::truncate`.
    pub fn truncate(&mut self, len: usize, c: &Config) -> usize {
        self.len = self.conv.cut(self.len.min(len), c.conv_taps, c.hidden);
        let (heads, values) = (
            self.len * self.kv_heads,
            self.len * self.kv_heads * self.head_dim,
        );
        for l in &mut self.layers {
            l.ks.truncate(heads);
            l.vs.truncate(heads);
            l.k.truncate(values);
            l.v.truncate(values);
        }
        self.len
    }

    pub fn bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| (l.k.len() + l.v.len() + 4 * (l.ks.len() + l.vs.len())) as u64)
            .sum::<u64>()
            + self.conv.bytes()
    }
}

impl KvStore for Int8Kv {
    fn positions(&self) -> usize {
        self.len
    }

    fn append(&mut self, l: usize, k: &[f32], v: &[f32]) {
        let hd = self.head_dim;
        let layer = &mut self.layers[l];
        quantize(k, hd, &mut layer.k, &mut layer.ks);
        quantize(v, hd, &mut layer.v, &mut layer.vs);
    }

    /// As `reference::attention`, reading each key and value through its scale.
    fn attend(&self, l: usize, q: &[f32], s: AttnShape) -> Vec<f32> {
        let layer = &self.layers[l];
        let (hd, q_dim) = (s.head_dim, s.n_heads * s.head_dim);
        let kv_len = layer.ks.len() / s.n_kv_heads;
        let t = q.len() / q_dim;
        let group = s.n_heads / s.n_kv_heads;
        let mut out = vec![0f32; q.len()];
        out.par_chunks_exact_mut(hd)
            .enumerate()
            .for_each(|(idx, o)| {
                let (ti, h) = (idx / s.n_heads, idx % s.n_heads);
                let qh = &q[ti * q_dim + h * hd..][..hd];
                let kvh = h / group;
                let visible = kv_len - t + ti + 1;
                let first = visible.saturating_sub(s.window);
                let at = |p: usize| p * s.n_kv_heads + kvh;
                let mut scores: Vec<f32> = (first..visible)
                    .map(|p| s.score(dot8(qh, &layer.k[at(p) * hd..][..hd]) * layer.ks[at(p)]))
                    .collect();
                softmax(&mut scores);
                for (p, &w) in (first..).zip(&scores) {
                    axpy8(o, w * layer.vs[at(p)], &layer.v[at(p) * hd..][..hd]);
                }
            });
        out
    }

    fn advance(&mut self, t: usize) {
        self.len += t;
    }

    fn conv(&mut self, l: usize, bx: &[f32], taps: &[f32], n_taps: usize) -> Vec<f32> {
        self.conv.run(l, self.len, bx, taps, n_taps)
    }
}

/// A conversation's keys and values in the format asked for: f32, or int8 for every
/// quantized format (the CPU has no int4/f16 cache).
#[derive(Clone)]
pub enum Cache {
    F32(KvCache),
    Int8(Int8Kv),
}

impl Cache {
    pub fn new(c: &Config, format: KvFormat) -> Cache {
        match format {
            KvFormat::F32 => Cache::F32(KvCache::new(c)),
            _ => Cache::Int8(Int8Kv::new(c)),
        }
    }

    /// Keeps the first `len` positions where it can (see `KvCache::truncate`);
    /// returns how many it kept.
    pub fn truncate(&mut self, len: usize, c: &Config) -> usize {
        match self {
            Cache::F32(kv) => kv.truncate(len, c),
            Cache::Int8(kv) => kv.truncate(len, c),
        }
    }

    /// Positions held.
    pub fn positions(&self) -> usize {
        match self {
            Cache::F32(c) => c.len,
            Cache::Int8(c) => c.len,
        }
    }

    pub fn bytes(&self) -> u64 {
        match self {
            Cache::F32(c) => {
                let kv: u64 = c.k.iter().chain(&c.v).map(|l| 4 * l.len() as u64).sum();
                kv + c.conv.bytes()
            }
            Cache::Int8(c) => c.bytes(),
        }
    }
}

/// A saved session's keys and values, as `Cache::write` lays them out: per layer K, V
/// (and int8's scales), then the convolution state.
impl Cache {
    pub fn write(&self, w: &mut Writer) {
        let conv = match self {
            Cache::F32(c) => {
                w.u64(c.len as u64);
                for (k, v) in c.k.iter().zip(&c.v) {
                    w.bytes(bytemuck::cast_slice(k));
                    w.bytes(bytemuck::cast_slice(v));
                }
                &c.conv
            }
            Cache::Int8(c) => {
                w.u64(c.len as u64);
                for l in &c.layers {
                    w.bytes(bytemuck::cast_slice(&l.k));
                    w.bytes(bytemuck::cast_slice(&l.v));
                    w.bytes(bytemuck::cast_slice(&l.ks));
                    w.bytes(bytemuck::cast_slice(&l.vs));
                }
                &c.conv
            }
        };
        let (rows, lo) = conv.parts();
        for (r, &lo) in rows.iter().zip(lo) {
            w.u64(lo as u64);
            w.bytes(bytemuck::cast_slice(r));
        }
    }

    /// What `write` wrote for a cache of `format` under `c`, checked to be one a
    /// conversation of that model can hold (anything else is a damaged save).
    pub fn read(r: &mut Reader, c: &Config, format: KvFormat) -> Result<Cache> {
        let len = usize::try_from(r.u64()?).map_err(|_| damaged())?;
        let (rows, kv) = (
            len.checked_mul(c.n_kv_heads).ok_or_else(damaged)?,
            c.kv_dim(),
        );
        let values = len.checked_mul(kv).ok_or_else(damaged)?;
        let sized = |v: Vec<f32>, n: usize| (v.len() == n).then_some(v).ok_or_else(damaged);
        let mut cache = Cache::new(c, format);
        match &mut cache {
            Cache::F32(kc) => {
                for l in 0..c.n_layers {
                    let n = if c.is_conv(l) { 0 } else { values };
                    kc.k[l] = sized(floats(r.bytes()?)?, n)?;
                    kc.v[l] = sized(floats(r.bytes()?)?, n)?;
                }
                kc.len = len;
            }
            Cache::Int8(kc) => {
                for (i, l) in kc.layers.iter_mut().enumerate() {
                    let conv = c.is_conv(i);
                    let (k, v) = (r.bytes()?, r.bytes()?);
                    if [k.len(), v.len()] != [if conv { 0 } else { values }; 2] {
                        return Err(damaged());
                    }
                    l.k = bytemuck::cast_slice(k).to_vec();
                    l.v = bytemuck::cast_slice(v).to_vec();
                    l.ks = sized(floats(r.bytes()?)?, if conv { 0 } else { rows })?;
                    l.vs = sized(floats(r.bytes()?)?, if conv { 0 } else { rows })?;
                }
                kc.len = len;
            }
        }
        let (mut rows, mut lo) = (Vec::new(), Vec::new());
        for _ in 0..c.n_layers {
            lo.push(usize::try_from(r.u64()?).map_err(|_| damaged())?);
            rows.push(floats(r.bytes()?)?);
        }
        let conv = ConvState::from_parts(rows, lo, len, c).ok_or_else(damaged)?;
        match &mut cache {
            Cache::F32(kc) => kc.conv = conv,
            Cache::Int8(kc) => kc.conv = conv,
        }
        if !r.is_empty() {
            return Err(damaged());
        }
        Ok(cache)
    }
}

fn floats(b: &[u8]) -> Result<Vec<f32>> {
    if !b.len().is_multiple_of(4) {
        return Err(damaged());
    }
    Ok(b.chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect())
}
