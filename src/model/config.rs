//! The model's shape, read from GGUF metadata (`<arch>.*` keys) and checked against
//! the tensors that are really there. `validate` is the boundary: every size the
//! loaders and kernels compute from a `Config` is checked here first, with checked
//! arithmetic, so a crafted file gets an error instead of a panic or a wrapped size.

use crate::error::{Error, Result};
use crate::gguf::Gguf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama, SmolLM2, Llama 3.x, Mistral-style checkpoints.
    Llama,
    /// Qwen3: per-head RMSNorm on queries and keys, half-split RoPE.
    Qwen3,
    /// Gemma 3: scaled embeddings, QK-norm, sandwich norms, GeGLU, sliding-window
    /// attention on five of every six layers.
    Gemma3,
}

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RopeStyle {
    /// Adjacent pairs (2i, 2i+1). llama.cpp's converter permutes Llama's Q/K rows so
    /// that this equals Hugging Face's half-split rotation.
    Adjacent,
    /// Half split (i, i + d/2): GPT-NeoX, Qwen, Gemma.
    HalfSplit,
}

/// The activation of the gated MLP: `act(gate) · up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Activation {
    /// SiLU (SwiGLU): Llama, Qwen.
    Silu,
    /// GELU, tanh approximation (GeGLU): Gemma.
    GeluTanh,
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
    /// Linear RoPE scaling of the global layers: positions are divided by this.
    pub rope_scale: f32,
    pub context_length: usize,
    pub tied_embeddings: bool,
    pub qk_norm: bool,
    /// Scores are `q·k · attn_scale` (1/√head_dim unless the model says otherwise).
    pub attn_scale: f32,
    /// The embedding rows are multiplied by this (Gemma: √hidden).
    pub embed_scale: f32,
    pub activation: Activation,
    /// RMSNorm of the attention and MLP outputs before each residual add (Gemma).
    pub post_norms: bool,
    /// Keys a sliding-window layer attends to, itself included (0: no window).
    pub sliding_window: usize,
    /// Every `swa_pattern`-th layer is global, the others slide (0: all global).
    pub swa_pattern: usize,
    /// RoPE base of the sliding-window layers.
    pub rope_theta_local: f32,
}

impl Default for Config {
    /// A one-layer llama of 4 heads of 32: a starting point for tests' shapes.
    fn default() -> Config {
        Config {
            arch: Arch::Llama,
            n_layers: 1,
            n_heads: 4,
            n_kv_heads: 4,
            head_dim: 32,
            hidden: 128,
            ffn_dim: 64,
            vocab_size: 64,
            rms_eps: 1e-5,
            rope_theta: 10_000.0,
            rope_dim: 32,
            rope_style: RopeStyle::Adjacent,
            rope_freq_factors: false,
            rope_scale: 1.0,
            context_length: 4096,
            tied_embeddings: true,
            qk_norm: false,
            attn_scale: 1.0 / (32f32).sqrt(),
            embed_scale: 1.0,
            activation: Activation::Silu,
            post_norms: false,
            sliding_window: 0,
            swa_pattern: 0,
            rope_theta_local: 10_000.0,
        }
    }
}

/// Largest count or width a file may declare: far above any real model, far below
/// what would overflow the sizes computed from it.
const MAX_DIM: u64 = 1 << 24;

impl Config {
    pub fn from_gguf(g: &Gguf) -> Result<Config> {
        let md = &g.metadata;
        let name = md
            .str("general.architecture")
            .ok_or_else(|| Error::gguf("general.architecture is missing"))?;
        let arch = match name {
            "llama" => Arch::Llama,
            "qwen3" => Arch::Qwen3,
            "gemma3" => Arch::Gemma3,
            other => {
                return Err(Error::unsupported(format!(
                    "architecture {other:?} (supported: llama, qwen3, gemma3)"
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
                .filter(|&v| v > 0 && (v as u64) < MAX_DIM)
                .ok_or_else(|| Error::gguf(format!("{} = {v} is out of range", key(k))))
        };
        let opt_int = |k: &str| md.get(&key(k)).map(|_| int(k)).transpose();
        let float = |k: &str, default: f64| -> Result<f32> {
            match md.get(&key(k)) {
                None => Ok(default as f32),
                Some(v) => v
                    .as_f64()
                    .map(|f| f as f32)
                    .filter(|f| f.is_finite() && *f > 0.0)
                    .ok_or_else(|| {
                        Error::gguf(format!(
                            "{} = {} is not a positive number",
                            key(k),
                            v.summary()
                        ))
                    }),
            }
        };
        let n_heads = int("attention.head_count")?;
        let hidden = int("embedding_length")?;
        let head_dim = match opt_int("attention.key_length")? {
            Some(d) => d,
            None => hidden / n_heads,
        };
        if let Some(v) = opt_int("attention.value_length")? {
            if v != head_dim {
                return Err(Error::unsupported(format!(
                    "value heads of {v} dimensions with key heads of {head_dim}"
                )));
            }
        }
        let embd = g
            .tensor("token_embd.weight")
            .ok_or_else(|| Error::gguf("tensor token_embd.weight is missing"))?;
        let vocab_size = match embd.dims.as_slice() {
            [_, v] => usize::try_from(*v)
                .ok()
                .filter(|&v| (v as u64) < MAX_DIM)
                .ok_or_else(|| {
                    Error::gguf(format!("a vocabulary of {v} tokens is out of range"))
                })?,
            _ => 0,
        };
        let gemma = arch == Arch::Gemma3;
        let scaling = md.str(&key("rope.scaling.type")).unwrap_or("none");
        let rope_scale = match scaling {
            "none" => 1.0,
            "linear" => float("rope.scaling.factor", 1.0)?,
            other => {
                return Err(Error::unsupported(format!(
                "RoPE scaling {other:?} in {} (supported: none, linear, and Llama 3's rope_freqs)",
                key("rope.scaling.type")
            )))
            }
        };
        let cfg = Config {
            arch,
            n_layers: int("block_count")?,
            n_heads,
            n_kv_heads: opt_int("attention.head_count_kv")?.unwrap_or(n_heads),
            head_dim,
            hidden,
            ffn_dim: int("feed_forward_length")?,
            vocab_size,
            rms_eps: float("attention.layer_norm_rms_epsilon", 1e-5)?,
            rope_theta: float("rope.freq_base", 10_000.0)?,
            rope_dim: opt_int("rope.dimension_count")?.unwrap_or(head_dim),
            rope_style: match arch {
                Arch::Llama => RopeStyle::Adjacent,
                Arch::Qwen3 | Arch::Gemma3 => RopeStyle::HalfSplit,
            },
            rope_freq_factors: g.tensor("rope_freqs.weight").is_some(),
            rope_scale,
            context_length: int("context_length")?,
            tied_embeddings: g.tensor("output.weight").is_none(),
            qk_norm: g.tensor("blk.0.attn_q_norm.weight").is_some(),
            // Gemma 3: queries are scaled by query_pre_attn_scalar^-½, which its
            // checkpoints set to the head dimension (llama.cpp does the same).
            attn_scale: match md.get(&key("attention.query_pre_attn_scalar")) {
                Some(_) => float("attention.query_pre_attn_scalar", 1.0)?.powf(-0.5),
                None => (head_dim as f32).powf(-0.5),
            },
            embed_scale: if gemma { (hidden as f32).sqrt() } else { 1.0 },
            activation: if gemma {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            post_norms: g.tensor("blk.0.post_attention_norm.weight").is_some(),
            // Only Gemma's graph has sliding layers (llama.cpp ignores the key elsewhere).
            sliding_window: if gemma {
                opt_int("attention.sliding_window")?.unwrap_or(0)
            } else {
                0
            },
            // llama.cpp's Gemma 3 pattern: layers 5, 11, 17… are global.
            swa_pattern: match opt_int("attention.sliding_window_pattern")? {
                Some(p) => p,
                None if gemma => 6,
                None => 0,
            },
            rope_theta_local: float("rope.freq_base_swa", 10_000.0)?,
        };
        if gemma && !(cfg.qk_norm && cfg.post_norms) {
            return Err(Error::gguf(
                "a gemma3 model needs attn_q_norm/attn_k_norm and post_attention_norm/post_ffw_norm tensors",
            ));
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every size the model's tensors, buffers and kernels derive from this
    /// config: positive, within bounds, in the widths the kernels take, and small
    /// enough that no product overflows (on 32-bit wasm too).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::gguf(m));
        for (what, v) in [
            ("block_count", self.n_layers),
            ("attention.head_count", self.n_heads),
            ("attention.head_count_kv", self.n_kv_heads),
            ("head dimension", self.head_dim),
            ("embedding_length", self.hidden),
            ("feed_forward_length", self.ffn_dim),
            ("context_length", self.context_length),
        ] {
            if v == 0 || v as u64 >= MAX_DIM {
                return bad(format!("{what} = {v} is out of range"));
            }
        }
        if self.vocab_size == 0 {
            return bad("token_embd.weight must be 2-D (hidden × vocab)".into());
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
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
        let positive = [
            self.rms_eps,
            self.rope_theta,
            self.rope_theta_local,
            self.rope_scale,
            self.attn_scale,
            self.embed_scale,
        ];
        if !positive.iter().all(|v| v.is_finite() && *v > 0.0) {
            return bad("RMSNorm epsilon, RoPE bases and scales must be positive numbers".into());
        }
        // Matrix rows are read in blocks of 32 by every weight kernel.
        for (what, width) in [
            ("embedding_length", self.hidden),
            ("feed_forward_length", self.ffn_dim),
            ("head dimension", self.head_dim),
        ] {
            if !width.is_multiple_of(32) {
                return Err(Error::unsupported(format!(
                    "{what} = {width} is not a multiple of 32 (the block width of every weight kernel)"
                )));
            }
        }
        // Every buffer size below is at most a product of these; 2^24 · 2^24 and the
        // like stay far inside u64, and `elements` checks the ones that must fit usize.
        self.elements(
            "the Q/K/V rows",
            &[self.q_dim() + 2 * self.kv_dim(), self.hidden],
        )?;
        self.elements("the embedding", &[self.vocab_size, self.hidden])?;
        self.elements("the MLP", &[2 * self.ffn_dim, self.hidden])?;
        self.elements("the KV cache", &[self.context_length, self.kv_dim(), 2])?;
        Ok(())
    }

    /// The product of `dims` as a `usize` (checked, so wasm32 cannot wrap).
    fn elements(&self, what: &str, dims: &[usize]) -> Result<usize> {
        dims.iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n < isize::MAX as usize / 4)
            .ok_or_else(|| Error::unsupported(format!("{what} of this model is too large")))
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

    /// Whether layer `l` attends through a sliding window.
    pub fn is_sliding(&self, l: usize) -> bool {
        self.sliding_window > 0
            && (self.swa_pattern == 0 || !(l + 1).is_multiple_of(self.swa_pattern))
    }

    /// The first global layer and the first sliding-window one, where there are such:
    /// the layers whose RoPE frequencies stand for their kind (one table a kind).
    pub fn first_of_each_kind(&self) -> (Option<usize>, Option<usize>) {
        let global = (0..self.n_layers).find(|&l| !self.is_sliding(l));
        let local = (0..self.n_layers).find(|&l| self.is_sliding(l));
        (global, local)
    }

    /// Keys layer `l` may see behind a query, itself included (`usize::MAX`: all).
    pub fn window(&self, l: usize) -> usize {
        if self.is_sliding(l) {
            self.sliding_window
        } else {
            usize::MAX
        }
    }

    /// The inverse frequency of each rotated pair of layer `l`: base^(-2i/d) (the
    /// layer's base: sliding-window layers have their own), divided by Llama 3's
    /// per-frequency `factors` when the model has them and by linear RoPE scaling.
    pub fn rope_freqs(&self, factors: Option<&[f32]>, l: usize) -> Vec<f32> {
        let (theta, scale) = self.rope_of(l);
        (0..self.rope_dim / 2)
            .map(|i| {
                let f = theta.powf(-2.0 * i as f32 / self.rope_dim as f32) / scale;
                f / factors.and_then(|fs| fs.get(i)).copied().unwrap_or(1.0)
            })
            .collect()
    }

    /// RoPE (base, position scale) of layer `l`: sliding layers keep their own base
    /// and no scaling, global ones the file's.
    pub fn rope_of(&self, l: usize) -> (f32, f32) {
        if self.is_sliding(l) {
            (self.rope_theta_local, 1.0)
        } else {
            (self.rope_theta, self.rope_scale)
        }
    }
}
