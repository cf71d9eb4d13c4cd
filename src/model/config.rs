//! The model's shape and block, read from GGUF metadata by its family (`arch`) and
//! checked against the tensors that are really there. `validate` is the boundary: every size the
//! loaders and kernels compute from a `Config` is checked here first, with checked
//! arithmetic, so a crafted file gets an error instead of a panic or a wrapped size.

use super::proj::{PerProj, Proj};
use crate::error::{Error, Result};

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

/// The activation of the gated MLP: `act(gate) · up`. The ids are the kernels' too
/// (build.rs writes them as WGSL's `ACT_*`; 0 is "none" there).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Activation {
    /// SiLU (SwiGLU): Llama, Qwen.
    Silu = 1,
    /// GELU, tanh approximation (GeGLU): Gemma.
    GeluTanh = 2,
}

/// A model family, by its GGUF `general.architecture` name (what each is, and its
/// code: `arch`).
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
    /// Qwen2 / Qwen2.5: half-split RoPE, biases on Q, K and V.
    Qwen2,
    /// IBM Granite 3: embedding, attention, residual and logit multipliers.
    Granite,
    /// SmolLM3: every fourth layer without RoPE.
    Smollm3,
    /// Gemma 2: Gemma's block without QK-norm, soft-capped attention scores and
    /// logits, a sliding window on every other layer.
    Gemma2,
    /// Phi-3, Phi-3.5, Phi-4-mini: fused Q|K|V and gate|up, partial RoPE, LongRoPE.
    Phi3,
    /// LiquidAI LFM2: gated short-convolution layers beside GQA layers.
    Lfm2,
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
    /// RoPE's cos and sin are multiplied by this (LongRoPE's attention factor,
    /// `rope.scaling.attn_factor`; 1 for most models).
    pub rope_mscale: f32,
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
    /// Which projections add a bias (`blk.N.<projection>.bias`): Qwen2's Q, K and V;
    /// whichever a llama-style file has, as llama.cpp reads them. (Not in `info()`'s
    /// config: JavaScript has no use for it.)
    #[serde(skip)]
    pub biases: PerProj<bool>,
    /// Each block's output is multiplied by this before its residual add (Granite).
    pub residual_scale: f32,
    /// The logits are multiplied by this (Granite: 1 / its `logit_scale`).
    pub logit_scale: f32,
    /// Attention scores (after `attn_scale`) become `cap·tanh(score/cap)` (Gemma 2;
    /// 0: not capped).
    pub attn_softcap: f32,
    /// The logits (after `logit_scale`) become `cap·tanh(logit/cap)` (Gemma 2; 0: not
    /// capped).
    pub final_softcap: f32,
    /// Layers whose token mixer is a gated short convolution instead of attention
    /// (LFM2): bit l for layer l (a mask keeps `Config` plain data; such models have
    /// at most `MAX_CONV_MODEL_LAYERS` layers).
    pub conv_layers: u64,
    /// Taps of those convolutions (LFM2's `shortconv.l_cache`: 3).
    pub conv_taps: usize,
}

impl Default for Config {
    /// A one-layer llama of 4 heads of 32: a starting point for tests' shapes. Its
    /// step fields (no QK-norm, windows, biases or multipliers) are llama's block,
    /// which `Keys::base` starts every family from.
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
            rope_mscale: 1.0,
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
            biases: PerProj::default(),
            residual_scale: 1.0,
            logit_scale: 1.0,
            attn_softcap: 0.0,
            final_softcap: 0.0,
            conv_layers: 0,
            conv_taps: 0,
        }
    }
}

/// Largest count or width a file may declare: far above any real model, far below
/// what would overflow the sizes computed from it.
pub(crate) const MAX_DIM: u64 = 1 << 24;

/// Most taps of a short convolution: the GPU kernel keeps a window of this many
/// values a channel in registers (LFM2 has 3).
pub const MAX_CONV_TAPS: usize = 8;

/// Most layers of a model with convolution layers (`Config::conv_layers`' bits).
pub const MAX_CONV_MODEL_LAYERS: usize = 64;

impl Proj {
    /// (rows, cols) in model `c`: outputs × inputs.
    pub fn shape(self, c: &Config) -> (usize, usize) {
        match self {
            Proj::Q => (c.q_dim(), c.hidden),
            Proj::K | Proj::V => (c.kv_dim(), c.hidden),
            Proj::O => (c.hidden, c.q_dim()),
            Proj::Gate | Proj::Up => (c.ffn_dim, c.hidden),
            Proj::Down => (c.hidden, c.ffn_dim),
        }
    }
}

impl Config {
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
            self.rope_mscale,
            self.attn_scale,
            self.embed_scale,
            self.residual_scale,
            self.logit_scale,
        ];
        if !positive.iter().all(|v| v.is_finite() && *v > 0.0) {
            return bad("RMSNorm epsilon, RoPE bases and scales must be positive numbers".into());
        }
        let caps = [self.attn_softcap, self.final_softcap];
        if !caps.iter().all(|v| v.is_finite() && *v >= 0.0) {
            return bad("soft-caps must be positive numbers (0: none)".into());
        }
        self.validate_conv()?;
        if self.post_norms && self.residual_scale != 1.0 {
            return Err(Error::unsupported(
                "a residual scale with norms after each block",
            ));
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
        self.elements("the Q/K/V rows", &[self.mixer_in_dim(), self.hidden])?;
        self.elements("the embedding", &[self.vocab_size, self.hidden])?;
        self.elements("the MLP", &[2 * self.ffn_dim, self.hidden])?;
        self.elements("the KV cache", &[self.context_length, self.kv_dim(), 2])?;
        Ok(())
    }

    /// Convolution layers, if any: one flag a layer, taps the kernels can hold.
    fn validate_conv(&self) -> Result<()> {
        if !self.has_conv() {
            return Ok(());
        }
        if self.n_layers > MAX_CONV_MODEL_LAYERS {
            return Err(Error::unsupported(format!(
                "{} layers with short convolutions (up to {MAX_CONV_MODEL_LAYERS})",
                self.n_layers
            )));
        }
        if !(2..=MAX_CONV_TAPS).contains(&self.conv_taps) {
            return Err(Error::unsupported(format!(
                "a short convolution of {} taps (2 to {MAX_CONV_TAPS} supported)",
                self.conv_taps
            )));
        }
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

    /// Whether layer `l` mixes tokens by a short convolution (else by attention).
    pub fn is_conv(&self, l: usize) -> bool {
        l < MAX_CONV_MODEL_LAYERS && self.conv_layers >> l & 1 == 1
    }

    pub fn has_conv(&self) -> bool {
        self.conv_layers != 0
    }

    /// Widest row of a layer's token-mixer inputs: Q|K|V, or a convolution's B|C|x.
    pub fn mixer_in_dim(&self) -> usize {
        let qkv = self.q_dim() + 2 * self.kv_dim();
        if self.has_conv() {
            qkv.max(3 * self.hidden)
        } else {
            qkv
        }
    }

    /// Widest row of a layer's token-mixer outputs (the attention's, a convolution's).
    pub fn mixer_out_dim(&self) -> usize {
        if self.has_conv() {
            self.q_dim().max(self.hidden)
        } else {
            self.q_dim()
        }
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
