//! Gemma 3: embeddings scaled by √hidden, QK-norm, sandwich norms (a norm of each
//! block's output before its residual add), GeGLU, and sliding-window attention with
//! its own RoPE base on five of every six layers (llama.cpp's pattern).

use super::{Family, Keys};
use crate::error::Result;
use crate::model::config::{Activation, Config, RopeStyle};

pub struct Gemma3;

impl Family for Gemma3 {
    fn name(&self) -> &'static str {
        "gemma3"
    }

    fn config(&self, k: &Keys, c: &mut Config) -> Result<()> {
        // Queries are scaled by query_pre_attn_scalar^-½, which Gemma 3's checkpoints
        // set to the head dimension (llama.cpp does the same).
        let scalar = k.key("attention.query_pre_attn_scalar");
        if k.gguf.metadata.get(&scalar).is_some() {
            c.attn_scale = k.float("attention.query_pre_attn_scalar", 1.0)?.powf(-0.5);
        }
        c.rope_style = RopeStyle::HalfSplit;
        c.qk_norm = true;
        c.post_norms = true;
        c.embed_scale = (c.hidden as f32).sqrt();
        c.activation = Activation::GeluTanh;
        c.sliding_window = k.opt_int("attention.sliding_window")?.unwrap_or(0);
        // Layers 5, 11, 17… are global.
        c.swa_pattern = k.opt_int("attention.sliding_window_pattern")?.unwrap_or(6);
        c.rope_theta_local = k.float("rope.freq_base_swa", 10_000.0)?;
        Ok(())
    }
}
