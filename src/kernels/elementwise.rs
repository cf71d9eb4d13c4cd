//! RMSNorm (`rms_norm.wgsl`), RoPE with optional per-head QK-norm (`rope.wgsl`), the
//! gated MLP's activation (`glu.wgsl`: SwiGLU or GeGLU) and biases (`bias_add.wgsl`).
//! CPU references: `model::reference::{rmsnorm, rope, glu, add_rows}`.

use super::attention::qkv_stride;
use super::Pass;
use super::{grid, Bind, Shader};
use crate::error::Result;
use crate::model::{Activation, Config, RopeStyle};

/// Where an RMSNorm's rows go: all rows, or the last token's only (the output head's),
/// written or added to what is there (Gemma's post norms fused with the residual).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NormOut {
    pub last_only: bool,
    pub accumulate: bool,
}

/// y[row] (+)= rmsnorm(x[row]) · w for each token (or, with `last_only`, the last
/// token into row 0): x and y `[rows][len]`, w `[len]`.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm(
    pass: &mut Pass,
    w: &wgpu::Buffer,
    x: &wgpu::Buffer,
    y: &wgpu::Buffer,
    len: usize,
    eps: f32,
    rows: usize,
    out: NormOut,
) -> Result<()> {
    let (k, step) = (pass.kernels, pass.step);
    let pipe = k.pipe(
        Shader::RmsNorm,
        &[
            ("LEN", len as f64),
            ("EPS", eps as f64),
            ("LAST_ONLY", out.last_only as u32 as f64),
            ("ACCUMULATE", out.accumulate as u32 as f64),
        ],
    )?;
    let written = if out.last_only { 1 } else { rows };
    let bufs = [
        step.into(),
        Bind::f32s(w, len),
        Bind::f32s(x, rows * len),
        Bind::f32s(y, written * len),
    ];
    k.dispatch(pass, &pipe, &bufs, [written as u32, 1, 1])
}

/// (cos, sin) of every position × rotated pair, computed on the CPU as the reference
/// does: GPU sin/cos lose accuracy for the large angles of long contexts.
pub fn rope_table(c: &Config, freqs: &[f32], max_pos: usize) -> Vec<f32> {
    let mut t = Vec::with_capacity(max_pos * freqs.len() * 2);
    for pos in 0..max_pos {
        for f in freqs {
            let (s, co) = (pos as f32 * f).sin_cos();
            t.push(co * c.rope_mscale);
            t.push(s * c.rope_mscale);
        }
    }
    debug_assert_eq!(freqs.len(), c.rope_dim / 2);
    t
}

/// Rotates (after QK-norm, when the model has it) the query and key heads of the
/// fused qkv rows in place; a layer without RoPE (`rotate` false) only norms them.
/// `qk_norm` holds q's head_dim weights, then k's.
#[allow(clippy::too_many_arguments)]
pub fn rope(
    pass: &mut Pass,
    c: &Config,
    table: &wgpu::Buffer,
    rotate: bool,
    qkv: &wgpu::Buffer,
    qk_norm: Option<&wgpu::Buffer>,
    n_tokens: usize,
) -> Result<()> {
    let (k, step) = (pass.kernels, pass.step);
    let mut consts = vec![
        ("HD", c.head_dim as f64),
        ("NH", c.n_heads as f64),
        ("QKV_STRIDE", qkv_stride(c) as f64),
        ("QK_NORM", qk_norm.is_some() as u32 as f64),
        ("EPS", c.rms_eps as f64),
    ];
    consts.extend(rope_constants(c, rotate));
    let pipe = k.pipe(Shader::Rope, &consts)?;
    let norm = match qk_norm {
        Some(w) => Bind::f32s(w, 2 * c.head_dim),
        None => table.into(),
    };
    let bufs = [
        step.into(),
        table.into(),
        Bind::f32s(qkv, n_tokens * qkv_stride(c)),
        norm,
    ];
    let groups = [n_tokens as u32, (c.n_heads + c.n_kv_heads) as u32, 1];
    k.dispatch(pass, &pipe, &bufs, groups)
}

/// y[t·stride + i] += scale · bias[i] for i < `bias`'s `width` floats, for each of the
/// step's tokens (`n_tokens` sizes the dispatch). CPU reference: `reference::add_rows`.
pub fn bias_add(
    pass: &mut Pass,
    bias: &wgpu::Buffer,
    y: &wgpu::Buffer,
    (width, stride): (usize, usize),
    scale: f32,
    n_tokens: usize,
) -> Result<()> {
    let (k, step) = (pass.kernels, pass.step);
    let consts = [
        ("WIDTH", width as f64),
        ("STRIDE", stride as f64),
        ("SCALE", scale as f64),
    ];
    let pipe = k.pipe(Shader::BiasAdd, &consts)?;
    let groups = ((n_tokens * width) as u32).div_ceil(256);
    let bufs = [
        step.into(),
        Bind::f32s(bias, width),
        Bind::rows(y, n_tokens, stride, 0, width),
    ];
    k.dispatch(pass, &pipe, &bufs, grid(groups))
}

/// The `HALF` (rotated pairs), `STYLE` and `ROTATE` constants of the kernels that
/// rotate: `rotate` false for a layer without RoPE.
pub fn rope_constants(c: &Config, rotate: bool) -> [(&'static str, f64); 3] {
    let style = (c.rope_style == RopeStyle::HalfSplit) as u32;
    [
        ("HALF", (c.rope_dim / 2) as f64),
        ("STYLE", style as f64),
        ("ROTATE", rotate as u32 as f64),
    ]
}

/// a = act(gate) · up from `[n_tokens][gate | up]` rows into `[n_tokens][ffn]`.
#[allow(clippy::too_many_arguments)]
pub fn glu(
    pass: &mut Pass,
    act: Activation,
    gu: &wgpu::Buffer,
    a: &wgpu::Buffer,
    ffn: usize,
    n_tokens: usize,
) -> Result<()> {
    let (k, step) = (pass.kernels, pass.step);
    let act = act as u32 as f64;
    let pipe = k.pipe(Shader::Glu, &[("F", ffn as f64), ("ACT", act)])?;
    let bufs = [
        step.into(),
        Bind::f32s(gu, n_tokens * 2 * ffn),
        Bind::f32s(a, n_tokens * ffn),
    ];
    k.dispatch(
        pass,
        &pipe,
        &bufs,
        grid(((n_tokens * ffn) as u32).div_ceil(256)),
    )
}
