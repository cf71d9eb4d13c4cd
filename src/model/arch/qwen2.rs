//! Qwen2 / Qwen2.5: llama's block with biases on the query, key and value projections
//! (read wherever a file has them, as for every family) and RoPE over the halves of a
//! head (GPT-NeoX style).

use super::{Family, Keys};
use crate::error::{Error, Result};
use crate::model::config::{Config, RopeStyle};

pub struct Qwen2;

impl Family for Qwen2 {
    fn name(&self) -> &'static str {
        "qwen2"
    }

    fn config(&self, _k: &Keys, c: &mut Config) -> Result<()> {
        c.rope_style = RopeStyle::HalfSplit;
        // Every Qwen2 checkpoint has them; without, this would be another family.
        if !c.qkv_bias {
            return Err(Error::gguf(
                "tensor blk.0.attn_q.bias is missing (a qwen2 layer has Q, K and V biases)",
            ));
        }
        Ok(())
    }
}
