//! Quantized matmul (`matmul_gemv.wgsl` for one token, `matmul_gemm.wgsl` for a chunk)
//! and the embedding gather (`embed.wgsl`), over weights packed by
//! `quant::gpu_layout`. CPU reference: dequantize, then `model::reference::matmul`.

use super::Pass;
use super::{grid, Bind, Shader};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::quant::gpu_layout::{self, GpuFormat};
use crate::quant::GgmlType;

/// A weight matrix on the GPU, split by rows into parts that each fit one binding.
pub struct GpuMatrix {
    pub format: GpuFormat,
    pub rows: usize,
    pub cols: usize,
    /// Rows sharing one table (palettized formats; 0 otherwise).
    pub lut_rows: usize,
    pub parts: Vec<Part>,
}

pub struct Part {
    pub row0: usize,
    pub rows: usize,
    pub qs: wgpu::Buffer,
    pub scales: wgpu::Buffer,
    /// `row0` and `rows` as the kernels' `part` uniform: a part's place is data, not
    /// a pipeline constant, so a matrix in any number of parts compiles one pipeline.
    pub span: wgpu::Buffer,
}

impl Part {
    pub fn new(
        gpu: &Gpu,
        row0: usize,
        rows: usize,
        qs: wgpu::Buffer,
        scales: wgpu::Buffer,
    ) -> Result<Part> {
        let word =
            |v: usize| u32::try_from(v).map_err(|_| Error::invalid(format!("row {v} is past u32")));
        let span = [word(row0)?, word(rows)?, 0, 0];
        Ok(Part {
            row0,
            rows,
            qs,
            scales,
            span: gpu.uniform("matrix part", bytemuck::cast_slice(&span)),
        })
    }
}

impl GpuMatrix {
    /// Uploads a `rows × cols` tensor given as GGUF bytes of type `ty`.
    pub fn upload(
        gpu: &Gpu,
        name: &str,
        ty: GgmlType,
        data: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<GpuMatrix> {
        let packed = gpu_layout::pack(ty, data, rows * cols)?;
        Self::from_packed(gpu, name, packed, rows, cols)
    }

    pub fn from_packed(
        gpu: &Gpu,
        name: &str,
        p: gpu_layout::Packed,
        rows: usize,
        cols: usize,
    ) -> Result<GpuMatrix> {
        Self::from_packed_split(gpu, name, p, rows, cols, gpu.max_binding())
    }

    /// As `from_packed`, with parts of at most `max_bytes` of values (tests use small
    /// parts to exercise the split that large tensors get).
    pub fn from_packed_split(
        gpu: &Gpu,
        name: &str,
        p: gpu_layout::Packed,
        rows: usize,
        cols: usize,
        max_bytes: u64,
    ) -> Result<GpuMatrix> {
        let plan = plan_parts(p.format, p.lut_rows, rows, cols, max_bytes, name)?;
        let mut parts = Vec::with_capacity(plan.len());
        for pp in plan {
            let scales = p
                .scales
                .get(pp.scales.start..pp.scales.end.min(p.scales.len()));
            let scales = scales.ok_or_else(|| {
                Error::invalid(format!(
                    "{name}: scales do not cover rows {}..{}",
                    pp.row0,
                    pp.row0 + pp.rows
                ))
            })?;
            let qs = p
                .qs
                .get(pp.row0 * pp.row_words..(pp.row0 + pp.rows) * pp.row_words)
                .ok_or_else(|| Error::invalid(format!("{name}: values do not cover its rows")))?;
            parts.push(Part::new(
                gpu,
                pp.row0,
                pp.rows,
                gpu.upload_u32(&format!("{name} qs"), qs)?,
                gpu.upload_u32(&format!("{name} scales"), scales)?,
            )?);
        }
        Ok(GpuMatrix {
            format: p.format,
            rows,
            cols,
            lut_rows: p.lut_rows,
            parts,
        })
    }

    /// A `rows × cols` matrix of GGUF type `ty` whose buffers exist before its bytes:
    /// the loader writes it slice by slice as the file streams in, so no tensor is
    /// ever whole in memory (palettes, stored as two tensors, go through `from_packed`).
    /// Parts hold at most `max_bytes` of values (`Gpu::max_binding`; tests use less).
    pub fn writer(
        gpu: &Gpu,
        name: &str,
        ty: GgmlType,
        (rows, cols): (usize, usize),
        max_bytes: u64,
    ) -> Result<MatrixWriter> {
        let bad = || Error::invalid(format!("{name}: {ty} cannot hold rows of {cols}"));
        let row_bytes =
            usize::try_from(ty.bytes_for(cols as u64).ok_or_else(bad)?).map_err(|_| bad())?;
        let m = Self::empty(
            gpu,
            name,
            Self::format_of(ty, cols)?,
            0,
            (rows, cols),
            max_bytes,
        )?;
        Ok(MatrixWriter {
            ty,
            row_bytes,
            row_words: (cols / 32) * m.format.qs_words_per_block(),
            written: 0,
            m,
        })
    }

    /// The GPU format GGUF type `ty` packs to, from two rows of zeros (valid blocks in
    /// every GGML type: a zero scale).
    pub fn format_of(ty: GgmlType, cols: usize) -> Result<GpuFormat> {
        let row_bytes = ty.bytes_for(cols as u64).unwrap_or(0) as usize;
        Ok(gpu_layout::pack(ty, &vec![0; 2 * row_bytes], 2 * cols)?.format)
    }

    /// A `rows × cols` matrix in `format` whose buffers are allocated, not written: for
    /// `writer`, and on a shadow device (`Gpu::shadow`) a stand-in for compiling.
    pub fn empty(
        gpu: &Gpu,
        name: &str,
        format: GpuFormat,
        lut_rows: usize,
        (rows, cols): (usize, usize),
        max_bytes: u64,
    ) -> Result<GpuMatrix> {
        let plan = plan_parts(format, lut_rows, rows, cols, max_bytes, name)?;
        let mut parts = Vec::with_capacity(plan.len());
        for pp in &plan {
            parts.push(Part::new(
                gpu,
                pp.row0,
                pp.rows,
                gpu.storage(&format!("{name} qs"), (pp.rows * pp.row_words * 4) as u64)?,
                gpu.storage(&format!("{name} scales"), (pp.scales.len() * 4) as u64)?,
            )?);
        }
        Ok(GpuMatrix {
            format,
            rows,
            cols,
            lut_rows,
            parts,
        })
    }

    /// Bytes of values and of scales the whole matrix packs to (what one part holds
    /// when it is in one), from its shape alone.
    pub fn packed_bytes(&self) -> (u64, u64) {
        let blocks = self.cols / 32;
        let qs = self.rows * blocks * self.format.qs_words_per_block();
        let scales = scale_words(self.format, self.lut_rows, blocks, 0, self.rows).len();
        (qs as u64 * 4, (scales as u64 * 4).max(4))
    }

    pub fn bytes(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| p.qs.size() + p.scales.size())
            .sum()
    }
}

/// One part of a matrix: its rows, their words of values per row, and the range of
/// `scales` words it owns.
struct PartPlan {
    row0: usize,
    rows: usize,
    row_words: usize,
    scales: std::ops::Range<usize>,
}

/// How a matrix splits into parts of at most `max_bytes` of values each.
fn plan_parts(
    format: GpuFormat,
    lut_rows: usize,
    rows: usize,
    cols: usize,
    max_bytes: u64,
    name: &str,
) -> Result<Vec<PartPlan>> {
    // Every kernel reads rows in blocks of 32; `Config::validate` and `pack` check
    // the widths a model and a tensor bring, this guards every other caller.
    if rows == 0 || cols == 0 || !cols.is_multiple_of(32) {
        return Err(Error::invalid(format!(
            "{name}: a {rows} × {cols} matrix (rows must be whole blocks of 32)"
        )));
    }
    let blocks_per_row = cols / 32;
    let row_words = blocks_per_row * format.qs_words_per_block();
    // Parts start on an even row so f16 scales (two per word) split cleanly, and on
    // a table boundary for palettes.
    let align = if format.is_palette() {
        2 * lut_rows.max(1)
    } else {
        2
    };
    let max_rows = ((max_bytes / 4) as usize / row_words).max(align);
    let per_part = if max_rows >= rows {
        rows
    } else {
        max_rows / align * align
    };
    let scales = |row0, n| scale_words(format, lut_rows, blocks_per_row, row0, n);
    Ok((0..rows)
        .step_by(per_part.max(1))
        .map(|row0| {
            let n = per_part.min(rows - row0);
            PartPlan {
                row0,
                rows: n,
                row_words,
                scales: scales(row0, n),
            }
        })
        .collect())
}

/// The `scales` words rows [row0, row0 + n) own (F32, F16: the one dummy word).
fn scale_words(
    format: GpuFormat,
    lut_rows: usize,
    blocks_per_row: usize,
    row0: usize,
    n: usize,
) -> std::ops::Range<usize> {
    if let Some(w) = format.scale_words_per_row(blocks_per_row) {
        row0 * w..(row0 + n) * w
    } else if format.is_palette() {
        let (lr, lw) = (lut_rows.max(1), format.lut_words());
        row0 / lr * lw..(row0 + n).div_ceil(lr) * lw
    } else if format.has_half_scales() {
        row0 * blocks_per_row / 2..((row0 + n) * blocks_per_row).div_ceil(2)
    } else {
        0..1
    }
}

/// A matrix being written in slices of rows, front to back (`GpuMatrix::writer`).
pub struct MatrixWriter {
    ty: GgmlType,
    row_bytes: usize,
    row_words: usize,
    written: usize,
    m: GpuMatrix,
}

impl MatrixWriter {
    /// GGUF bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The rows to write next, about `target` bytes of the file (an even count, and
    /// within one part), or `None` once every row is written.
    pub fn next_rows(&self, target: usize) -> Option<std::ops::Range<usize>> {
        let part = self
            .m
            .parts
            .iter()
            .find(|p| p.row0 + p.rows > self.written)?;
        let n = (target / self.row_bytes.max(1)).max(2) / 2 * 2;
        Some(self.written..(self.written + n).min(part.row0 + part.rows))
    }

    /// Packs and writes `next_rows`' rows, given as their GGUF bytes.
    pub fn write(&mut self, gpu: &Gpu, rows: std::ops::Range<usize>, bytes: &[u8]) -> Result<()> {
        let m = &self.m;
        let part = m.parts.iter().find(|p| p.row0 + p.rows > rows.start);
        let part = part.filter(|p| {
            rows.start == self.written
                && rows.start < rows.end
                && rows.end <= p.row0 + p.rows
                && (rows.len().is_multiple_of(2) || rows.end == p.row0 + p.rows)
        });
        let Some(part) = part else {
            return Err(Error::invalid(format!(
                "rows {rows:?} are not the next slice of a {}-row matrix",
                m.rows
            )));
        };
        let packed = gpu_layout::pack(self.ty, bytes, rows.len() * m.cols)?;
        let local = rows.start - part.row0;
        gpu.write_words(&part.qs, local * self.row_words, &packed.qs)?;
        // Where this part's scales for these rows go (F32, F16: the dummy word again).
        let at = scale_words(m.format, 0, m.cols / 32, local, rows.len()).start;
        gpu.write_words(&part.scales, at, &packed.scales)?;
        self.written = rows.end;
        Ok(())
    }

    /// The matrix, once every row has been written.
    pub fn finish(self) -> Result<GpuMatrix> {
        if self.written != self.m.rows {
            return Err(Error::invalid(format!(
                "{} of {} rows were written",
                self.written, self.m.rows
            )));
        }
        Ok(self.m)
    }
}

/// Where a matmul reads and writes: y[t·y_stride + y_offset + row] (+)= W·x[t·x_stride..].
pub struct Io<'a> {
    pub x: &'a wgpu::Buffer,
    pub x_stride: usize,
    pub y: &'a wgpu::Buffer,
    pub y_stride: usize,
    pub y_offset: usize,
    pub accumulate: bool,
    /// The product is multiplied by this before it is written or added (1: as is).
    pub scale: f32,
    /// Then soft-capped to (-cap, cap) by cap·tanh(y/cap) (0: not capped).
    pub cap: f32,
}

impl<'a> Io<'a> {
    /// The x rows `[n_tokens][x_stride]` a matmul of `cols` inputs reads.
    fn x_bind(&self, n_tokens: usize, cols: usize) -> Bind<'a> {
        Bind::rows(self.x, n_tokens, self.x_stride, 0, cols)
    }

    /// The y rows `[n_tokens][y_stride]` a matmul of `rows` outputs writes (from
    /// `y_offset`).
    fn y_bind(&self, n_tokens: usize, rows: usize) -> Bind<'a> {
        Bind::rows(self.y, n_tokens, self.y_stride, self.y_offset, rows)
    }

    /// A GEMV's or GEMM's bindings for part `p` of `m`: the step, the part's words,
    /// scales and span, x and y.
    fn part_binds<'b>(
        &self,
        step: &'b wgpu::Buffer,
        p: &'b Part,
        m: &GpuMatrix,
        n: usize,
    ) -> [Bind<'b>; 6]
    where
        'a: 'b,
    {
        let (x, y) = (self.x_bind(n, m.cols), self.y_bind(n, m.rows));
        [
            step.into(),
            (&p.qs).into(),
            (&p.scales).into(),
            x,
            y,
            (&p.span).into(),
        ]
    }

    /// y = W·x, token rows of `x_stride` and `y_stride` floats, written as they are
    /// (no offset, scale or cap; not added): set what differs on top.
    pub fn new(
        (x, x_stride): (&'a wgpu::Buffer, usize),
        (y, y_stride): (&'a wgpu::Buffer, usize),
    ) -> Self {
        Io {
            x,
            x_stride,
            y,
            y_stride,
            y_offset: 0,
            accumulate: false,
            scale: 1.0,
            cap: 0.0,
        }
    }
}

/// Most tokens one GEMV dispatch takes (`TOKENS` in the GEMV kernels): a speculative
/// check's positions, each computed as a one-token step computes it.
pub const GEMV_TOKENS: usize = 8;

/// The GEMV kernels' token constants: one token, or up to 4 or 8 — then the step's
/// `n_tokens` run, which must be `n_tokens` (one pipeline serves every count up to
/// its size; 4 or 8 tokens' sums are the lanes of one or two vec4 accumulators).
fn token_constants(io: &Io, n_tokens: usize) -> Result<[(&'static str, f64); 3]> {
    // One token reads no stride: the same pipeline serves every caller.
    let (tokens, x, y) = match n_tokens {
        1 => (1, 0, 0),
        2..=4 => (4, io.x_stride, io.y_stride),
        5..=GEMV_TOKENS => (8, io.x_stride, io.y_stride),
        _ => {
            return Err(Error::gpu(format!(
                "a GEMV of {n_tokens} tokens (1 to {GEMV_TOKENS})"
            )))
        }
    };
    Ok([
        ("TOKENS", tokens as f64),
        ("X_STRIDE", x as f64),
        ("Y_STRIDE", y as f64),
    ])
}

/// Up to `GEMV_TOKENS` tokens: y = W·x, each weight decoded once for all of them and
/// each token's result the one-token dispatch's, bit for bit. The subgroup kernel
/// when the tuning says so, else the workgroup-memory reduction.
pub fn gemv(pass: &mut Pass, m: &GpuMatrix, io: &Io, n_tokens: usize) -> Result<()> {
    let (k, step) = (pass.kernels, pass.step);
    let tokens = token_constants(io, n_tokens)?;
    // Threads per row: a subgroup, or the tuning's count but no more than the blocks.
    let (shader, name, per_row) = match k.tuning.subgroup_size {
        0 => {
            let blocks = ((m.cols / 32).next_power_of_two() as u32).max(1);
            (Shader::MatmulGemv, "TPR", k.tuning.gemv_tpr.min(blocks))
        }
        sg => (Shader::MatmulGemvSubgroup, "SG", sg),
    };
    for p in &m.parts {
        let own = [(name, per_row as f64), tokens[0], tokens[1], tokens[2]];
        let consts = [&matrix_constants(m)[..], &epilogue_constants(io), &own].concat();
        let pipe = k.pipe(shader, &consts)?;
        let groups = (p.rows as u32).div_ceil(256 / per_row);
        let bufs = io.part_binds(step, p, m, n_tokens);
        k.dispatch(pass, &pipe, &bufs, grid(groups))?;
    }
    Ok(())
}

/// What a fused RMSNorm + GEMV applies (`norm_matmul_gemv.wgsl`).
pub struct NormIn<'a> {
    /// The norm's weights (`K` floats).
    pub weights: &'a wgpu::Buffer,
    pub eps: f32,
    /// The matrix is [gate; up] and the output act(gate)·up.
    pub glu: Option<crate::model::Activation>,
    /// Where workgroup 0 writes rmsnorm(x) (for LoRA's A·x) when `write_normed`; bound
    /// either way (a buffer the dispatch does not otherwise use: writable bindings must
    /// not alias).
    pub normed: &'a wgpu::Buffer,
    pub write_normed: bool,
}

impl<'a> NormIn<'a> {
    /// The norm of `weights` and `eps` (and `glu`), rmsnorm(x) written to `normed`.
    pub fn new(
        weights: &'a wgpu::Buffer,
        eps: f32,
        glu: Option<crate::model::Activation>,
        normed: &'a wgpu::Buffer,
    ) -> Self {
        NormIn {
            weights,
            eps,
            glu,
            normed,
            write_normed: true,
        }
    }
}

/// Up to `GEMV_TOKENS` tokens: y (+)= W · rmsnorm(x), or act(gate)·up of a
/// [gate; up] matrix: a norm and its matmul (and the gated activation) in one
/// dispatch (`normed` rows at x's stride). The matrix must be in one part when `glu`
/// (both halves of a row pair are read).
pub fn norm_gemv(
    pass: &mut Pass,
    m: &GpuMatrix,
    io: &Io,
    norm: &NormIn,
    n_tokens: usize,
) -> Result<()> {
    let (k, step) = (pass.kernels, pass.step);
    let tokens = token_constants(io, n_tokens)?;
    // 0: no GLU; else the activation's id (`ACT_*` in the WGSL).
    let glu = norm.glu.map_or(0, |a| a as u32) as f64;
    if norm.glu.is_some() && (m.parts.len() != 1 || !m.rows.is_multiple_of(2)) {
        return Err(Error::invalid(
            "a gated matmul needs its [gate; up] rows in one part",
        ));
    }
    let blocks = ((m.cols / 32).next_power_of_two() as u32).max(1);
    let tpr = k.tuning.gemv_tpr.min(blocks);
    for p in &m.parts {
        let rows = if norm.glu.is_some() {
            p.rows / 2
        } else {
            p.rows
        };
        let own = [
            ("TPR", tpr as f64),
            ("EPS", norm.eps as f64),
            ("GLU", glu),
            ("WRITE_NORMED", norm.write_normed as u32 as f64),
            tokens[0],
            tokens[1],
            tokens[2],
        ];
        let consts = [&matrix_constants(m)[..], &epilogue_constants(io), &own].concat();
        let pipe = k.pipe(Shader::NormMatmulGemv, &consts)?;
        let groups = (rows as u32).div_ceil(256 / tpr);
        let out_rows = if norm.glu.is_some() {
            m.rows / 2
        } else {
            m.rows
        };
        let normed = match norm.write_normed {
            true => Bind::rows(norm.normed, n_tokens, io.x_stride, 0, m.cols),
            false => norm.normed.into(),
        };
        let bufs = [
            step.into(),
            (&p.qs).into(),
            (&p.scales).into(),
            io.x_bind(n_tokens, m.cols),
            io.y_bind(n_tokens, out_rows),
            Bind::f32s(norm.weights, m.cols),
            normed,
            (&p.span).into(),
        ];
        k.dispatch(pass, &pipe, &bufs, grid(groups))?;
    }
    Ok(())
}

/// The benchmark's baseline: one thread per row (token 0 only).
#[cfg(feature = "dev")]
pub fn naive(pass: &mut Pass, m: &GpuMatrix, x: &wgpu::Buffer, y: &wgpu::Buffer) -> Result<()> {
    let k = pass.kernels;
    if m.parts.len() > 1 {
        return Err(Error::invalid(
            "the naive matmul takes matrices in one part only",
        ));
    }
    for p in &m.parts {
        let consts = [&matrix_constants(m)[..], &[("N", p.rows as f64)]].concat();
        let pipe = k.pipe(Shader::MatmulNaive, &consts)?;
        let bufs = [
            Bind::f32s(x, m.cols),
            (&p.qs).into(),
            (&p.scales).into(),
            Bind::f32s(y, p.rows),
        ];
        k.dispatch(pass, &pipe, &bufs, grid((p.rows as u32).div_ceil(64)))?;
    }
    Ok(())
}

/// The override constants every matmul over `m` takes: its format and width.
fn matrix_constants(m: &GpuMatrix) -> [(&'static str, f64); 3] {
    [
        ("FORMAT", m.format.id() as f64),
        ("LUT_ROWS", m.lut_rows.max(1) as f64),
        ("K", m.cols as f64),
    ]
}

/// The epilogue's override constants of a matmul writing through `io`.
fn epilogue_constants(io: &Io) -> [(&'static str, f64); 4] {
    [
        ("Y_OFFSET", io.y_offset as f64),
        ("ACCUMULATE", io.accumulate as u32 as f64),
        ("SCALE", io.scale as f64),
        ("CAP", io.cap as f64),
    ]
}

/// The override constants both GEMM kernels take (the same for every part of `m`).
fn gemm_constants(m: &GpuMatrix, io: &Io) -> Vec<(&'static str, f64)> {
    let strides = [
        ("X_STRIDE", io.x_stride as f64),
        ("Y_STRIDE", io.y_stride as f64),
    ];
    [&matrix_constants(m)[..], &strides, &epilogue_constants(io)].concat()
}

/// `n_tokens` tokens through a GEMM: tiled, or (`rowwise`, software adapters) one
/// thread per row and 8 tokens.
pub fn gemm(pass: &mut Pass, rowwise: bool, m: &GpuMatrix, io: &Io, n_tokens: usize) -> Result<()> {
    let (k, step) = (pass.kernels, pass.step);
    let (shader, t) = match rowwise {
        true => (Shader::MatmulGemmRowwise, (n_tokens as u32).div_ceil(8)),
        false => (Shader::MatmulGemm, (n_tokens as u32).div_ceil(16)),
    };
    for p in &m.parts {
        let pipe = k.pipe(shader, &gemm_constants(m, io))?;
        let rows = p.rows as u32;
        let groups = match (rowwise, grid(rows.div_ceil(64))) {
            (true, [gx, gy, _]) => [gx, gy, t],
            (false, _) => [rows.div_ceil(64), t, 1],
        };
        let bufs = io.part_binds(step, p, m, n_tokens);
        k.dispatch(pass, &pipe, &bufs, groups)?;
    }
    Ok(())
}

/// Picks GEMV for up to `GEMV_TOKENS` tokens (a decode step, a speculative check), a
/// GEMM (of the tuning's kind) for more.
pub fn matmul(pass: &mut Pass, m: &GpuMatrix, io: &Io, n_tokens: usize) -> Result<()> {
    if n_tokens <= GEMV_TOKENS {
        gemv(pass, m, io, n_tokens)
    } else {
        let rowwise = pass.kernels.tuning.rowwise_gemm;
        gemm(pass, rowwise, m, io, n_tokens)
    }
}

/// out[t] = row tokens[t] of the table × `scale`, for `n_tokens` tokens.
#[allow(clippy::too_many_arguments)]
pub fn embed(
    pass: &mut Pass,
    table: &GpuMatrix,
    tokens: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n_tokens: usize,
    scale: f32,
) -> Result<()> {
    let (k, step) = (pass.kernels, pass.step);
    for p in &table.parts {
        let pipe = k.pipe(
            Shader::Embed,
            &[
                ("FORMAT", table.format.id() as f64),
                ("LUT_ROWS", table.lut_rows.max(1) as f64),
                ("HIDDEN", table.cols as f64),
                ("SCALE", scale as f64),
            ],
        )?;
        let bufs = [
            step.into(),
            (&p.qs).into(),
            (&p.scales).into(),
            Bind::f32s(tokens, n_tokens),
            Bind::f32s(out, n_tokens * table.cols),
            (&p.span).into(),
        ];
        k.dispatch(pass, &pipe, &bufs, [n_tokens as u32, 1, 1])?;
    }
    Ok(())
}
