//! The quantized KV cache (`kv_write.wgsl`) and fused grouped-query attention:
//! flash-decoding for one token (`attention_decode.wgsl` + `attention_reduce.wgsl`)
//! and tiled causal attention for a chunk (`attention_prefill.wgsl`).
//! CPU reference: `quant::kv::round_trip` then `model::reference::attention`.

use super::{Groups, Kernels, Shader};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::Config;
use crate::quant::kv::KvFormat;

/// Positions per flash-decoding split (the kernel's CHUNK).
pub const CHUNK: u32 = 64;

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
        Ok(LayerCache {
            k: gpu.storage("K cache", words * 4)?,
            v: gpu.storage("V cache", words * 4)?,
            k_scales: gpu.storage("K scales", scales * 4)?,
            v_scales: gpu.storage("V scales", scales * 4)?,
            slots,
            window,
        })
    }

    pub fn bytes(&self) -> u64 {
        self.k.size() + self.v.size() + self.k_scales.size() + self.v_scales.size()
    }
}

fn qkv_stride(c: &Config) -> usize {
    c.q_dim() + 2 * c.kv_dim()
}

/// Quantizes the new tokens' K and V (from the qkv rows) into the cache.
#[allow(clippy::too_many_arguments)]
pub fn kv_write(
    k: &Kernels,
    pass: &mut wgpu::ComputePass,
    step: &wgpu::Buffer,
    c: &Config,
    format: KvFormat,
    qkv: &wgpu::Buffer,
    cache: &LayerCache,
    n_tokens: usize,
) -> Result<()> {
    let pipe = k.pipe(
        Shader::KvWrite,
        &[
            ("KV_FORMAT", format as u32 as f64),
            ("HD", c.head_dim as f64),
            ("NH", c.n_heads as f64),
            ("NKV", c.n_kv_heads as f64),
            ("QKV_STRIDE", qkv_stride(c) as f64),
            ("SLOTS", cache.slots as f64),
        ],
    )?;
    let bufs = [
        step,
        qkv,
        &cache.k,
        &cache.v,
        &cache.k_scales,
        &cache.v_scales,
    ];
    k.dispatch(
        pass,
        &pipe,
        &bufs,
        [n_tokens as u32, c.n_kv_heads as u32, 2],
    );
    Ok(())
}

fn cache_constants(c: &Config, format: KvFormat, cache: &LayerCache) -> [(&'static str, f64); 9] {
    [
        ("KV_FORMAT", format as u32 as f64),
        ("HD", c.head_dim as f64),
        ("NKV", c.n_kv_heads as f64),
        ("G", c.group_size() as f64),
        ("QKV_STRIDE", qkv_stride(c) as f64),
        ("SCALE", c.attn_scale as f64),
        ("SLOTS", cache.slots as f64),
        ("WINDOW", cache.window as f64),
        ("NH", c.n_heads as f64),
    ]
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
/// then the reduce pass. `part` holds n_heads × splits × (head_dim + 2) floats.
#[allow(clippy::too_many_arguments)]
pub fn decode(
    k: &Kernels,
    pass: &mut wgpu::ComputePass,
    step: &wgpu::Buffer,
    c: &Config,
    format: KvFormat,
    qkv: &wgpu::Buffer,
    cache: &LayerCache,
    part: &wgpu::Buffer,
    out: &wgpu::Buffer,
    kv_len: usize,
) -> Result<()> {
    let consts = cache_constants(c, format, cache);
    // attention_decode has no NH override.
    let pipe = k.pipe(Shader::AttentionDecode, &consts[..8])?;
    let splits = (kv_len as u32).div_ceil(CHUNK);
    let bufs = [
        step,
        &cache.k,
        &cache.v,
        &cache.k_scales,
        &cache.v_scales,
        qkv,
        part,
    ];
    let groups = Groups::Splits(c.n_kv_heads as u32);
    k.dispatch_groups(pass, &pipe, &bufs, groups, splits);
    let reduce = k.pipe(
        Shader::AttentionReduce,
        &[("HD", c.head_dim as f64), ("NH", c.n_heads as f64)],
    )?;
    k.dispatch(pass, &reduce, &[step, part, out], [c.n_heads as u32, 1, 1]);
    Ok(())
}

/// Causal attention of `n_tokens` new tokens over the cache (prefix and themselves).
#[allow(clippy::too_many_arguments)]
pub fn prefill(
    k: &Kernels,
    pass: &mut wgpu::ComputePass,
    step: &wgpu::Buffer,
    c: &Config,
    format: KvFormat,
    qkv: &wgpu::Buffer,
    cache: &LayerCache,
    out: &wgpu::Buffer,
    n_tokens: usize,
) -> Result<()> {
    let consts = cache_constants(c, format, cache);
    let pipe = k.pipe(Shader::AttentionPrefill, &consts)?;
    let bufs = [
        step,
        &cache.k,
        &cache.v,
        &cache.k_scales,
        &cache.v_scales,
        qkv,
        out,
    ];
    k.dispatch(
        pass,
        &pipe,
        &bufs,
        [
            (n_tokens as u32).div_ceil(prefill_queries(c)),
            c.n_heads as u32,
            1,
        ],
    );
    Ok(())
}
