//! SmolLM3: llama's block, but every fourth layer (3, 7, 11…) has no position
//! embedding (NoPE): its queries and keys are not rotated. llama.cpp fixes the
//! interval at 4, as the checkpoints do.

use super::{Block, Family};
use crate::model::config::Config;

pub struct Smollm3;

/// Layers `l` with `(l + 1) % NO_ROPE_EVERY == 0` skip RoPE.
const NO_ROPE_EVERY: usize = 4;

impl Family for Smollm3 {
    fn name(&self) -> &'static str {
        "smollm3"
    }

    fn block(&self, c: &Config, l: usize) -> Block {
        let rope = Block::standard(c, l).rope;
        Block {
            rope: rope.filter(|_| !(l + 1).is_multiple_of(NO_ROPE_EVERY)),
            ..Block::standard(c, l)
        }
    }
}
