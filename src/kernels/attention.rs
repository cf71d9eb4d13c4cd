//! The quantized KV cache (`kv_write.wgsl`) and fused grouped-query attention: for one
//! token, everything in one pass while the context is short
//! (`attention_decode_fused.wgsl`: QK-norm, RoPE, the cache write and attention),
//! flash-decoding splits past that (`attention_decode.wgsl` + `attention_reduce.wgsl`);
//! tiled causal attention for a chunk (`attention_prefill.wgsl`).
//! CPU reference: `model::reference::{rmsnorm, rope}`, `quant::kv::round_trip`, then
//! `model::reference::attention`.

use super::Pass;
use super::{Bind, Groups, Shader};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::short_conv::CONV_ROLLBACK;
use crate::model::Config;
use crate::quant::kv::KvFormat;

/// Positions per flash-decoding split (the kernel's CHUNK).
pub const CHUNK: u32 = 64;

/// Longest context decoded in one pass (one workgroup per KV head): past it, the
/// positions are split over more workgroups and reduced after.
pub const ONE_PASS_MAX: usize = 2048;

/// Whether a decode step over `kv_len` positions attends in one pass.
pub fn one_pass(kv_len: usize) -> bool {
    kv_len <= ONE_PASS_MAX
}

/// Shapes the attention kernels can take (their workgroup arrays are fixed).
pub fn check_shape(c: &Config) -> Result<()> {
    let g = c.group_size();
    if !c.head_dim.is_multiple_of(32) || c.head_dim > 256 || g > 16 || g * c.head_dim > 2048 {
        return Err(Error::unsupported(format!(
            "attention with head dimension {} and {g} query heads per KV head (the GPU kernels take head dimensions that are multiples of 32 up to 256, up to 16 heads per group, and at most 2048 query values per group)",
            c.head_dim
        )));
    }
    Ok(())
}

/// One layer's keys and values: `slots` positions, position p in slot p % slots. A
/// sliding-window layer holds a ring of its window plus one prefill chunk (the chunk's
/// first query still needs the keys its last one pushes out); others every position.
pub struct LayerCache {
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub k_scales: wgpu::Buffer,
    pub v_scales: wgpu::Buffer,
    pub slots: usize,
    /// Keys a query sees, itself included (0: all).
    pub window: usize,
}

impl LayerCache {
    /// A cache of every position up to `max_len`.
    pub fn new(gpu: &Gpu, c: &Config, format: KvFormat, max_len: usize) -> Result<LayerCache> {
        Self::with_window(gpu, c, format, max_len, 0, 0)
    }

    /// Layer cache for `max_len` positions; with a `window`, only `window + chunk`
    /// slots (a ring), when that is fewer.
    pub fn with_window(
        gpu: &Gpu,
        c: &Config,
        format: KvFormat,
        max_len: usize,
        window: usize,
        chunk: usize,
    ) -> Result<LayerCache> {
        let s = CacheSize::of(c, format, max_len, window, chunk)?;
        Ok(LayerCache {
            k: gpu.storage("K cache", s.values)?,
            v: gpu.storage("V cache", s.values)?,
            k_scales: gpu.storage("K scales", s.scales)?,
            v_scales: gpu.storage("V scales", s.scales)?,
            slots: s.slots,
            window,
        })
    }

    /// A convolution layer's state (LFM2) in the place of its cache: `k` is the ring
    /// of B ⊙ x rows (`CacheSize::conv`), the other buffers are unused; `window` is
    /// the taps, so a ring that no longer holds what position `len` convolves is
    /// noticed as a sliding window's is (`GpuSession::truncate`).
    pub fn conv(gpu: &Gpu, c: &Config) -> Result<LayerCache> {
        let s = CacheSize::conv(c);
        let unused = gpu.storage("unused", 4)?;
        Ok(LayerCache {
            k: gpu.storage("convolution state", s.values)?,
            v: unused.clone(),
            k_scales: unused.clone(),
            v_scales: unused,
            slots: s.slots,
            window: c.conv_taps,
        })
    }

    pub fn bytes(&self) -> u64 {
        self.k.size() + self.v.size() + self.k_scales.size() + self.v_scales.size()
    }
}

/// The buffers of one layer's cache, before they exist (the loader checks them
/// against the device's limits from the GGUF header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSize {
    pub slots: usize,
    /// Bytes of K (and of V): one buffer each.
    pub values: u64,
    /// Bytes of K's scales (and of V's).
    pub scales: u64,
    /// A convolution layer's state: `values` bytes of f32 rows, nothing else.
    pub conv: bool,
}

impl CacheSize {
    /// See `LayerCache::with_window`.
    pub fn of(
        c: &Config,
        format: KvFormat,
        max_len: usize,
        window: usize,
        chunk: usize,
    ) -> Result<CacheSize> {
        let slots = if window > 0 {
            max_len.min(window.saturating_add(chunk))
        } else {
            max_len
        }
        .max(1);
        let values = (slots as u64)
            .checked_mul(c.kv_dim() as u64)
            .ok_or_else(|| Error::invalid("the KV cache size overflows"))?;
        let words = values.div_ceil(format.per_word() as u64);
        let scales =
            (slots as u64 * format.scales_per_token(c.kv_dim(), c.n_kv_heads) as u64).max(1);
        // As `Gpu::storage` rounds them.
        Ok(CacheSize {
            slots,
            values: (words * 4).max(4),
            scales: scales * 4,
            conv: false,
        })
    }

    /// A convolution layer's state: the B ⊙ x rows (f32) of the positions its taps
    /// reach and `CONV_ROLLBACK` more (what a conversation may be cut back by).
    pub fn conv(c: &Config) -> CacheSize {
        let slots = CONV_ROLLBACK + c.conv_taps;
        CacheSize {
            slots,
            values: (slots * c.hidden * 4) as u64,
            scales: 0,
            conv: true,
        }
    }

    /// Bytes of the layer's buffers.
    pub fn bytes(&self) -> u64 {
        match self.conv {
            true => self.values,
            false => 2 * (self.values + self.scales),
        }
    }
}

/// Floats per token in the qkv rows: Q|K|V side by side.
pub(super) fn qkv_stride(c: &Config) -> usize {
    c.q_dim() + 2 * c.kv_dim()
}

/// What every kernel over one layer's KV cache binds first (bindings 0–5: the step,
/// the cache, the qkv rows) and is specialized by.
pub struct CacheIo<'a> {
    pub c: &'a Config,
    pub format: KvFormat,
    pub qkv: &'a wgpu::Buffer,
    pub cache: &'a LayerCache,
}

impl<'a> CacheIo<'a> {
    pub fn new(
        c: &'a Config,
        format: KvFormat,
        qkv: &'a wgpu::Buffer,
        cache: &'a LayerCache,
    ) -> Self {
        CacheIo {
            c,
            format,
            qkv,
            cache,
        }
    }

    /// Bindings 0–5 (the step's uniform of `pass` first: `[1]`; the cache's K and V
    /// `[slots][kv_dim]` in the format's words and their scales; the qkv rows
    /// `[n_tokens][q | k | v]`), then `more`.
    fn bindings<'b>(&self, pass: &Pass<'b, '_>, n_tokens: usize, more: &[Bind<'b>]) -> Vec<Bind<'b>>
    where
        'a: 'b,
    {
        let (c, l) = (self.c, self.cache);
        let values = (l.slots * c.kv_dim()).div_ceil(self.format.per_word());
        let scales = l.slots * self.format.scales_per_token(c.kv_dim(), c.n_kv_heads);
        let mut b = vec![
            Bind::from(pass.step),
            Bind::f32s(&l.k, values),
            Bind::f32s(&l.v, values),
            Bind::f32s(&l.k_scales, scales),
            Bind::f32s(&l.v_scales, scales),
            Bind::f32s(self.qkv, n_tokens * qkv_stride(c)),
        ];
        b.extend_from_slice(more);
        b
    }

    fn constants(&self) -> [(&'static str, f64); 10] {
        let (c, cache) = (self.c, self.cache);
        [
            ("KV_FORMAT", self.format as u32 as f64),
            ("HD", c.head_dim as f64),
            ("NKV", c.n_kv_heads as f64),
            ("G", c.group_size() as f64),
            ("QKV_STRIDE", qkv_stride(c) as f64),
            ("SCALE", c.attn_scale as f64),
            ("SOFTCAP", c.attn_softcap as f64),
            ("SLOTS", cache.slots as f64),
            ("WINDOW", cache.window as f64),
            ("NH", c.n_heads as f64),
        ]
    }
}

/// Quantizes the new tokens' K and V (from the qkv rows) into the cache.
pub fn kv_write(pass: &mut Pass, io: &CacheIo, n_tokens: usize) -> Result<()> {
    let k = pass.kernels;
    let consts = io.constants();
    // kv_write reads KV_FORMAT, HD, NKV, QKV_STRIDE, SLOTS and NH.
    let used = ["KV_FORMAT", "HD", "NKV", "QKV_STRIDE", "SLOTS", "NH"];
    let consts: Vec<_> = consts
        .into_iter()
        .filter(|(n, _)| used.contains(n))
        .collect();
    let pipe = k.pipe(Shader::KvWrite, &consts)?;
    let groups = [n_tokens as u32, io.c.n_kv_heads as u32, 2];
    k.dispatch(pass, &pipe, &io.bindings(pass, n_tokens, &[]), groups)
}

/// Queries per prefill workgroup (the kernel's BQ).
fn prefill_queries(c: &Config) -> u32 {
    if c.head_dim > 128 {
        4
    } else {
        8
    }
}

/// Attention of the last token over `kv_len` cached positions: flash-decoding splits,
/// then the reduce pass. `part` holds `[n_heads][splits][head_dim + 2]` floats for as
/// many splits as the cache's slots make (a plan replays with more positions);
/// `out` is `[q_dim]`.
pub fn decode(
    pass: &mut Pass,
    io: &CacheIo,
    part: &wgpu::Buffer,
    out: &wgpu::Buffer,
    kv_len: usize,
) -> Result<()> {
    let k = pass.kernels;
    let c = io.c;
    // attention_decode has no NH override.
    let pipe = k.pipe(Shader::AttentionDecode, &io.constants()[..9])?;
    let splits = (kv_len as u32).div_ceil(CHUNK);
    let most = io.cache.slots.max(kv_len).div_ceil(CHUNK as usize);
    let part = Bind::f32s(part, c.n_heads * most * (c.head_dim + 2));
    let groups = Groups::Splits(c.n_kv_heads as u32);
    k.dispatch_groups(pass, &pipe, &io.bindings(pass, 1, &[part]), groups, splits)?;
    let reduce = k.pipe(
        Shader::AttentionReduce,
        &[("HD", c.head_dim as f64), ("NH", c.n_heads as f64)],
    )?;
    let bufs = [pass.step.into(), part, Bind::f32s(out, c.q_dim())];
    k.dispatch(pass, &reduce, &bufs, [c.n_heads as u32, 1, 1])
}

/// The last token's attention in one dispatch: QK-norm (with `qk_norm`: q's weights
/// then k's), RoPE from `table`, its key and value into the cache, attention over
/// every visible position. `qkv` holds the token's raw (unrotated) row; `out` is
/// `[q_dim]`, `table` the RoPE table, `qk_norm` `[2][head_dim]`.
pub fn decode_fused(
    pass: &mut Pass,
    io: &CacheIo,
    (table, rotate): (&wgpu::Buffer, bool),
    qk_norm: Option<&wgpu::Buffer>,
    out: &wgpu::Buffer,
) -> Result<()> {
    let k = pass.kernels;
    let c = io.c;
    let mut consts = io.constants().to_vec();
    consts.extend(super::elementwise::rope_constants(c, rotate));
    consts.extend([
        ("QK_NORM", qk_norm.is_some() as u32 as f64),
        ("EPS", c.rms_eps as f64),
    ]);
    let pipe = k.pipe(Shader::AttentionDecodeFused, &consts)?;
    let norm = match qk_norm {
        Some(w) => Bind::f32s(w, 2 * c.head_dim),
        None => table.into(),
    };
    let more = [Bind::f32s(out, c.q_dim()), table.into(), norm];
    let bufs = io.bindings(pass, 1, &more);
    k.dispatch(pass, &pipe, &bufs, [c.n_kv_heads as u32, 1, 1])
}

/// Causal attention of `n_tokens` new tokens over the cache (prefix and themselves)
/// into `out`, `[n_tokens][q_dim]`.
pub fn prefill(pass: &mut Pass, io: &CacheIo, out: &wgpu::Buffer, n_tokens: usize) -> Result<()> {
    let k = pass.kernels;
    let c = io.c;
    let pipe = k.pipe(Shader::AttentionPrefill, &io.constants())?;
    let x = (n_tokens as u32).div_ceil(prefill_queries(c));
    let more = [Bind::f32s(out, n_tokens * c.q_dim())];
    let bufs = io.bindings(pass, n_tokens, &more);
    k.dispatch(pass, &pipe, &bufs, [x, c.n_heads as u32, 1])
}
