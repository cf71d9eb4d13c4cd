//! Gemma 2: Gemma's block (embeddings scaled by √hidden, sandwich norms, GeGLU), no
//! QK-norm, attention scores and final logits soft-capped (cap·tanh(x/cap)), and a
//! sliding window on every other layer (0, 2, 4…), all layers on one RoPE base.

use super::{Arch, Family, Keys};
use crate::error::Result;
use crate::model::config::{Activation, Config, RopeStyle};

pub struct Gemma2;

/// Gemma 2 27B's layer count: its queries are scaled by (hidden / heads)^-½, the
/// smaller ones' by head_dim^-½ (Gemma's reference code; llama.cpp decides the same
/// way, as the files carry no key for it).
const LAYERS_27B: usize = 46;

impl Family for Gemma2 {
    fn name(&self) -> &'static str {
        "gemma2"
    }

    fn module(&self) -> &'static str {
        "src/model/arch/gemma2.rs"
    }

    fn config(&self, k: &Keys) -> Result<Config> {
        let base = k.base(Arch::Gemma2)?;
        let attn_scale = if base.n_layers == LAYERS_27B {
            ((base.hidden / base.n_heads) as f32).powf(-0.5)
        } else {
            base.attn_scale
        };
        Ok(Config {
            rope_style: RopeStyle::HalfSplit,
            post_norms: true,
            attn_scale,
            embed_scale: (base.hidden as f32).sqrt(),
            activation: Activation::GeluTanh,
            sliding_window: k.opt_int("attention.sliding_window")?.unwrap_or(4096),
            // Layers 1, 3, 5… are global.
            swa_pattern: k.opt_int("attention.sliding_window_pattern")?.unwrap_or(2),
            rope_theta_local: k.float("rope.freq_base_swa", base.rope_theta as f64)?,
            attn_softcap: k.float("attn_logit_softcapping", 50.0)?,
            final_softcap: k.float("final_logit_softcapping", 30.0)?,
            ..base
        })
    }
}
