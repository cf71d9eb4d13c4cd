//! A layer as the forwards run it, written once: `run` states a block's order of
//! steps in terms of a few coarse operations (`LayerOps`), and every executor — the
//! f32 reference and the CPU backend (`model::reference`), the GPU session
//! (`engine::gpu::session::forward`) and the candle forward that trains recovery
//! adapters (`recover::net`) — implements those operations, never the order. A `Block`
//! says which variant of each step a layer takes:
//!
//! 1. `norm(Attn)`: RMSNorm of the residual stream x
//! 2. `project(Mixer)`: Q|K|V (plus their biases where the layer has them); in a
//!    convolution layer (`mixer`) B|C|x, the rows of `shortconv.in_proj`
//! 3. `attend`: per-head RMSNorm of queries and keys (where the layer has it), RoPE
//!    with the global or the sliding layers' table, or none (`rope`), keys and values
//!    into the cache, causal grouped-query attention through a window (`window`) —
//!    or `short_conv`: y = C ⊙ conv(B ⊙ x) over the last `conv_taps` positions
//! 4. `project(Out)`: O (a convolution's `out_proj`), then `residual`: RMSNorm of it
//!    (`post_norms`), × `residual_scale`, added to x
//! 5. `norm(Ffn)`, `project(GateUp)`, `glu`: act(gate)·up (`activation`)
//! 6. `project(Down)`, `residual` as in 4
//!
//! Executors are free to fuse inside an operation or across a value they have not
//! yet materialized (the GPU folds a norm into the next projection's GEMV, the GLU
//! into gate|up's epilogue, the output projection into the residual add): the order
//! stays the one `run` states. A family that needs a new step adds it here, to
//! `LayerOps`, and to each executor's implementation of that one operation.

use crate::error::Result;
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
    /// RMSNorm of the mixer's and the MLP's outputs before their residual adds.
    pub post_norms: bool,
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
            post_norms: c.post_norms,
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

/// A layer's norms, by where they stand in the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// Before the token mixer.
    Attn,
    /// Of the mixer's output, before its residual add (Gemma's post norms).
    PostAttn,
    /// Before the MLP.
    Ffn,
    /// Of the MLP's output, before its residual add.
    PostFfn,
}

/// A layer's projections, grouped by the input they share; a group's outputs come side
/// by side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Projs {
    /// The token mixer's inputs: Q|K|V, or a convolution's B|C|x (held as Q, K, V).
    Mixer,
    /// The mixer's output projection: O (a convolution's `out_proj`).
    Out,
    /// Gate|up of the gated MLP.
    GateUp,
    /// The MLP's down projection.
    Down,
}

impl Projs {
    pub const ALL: [Projs; 4] = [Projs::Mixer, Projs::Out, Projs::GateUp, Projs::Down];

    /// Position in `ALL`.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The projections of the group, in the order their outputs stand.
    pub fn members(self) -> &'static [crate::model::Proj] {
        use crate::model::Proj::*;
        match self {
            Projs::Mixer => &[Q, K, V],
            Projs::Out => &[O],
            Projs::GateUp => &[Gate, Up],
            Projs::Down => &[Down],
        }
    }

    /// Each member's output width in a layer of model `c` that runs `b`: a
    /// convolution's B, C and x are each `hidden` wide.
    pub fn widths(self, c: &Config, b: &Block) -> Vec<usize> {
        match (self, b.mixer) {
            (Projs::Mixer, Mixer::ShortConv) => vec![c.hidden; 3],
            _ => self.members().iter().map(|p| p.shape(c).0).collect(),
        }
    }
}

/// The coarse operations a block is written in (see the module's list). `Value` is
/// whatever an executor passes between them: rows of floats, candle tensors, or a GPU
/// buffer and the work still to be recorded into it.
pub trait LayerOps {
    type Value;
    /// RMSNorm of the residual stream with the layer's norm `n`.
    fn norm(&mut self, n: Norm) -> Result<Self::Value>;
    /// The projections `ps` of `x`, side by side, with their biases and adapter
    /// updates.
    fn project(&mut self, x: Self::Value, ps: Projs) -> Result<Self::Value>;
    /// Attention of q|k|v: QK-norm, RoPE, keys and values into the cache, causal
    /// grouped-query attention over it.
    fn attend(&mut self, qkv: Self::Value, b: &Block) -> Result<Self::Value>;
    /// LFM2's gated short convolution of B|C|x: C ⊙ conv(B ⊙ x), x joining the state.
    fn short_conv(&mut self, bcx: Self::Value) -> Result<Self::Value>;
    /// act(gate)·up of a gate|up value.
    fn glu(&mut self, gate_up: Self::Value, act: Activation) -> Result<Self::Value>;
    /// `out`, normed by `post` where given, × `scale`, added to the residual stream.
    fn residual(&mut self, out: Self::Value, post: Option<Norm>, scale: f32) -> Result<()>;
}

/// One layer: the block's order of steps, the one place it is stated.
pub fn run<O: LayerOps>(o: &mut O, b: &Block) -> Result<()> {
    let h = o.norm(Norm::Attn)?;
    let inputs = o.project(h, Projs::Mixer)?;
    let mixed = match b.mixer {
        Mixer::Attention => o.attend(inputs, b)?,
        Mixer::ShortConv => o.short_conv(inputs)?,
    };
    let out = o.project(mixed, Projs::Out)?;
    let post = b.post_norms && b.mixer == Mixer::Attention;
    o.residual(out, post.then_some(Norm::PostAttn), b.residual_scale)?;
    let h = o.norm(Norm::Ffn)?;
    let gate_up = o.project(h, Projs::GateUp)?;
    let mid = o.glu(gate_up, b.activation)?;
    let out = o.project(mid, Projs::Down)?;
    o.residual(out, b.post_norms.then_some(Norm::PostFfn), b.residual_scale)
}
