//! Gemma 3: embeddings scaled by √hidden, QK-norm, sandwich norms (a norm of each
//! block's output before its residual add), GeGLU, and sliding-window attention with
//! its own RoPE base on five of every six layers (llama.cpp's pattern).

use super::{Arch, Family, Keys};
use crate::error::Result;
use crate::model::config::{Activation, Config, RopeStyle};

pub struct Gemma3;

impl Family for Gemma3 {
    fn name(&self) -> &'static str {
        "gemma3"
    }

    fn module(&self) -> &'static str {
        "src/model/arch/gemma3.rs"
    }

    fn config(&self, k: &Keys) -> Result<Config> {
        let base = k.base(Arch::Gemma3)?;
        // Queries are scaled by query_pre_attn_scalar^-½, which Gemma 3's checkpoints
        // set to the head dimension (llama.cpp does the same).
        let attn_scale = match k
            .gguf
            .metadata
            .get(&k.key("attention.query_pre_attn_scalar"))
        {
            Some(_) => k.float("attention.query_pre_attn_scalar", 1.0)?.powf(-0.5),
            None => base.attn_scale,
        };
        Ok(Config {
            rope_style: RopeStyle::HalfSplit,
            qk_norm: true,
            post_norms: true,
            attn_scale,
            embed_scale: (base.hidden as f32).sqrt(),
            activation: Activation::GeluTanh,
            sliding_window: k.opt_int("attention.sliding_window")?.unwrap_or(0),
            // Layers 5, 11, 17… are global.
            swa_pattern: k.opt_int("attention.sliding_window_pattern")?.unwrap_or(6),
            rope_theta_local: k.float("rope.freq_base_swa", 10_000.0)?,
            ..base
        })
    }
}
