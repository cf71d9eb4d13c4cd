//! The model's shape, read from GGUF metadata (`<arch>.*` keys) and checked against
//! the tensors that are really there.

use crate::error::{Error, Result};
use crate::gguf::Gguf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama, SmolLM2, Llama 3.x, Mistral-style checkpoints.
    Llama,
    /// Qwen3: per-head RMSNorm on queries and keys, half-split RoPE.
    Qwen3,
}

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RopeStyle {
    /// Adjacent pairs (2i, 2i+1). llama.cpp's converter permutes Llama's Q/K rows so
    /// that this equals Hugging Face's half-split rotation.
    Adjacent,
    /// Half split (i, i + d/2): GPT-NeoX, Qwen.
    HalfSplit,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    pub arch: Arch,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub hidden: usize,
    pub ffn_dim: usize,
    pub vocab_size: usize,
    pub rms_eps: f32,
    pub rope_theta: f32,
    /// Dimensions of each head that RoPE rotates (the rest pass through).
    pub rope_dim: usize,
    pub rope_style: RopeStyle,
    /// Per-frequency divisors from a `rope_freqs.weight` tensor (Llama 3 scaling).
    pub rope_freq_factors: bool,
    pub context_length: usize,
    pub tied_embeddings: bool,
    pub qk_norm: bool,
}

impl Config {
    pub fn from_gguf(g: &Gguf) -> Result<Config> {
        let md = &g.metadata;
        let name = md
            .str("general.architecture")
            .ok_or_else(|| Error::gguf("general.architecture is missing"))?;
        let arch = match name {
            "llama" => Arch::Llama,
            "qwen3" => Arch::Qwen3,
            other => {
                return Err(Error::unsupported(format!(
                    "architecture {other:?} (supported: llama, qwen3)"
                )))
            }
        };
        let key = |k: &str| format!("{name}.{k}");
        let int = |k: &str| -> Result<usize> {
            let v = md
                .u64(&key(k))
                .ok_or_else(|| Error::gguf(format!("{} is missing or not an integer", key(k))))?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0 && v < 1 << 24)
                .ok_or_else(|| Error::gguf(format!("{} = {v} is out of range", key(k))))
        };
        let n_heads = int("attention.head_count")?;
        let hidden = int("embedding_length")?;
        let head_dim = match md.u64(&key("attention.key_length")) {
            Some(_) => int("attention.key_length")?,
            None => hidden / n_heads,
        };
        let embd = g
            .tensor("token_embd.weight")
            .ok_or_else(|| Error::gguf("tensor token_embd.weight is missing"))?;
        let cfg = Config {
            arch,
            n_layers: int("block_count")?,
            n_heads,
            n_kv_heads: match md.u64(&key("attention.head_count_kv")) {
                Some(_) => int("attention.head_count_kv")?,
                None => n_heads,
            },
            head_dim,
            hidden,
            ffn_dim: int("feed_forward_length")?,
            vocab_size: embd.dims.get(1).copied().unwrap_or(0) as usize,
            rms_eps: md
                .f64(&key("attention.layer_norm_rms_epsilon"))
                .unwrap_or(1e-5) as f32,
            rope_theta: md.f64(&key("rope.freq_base")).unwrap_or(10_000.0) as f32,
            rope_dim: match md.u64(&key("rope.dimension_count")) {
                Some(_) => int("rope.dimension_count")?,
                None => head_dim,
            },
            rope_style: match arch {
                Arch::Llama => RopeStyle::Adjacent,
                Arch::Qwen3 => RopeStyle::HalfSplit,
            },
            rope_freq_factors: g.tensor("rope_freqs.weight").is_some(),
            context_length: int("context_length")?,
            tied_embeddings: g.tensor("output.weight").is_none(),
            qk_norm: g.tensor("blk.0.attn_q_norm.weight").is_some(),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::gguf(m));
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "{} attention heads cannot be grouped over {} KV heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.rope_dim > self.head_dim || !self.rope_dim.is_multiple_of(2) {
            return bad(format!(
                "RoPE dimension {} does not fit head dimension {}",
                self.rope_dim, self.head_dim
            ));
        }
        if self.vocab_size == 0 {
            return bad("token_embd.weight must be 2-D (hidden × vocab)".into());
        }
        if !(self.rms_eps > 0.0 && self.rope_theta > 0.0) {
            return bad("RMSNorm epsilon and RoPE base must be positive".into());
        }
        Ok(())
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
    /// Query heads that share one KV head.
    pub fn group_size(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }
}
