//! IBM Granite 3: llama's block with four multipliers — the embedding's, the
//! attention scores' (instead of 1/√head_dim), each block's output before its residual
//! add, and a divisor of the logits.

use super::{Family, Keys};
use crate::error::Result;
use crate::model::config::Config;

pub struct Granite;

impl Family for Granite {
    fn name(&self) -> &'static str {
        "granite"
    }

    fn config(&self, k: &Keys, c: &mut Config) -> Result<()> {
        // llama.cpp requires logit_scale and defaults the others to "no multiplier".
        k.require("logit_scale")?;
        c.embed_scale = k.float("embedding_scale", 1.0)?;
        c.attn_scale = k.float("attention.scale", c.attn_scale as f64)?;
        c.residual_scale = k.float("residual_scale", 1.0)?;
        c.logit_scale = 1.0 / k.float("logit_scale", 1.0)?;
        Ok(())
    }
}
