//! A layer as the forwards run it. Every family's block is the same sequence of steps
//! — the reference (`model::reference`), the CPU backend through it, and the GPU
//! engine (`engine::gpu::session::forward`) execute it in this order — and a `Block`
//! says which variant of each step a layer takes:
//!
//! 1. `attn_norm` RMSNorm of x
//! 2. Q, K, V projections, plus their biases (`qkv_bias`); in a convolution layer
//!    (`mixer`) steps 2–5 are B, C, x = the rows of `shortconv.in_proj` (read as Q,
//!    K, V), then y = C ⊙ conv(B ⊙ x) over the last `conv_taps` positions, and O is
//!    `shortconv.out_proj`
//! 3. per-head RMSNorm of queries and keys (`qk_norm`)
//! 4. RoPE with the global or the sliding layers' table, or none (`rope`)
//! 5. causal grouped-query attention, through a window (`window`)
//! 6. O projection, RMSNorm of it (`post_norms`), × `residual_scale`, added to x
//! 7. `ffn_norm` RMSNorm of x, gate and up projections, act(gate)·up (`activation`)
//! 8. down projection, RMSNorm of it (`post_norms`), × `residual_scale`, added to x
//!
//! Steps tied to a tensor (biases, QK-norm, post norms) run where the layer has it,
//! which the family's `layer_tensors` decides; a `Block` holds the rest. A family that
//! needs a step this list lacks adds it here and to the forwards.

use crate::model::config::{Activation, Config};

/// Which RoPE a layer applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rope {
    /// The model's base and scaling.
    Global,
    /// The sliding-window layers' own base, unscaled (Gemma 3).
    Local,
}

/// How a layer mixes tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mixer {
    /// Causal grouped-query attention over the KV cache.
    Attention,
    /// LFM2's gated short convolution over a state of the last positions' B ⊙ x.
    ShortConv,
}

/// One layer's steps (see the module's list).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Block {
    pub mixer: Mixer,
    /// `None`: the layer has no position embedding (SmolLM3's NoPE layers).
    pub rope: Option<Rope>,
    /// Keys visible behind a query, itself included (`usize::MAX`: all).
    pub window: usize,
    pub residual_scale: f32,
    pub activation: Activation,
}

impl Block {
    /// Layer `l` of llama's graph with what `c` turns on: sliding windows with their
    /// RoPE, residual scale, the activation.
    pub fn standard(c: &Config, l: usize) -> Block {
        let sliding = c.is_sliding(l);
        Block {
            mixer: if c.is_conv(l) {
                Mixer::ShortConv
            } else {
                Mixer::Attention
            },
            rope: Some(if sliding { Rope::Local } else { Rope::Global }),
            window: c.window(l),
            residual_scale: c.residual_scale,
            activation: c.activation,
        }
    }

    /// The window as the KV cache is sized for it: 0 for none (every position kept).
    pub fn cache_window(&self) -> usize {
        if self.window == usize::MAX {
            0
        } else {
            self.window
        }
    }
}
