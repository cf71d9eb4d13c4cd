//! Qwen3: llama's block with a per-head RMSNorm on queries and keys before RoPE,
//! which pairs the halves of a head (as GPT-NeoX).

use super::{Family, Keys};
use crate::error::Result;
use crate::model::config::{Config, RopeStyle};

pub struct Qwen3;

impl Family for Qwen3 {
    fn name(&self) -> &'static str {
        "qwen3"
    }

    fn config(&self, _k: &Keys, c: &mut Config) -> Result<()> {
        c.rope_style = RopeStyle::HalfSplit;
        c.qk_norm = true;
        Ok(())
    }
}
