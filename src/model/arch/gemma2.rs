//! Gemma 2: Gemma's block (embeddings scaled by √hidden, sandwich norms, GeGLU), no
//! QK-norm, attention scores and final logits soft-capped (cap·tanh(x/cap)), and a
//! sliding window on every other layer (0, 2, 4…), all layers on one RoPE base.

use super::{Family, Keys};
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

    fn config(&self, k: &Keys, c: &mut Config) -> Result<()> {
        if c.n_layers == LAYERS_27B {
            c.attn_scale = ((c.hidden / c.n_heads) as f32).powf(-0.5);
        }
        c.rope_style = RopeStyle::HalfSplit;
        c.post_norms = true;
        c.embed_scale = (c.hidden as f32).sqrt();
        c.activation = Activation::GeluTanh;
        c.sliding_window = k.opt_int("attention.sliding_window")?.unwrap_or(4096);
        // Layers 1, 3, 5… are global.
        c.swa_pattern = k.opt_int("attention.sliding_window_pattern")?.unwrap_or(2);
        c.rope_theta_local = k.float("rope.freq_base_swa", c.rope_theta as f64)?;
        c.attn_softcap = k.float("attn_logit_softcapping", 50.0)?;
        c.final_softcap = k.float("final_logit_softcapping", 30.0)?;
        Ok(())
    }
}
