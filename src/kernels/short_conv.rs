//! LFM2's gated short convolution (`short_conv.wgsl`) over a step's tokens, with the
//! layer's state in a ring of B ⊙ x rows. CPU reference: `model::short_conv::ConvState::gated`.

use super::Pass;
use super::{grid, Bind, Shader};
use crate::error::Result;

/// Where a step's convolution reads and writes.
pub struct ConvIo<'a> {
    /// `[n][stride]` rows of B | C | x (the layer's in_proj output).
    pub bcx: &'a wgpu::Buffer,
    pub stride: usize,
    /// `[hidden][taps]`.
    pub taps: &'a wgpu::Buffer,
    /// `[slots][hidden]`: position p's B ⊙ x in row p % slots.
    pub state: &'a wgpu::Buffer,
    pub slots: usize,
    /// `[n][hidden]` out: C ⊙ conv(B ⊙ x).
    pub y: &'a wgpu::Buffer,
}

/// y = C ⊙ conv(B ⊙ x) for the step's `n_tokens` at `pos0` (the step uniform), the
/// state read for earlier positions and written for these.
pub fn short_conv(
    pass: &mut Pass,
    (hidden, taps): (usize, usize),
    io: &ConvIo,
    n_tokens: usize,
) -> Result<()> {
    let (k, step) = (pass.kernels, pass.step);
    let consts = [
        ("H", hidden as f64),
        ("STRIDE", io.stride as f64),
        ("TAPS", taps as f64),
        ("SLOTS", io.slots as f64),
    ];
    let pipe = k.pipe(Shader::ShortConv, &consts)?;
    let bufs = [
        step.into(),
        Bind::rows(io.bcx, n_tokens, io.stride, 0, 3 * hidden),
        Bind::f32s(io.taps, hidden * taps),
        Bind::f32s(io.state, io.slots * hidden),
        Bind::f32s(io.y, n_tokens * hidden),
    ];
    k.dispatch(pass, &pipe, &bufs, grid((hidden as u32).div_ceil(64)))
}
