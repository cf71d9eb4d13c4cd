//! The quantized KV cache (`kv_write.wgsl`) and fused grouped-query attention:
//! flash-decoding for one token (`attention_decode.wgsl` + `attention_reduce.wgsl`)
//! and tiled causal attention for a chunk (`attention_prefill.wgsl`).
//! CPU reference: `quant::kv::round_trip` then `model::reference::attention`.

use super::{Kernels, Shader};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::model::Config;
use crate::quant::kv::KvFormat;

/// Positions per flash-decoding split (the kernel's CHUNK).
pub const CHUNK: u32 = 64;

/// Shapes the attention kernels can take (their workgroup arrays are fixed).
pub fn check_shape(c: &Config) -> Result<()> {
    let g = c.group_size();
    if !c.head_dim.is_multiple_of(32) || c.head_dim > 128 || g > 16 || g * c.head_dim > 2048 {
        return Err(Error::unsupported(format!(
            "attention with head dimension {} and {g} query heads per KV head (the GPU kernels take head dimensions that are multiples of 32 up to 128, and up to 16 heads per group)",
            c.head_dim
        )));
    }
    Ok(())
}

/// One layer's keys and values for `max_len` positions.
pub struct LayerCache {
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub k_scales: wgpu::Buffer,
    pub v_scales: wgpu::Buffer,
}

impl LayerCache {
    pub fn new(gpu: &Gpu, c: &Config, format: KvFormat, max_len: usize) -> Result<LayerCache> {
        let values = (max_len * c.kv_dim()) as u64;
        let words = values.div_ceil(format.per_word() as u64);
        let scales = (max_len * format.scales_per_token(c.kv_dim(), c.n_kv_heads)).max(1) as u64;
        Ok(LayerCache {
            k: gpu.storage("K cache", words * 4)?,
            v: gpu.storage("V cache", words * 4)?,
            k_scales: gpu.storage("K scales", scales * 4)?,
            v_scales: gpu.storage("V scales", scales * 4)?,
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

fn cache_constants(c: &Config, format: KvFormat) -> [(&'static str, f64); 7] {
    [
        ("KV_FORMAT", format as u32 as f64),
        ("HD", c.head_dim as f64),
        ("NKV", c.n_kv_heads as f64),
        ("G", c.group_size() as f64),
        ("QKV_STRIDE", qkv_stride(c) as f64),
        ("SCALE", 1.0 / (c.head_dim as f64).sqrt()),
        ("NH", c.n_heads as f64),
    ]
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
    let consts = cache_constants(c, format);
    // attention_decode has no NH override.
    let pipe = k.pipe(Shader::AttentionDecode, &consts[..6])?;
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
    k.dispatch(pass, &pipe, &bufs, [c.n_kv_heads as u32, splits, 1]);
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
    let consts = cache_constants(c, format);
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
        [(n_tokens as u32).div_ceil(8), c.n_heads as u32, 1],
    );
    Ok(())
}
