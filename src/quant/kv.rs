//! KV cache formats: how keys and values are quantized when written and read back in
//! attention. The CPU version here is the reference for `kv_write.wgsl` and the
//! attention kernels' dequantization.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvFormat {
    F32 = 0,
    F16 = 1,
    /// One f32 scale per (token, KV head): the default, a quarter of f32's memory.
    #[default]
    Int8 = 2,
    /// Symmetric 4-bit in groups of 32 values, one f32 scale per group.
    Int4 = 3,
}

impl KvFormat {
    pub fn parse(s: &str) -> Option<KvFormat> {
        Some(match s {
            "f32" => KvFormat::F32,
            "f16" => KvFormat::F16,
            "int8" | "q8" => KvFormat::Int8,
            "int4" | "q4" => KvFormat::Int4,
            _ => return None,
        })
    }

    /// Values per 32-bit word.
    pub fn per_word(self) -> usize {
        match self {
            KvFormat::F32 => 1,
            KvFormat::F16 => 2,
            KvFormat::Int8 => 4,
            KvFormat::Int4 => 8,
        }
    }

    /// Scales for one token's `kv_dim` values over `heads` heads.
    pub fn scales_per_token(self, kv_dim: usize, heads: usize) -> usize {
        match self {
            KvFormat::F32 | KvFormat::F16 => 0,
            KvFormat::Int8 => heads,
            KvFormat::Int4 => kv_dim / 32,
        }
    }

    /// Bytes per token per layer for K and V together.
    pub fn bytes_per_token(self, kv_dim: usize, heads: usize) -> usize {
        2 * (kv_dim / self.per_word() * 4 + self.scales_per_token(kv_dim, heads) * 4)
    }
}

/// What one head's values read back as after a round trip through the cache; `x` is
/// `head_dim` long (a multiple of 32). Rounding is to nearest, ties to even, as WGSL's
/// `round`.
pub fn round_trip(format: KvFormat, x: &[f32]) -> Vec<f32> {
    let round = |v: f32| v.round_ties_even();
    match format {
        KvFormat::F32 => x.to_vec(),
        KvFormat::F16 => x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect(),
        KvFormat::Int8 => {
            let s = x.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
            x.iter().map(|&v| round(v * inv) * s).collect()
        }
        KvFormat::Int4 => x
            .chunks(32)
            .flat_map(|g| {
                let s = g.iter().fold(0f32, |m, v| m.max(v.abs())) / 7.0;
                let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
                g.iter()
                    .map(move |&v| round(v * inv).clamp(-7.0, 7.0) * s)
                    .collect::<Vec<_>>()
            })
            .collect(),
    }
}
