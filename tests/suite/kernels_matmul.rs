//! Matmul (GEMV and tiled GEMM) and embedding kernels against the CPU reference, for
//! every weight format (the GGML block and K-quant formats, palettized 2- and 4-bit),
//! over awkward shapes.

use crate::common;

use common::gpu::{ctx, ctx_all, max_diff, values, Ctx};
use pippin::kernels::matmul::{self, GpuMatrix, Io, NormIn};
use pippin::kernels::stacked::Stacked;
use pippin::kernels::{Kernels, Tuning};
use pippin::model::reference;
use pippin::model::Activation;
use pippin::quant::gpu_layout::{pack, pack_palette, Packed};
use pippin::quant::palette::palettize;
use pippin::quant::{dequantize, encode, GgmlType};
use pippin::testing::kernels::matmul::{self as matmul_case, io_with};
use pollster::block_on;

/// A weight format: a GGUF type, or a palette (bits, rows per table).
#[derive(Clone, Copy, Debug)]
enum Kind {
    Ggml(GgmlType),
    Palette(u32, usize),
}
use Kind::{Ggml, Palette};

/// Every format Pippin decodes, then palettes with the usual 16 rows a table, an
/// awkward 5, and one table per row (the converter's default for 2 bits).
fn kinds() -> Vec<Kind> {
    let ggml = GgmlType::ALL.iter().copied().filter(|t| t.can_dequantize());
    let palettes = [Palette(4, 16), Palette(2, 16), Palette(4, 5), Palette(2, 1)];
    ggml.map(Ggml).chain(palettes).collect()
}

/// Row widths a format's blocks allow: K-quant super-blocks hold 256 values.
fn block_cols(kind: Kind, cols: usize) -> usize {
    match kind {
        Ggml(ty) if ty.block().0 == 256 => cols.div_ceil(256) * 256,
        _ => cols,
    }
}

/// `w` in the format, as the GPU takes it and as the CPU reference dequantizes it.
fn packed_as(kind: Kind, w: &[f32], rows: usize, cols: usize) -> (Packed, Vec<f32>) {
    match kind {
        Ggml(ty) => {
            let bytes = encode_as(ty, w);
            let deq = dequantize(ty, &bytes, rows * cols).unwrap();
            (pack(ty, &bytes, rows * cols).unwrap(), deq)
        }
        Palette(bits, lut_rows) => {
            let p = palettize(w, rows, cols, bits, lut_rows, 1, None);
            (pack_palette(&p).unwrap(), p.dequantize())
        }
    }
}

/// `w` quantized by the GGML reference quantizers we have; the formats without one
/// get random valid blocks (every bit pattern of values and sub-scales).
fn encode_as(ty: GgmlType, w: &[f32]) -> Vec<u8> {
    match ty {
        GgmlType::F32 => encode::f32s(w),
        GgmlType::F16 => encode::f16s(w),
        GgmlType::BF16 => w
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
        GgmlType::Q8_0 => encode::q8_0(w),
        GgmlType::Q4_0 => encode::q4_0(w),
        GgmlType::Q4_1 => encode::q4_1(w),
        other => encode::random_blocks(other, w.len(), w.len() as u64 ^ other.id() as u64),
    }
}

fn check(ty: Kind, rows: usize, cols: usize, t: usize, split_bytes: Option<u64>, accumulate: bool) {
    check_on(ctx(), &ctx().k, ty, rows, cols, t, split_bytes, accumulate)
}

#[allow(clippy::too_many_arguments)]
fn check_on(
    c: &Ctx,
    kernels: &Kernels,
    ty: Kind,
    rows: usize,
    cols: usize,
    t: usize,
    split_bytes: Option<u64>,
    accumulate: bool,
) {
    let cols = block_cols(ty, cols);
    let w = values(rows * cols, (rows * 31 + cols) as u64);
    let (packed, wq) = packed_as(ty, &w, rows, cols);
    let m = match split_bytes {
        Some(b) => GpuMatrix::from_packed_split(&c.gpu, "w", packed, rows, cols, b).unwrap(),
        None => GpuMatrix::from_packed(&c.gpu, "w", packed, rows, cols).unwrap(),
    };
    if split_bytes.is_some() {
        assert!(m.parts.len() > 1, "the matrix should be split");
    }
    let what = format!("{ty:?}");
    block_on(matmul_case::product(
        c,
        kernels,
        (&m, &wq),
        t,
        accumulate,
        &what,
    ));
}

#[test]
fn gemv_every_format_awkward_shapes() {
    for ty in kinds() {
        for (rows, cols) in [(1, 32), (37, 96), (129, 576), (300, 64)] {
            check(ty, rows, cols, 1, None, false);
        }
    }
}

#[test]
fn gemv_with_wide_rows_per_thread_group() {
    // The shape real GPUs get (16 threads per row) besides the software one (4).
    let c = ctx();
    let k = Kernels::with_tuning(&c.gpu, Tuning::gpu(0));
    for ty in kinds() {
        check_on(c, &k, ty, 129, 576, 1, None, false);
        check_on(c, &k, ty, 33, 32, 1, None, true);
    }
}

/// What a GEMV test runs: plain, or with the norm folded in (and the GLU epilogue).
#[derive(Clone, Copy, Debug)]
enum Gemv {
    Plain,
    Normed(Option<Activation>),
}

/// `n` tokens in one GEMV dispatch (rows of x and y at strides wider than the matrix,
/// y at an offset) against `n` one-token dispatches: the same bits, token by token.
#[allow(clippy::too_many_arguments)]
fn check_tokens_bitwise(
    (c, kernels): (&Ctx, &Kernels),
    ty: Kind,
    rows: usize,
    cols: usize,
    n: usize,
    kind: Gemv,
    accumulate: bool,
) {
    let cols = block_cols(ty, cols);
    let glu = matches!(kind, Gemv::Normed(Some(_)));
    let w_rows = if glu { 2 * rows } else { rows };
    let w = values(w_rows * cols, (rows * 7 + cols) as u64);
    let m = GpuMatrix::from_packed(&c.gpu, "w", packed_as(ty, &w, w_rows, cols).0, w_rows, cols)
        .unwrap();
    let (xs, ys, off) = (cols + 32, rows + 3, 2);
    let x: Vec<f32> = values(n * xs, 11).iter().map(|v| v * 30.0).collect();
    let y0 = values(n * ys, 12);
    let g: Vec<f32> = values(cols, 13).iter().map(|v| 1.0 + v * 0.5).collect();
    let gb = c.buf(&g);
    // One dispatch over `tokens` rows of x (at stride xs) into y (at stride ys).
    let run = |xv: &[f32], yv: &[f32], tokens: usize| {
        let (xb, yb, nb) = (c.buf(xv), c.buf(yv), c.zeros(tokens * xs));
        let step = c.step(tokens, 0);
        c.run_on(kernels, &step, |pass| {
            let io = Io {
                y_offset: off,
                ..io_with(accumulate, (&xb, xs), (&yb, ys))
            };
            match kind {
                Gemv::Plain => matmul::gemv(pass, &m, &io, tokens).unwrap(),
                Gemv::Normed(glu) => {
                    let norm = NormIn::new(&gb, 1e-6, glu, &nb);
                    matmul::norm_gemv(pass, &m, &io, &norm, tokens).unwrap()
                }
            }
        });
        let normed = match kind {
            Gemv::Plain => vec![],
            Gemv::Normed(_) => c.read(&nb, tokens * xs),
        };
        (c.read(&yb, tokens * ys), normed)
    };
    let (many, many_normed) = run(&x, &y0, n);
    for t in 0..n {
        let (one, one_normed) = run(&x[t * xs..(t + 1) * xs], &y0[t * ys..(t + 1) * ys], 1);
        let what = format!("{ty:?} {rows}x{cols} {kind:?} token {t} of {n} acc {accumulate}");
        assert!(one == many[t * ys..(t + 1) * ys], "{what}: y differs");
        if let Gemv::Normed(_) = kind {
            let got = &many_normed[t * xs..t * xs + cols];
            assert!(got == &one_normed[..cols], "{what}: rmsnorm(x) differs");
        }
    }
}

/// A speculative check's GEMVs: several tokens in one dispatch, each weight decoded
/// once, each token's result a one-token dispatch's bit for bit — every kernel and
/// tuning (the subgroup GEMV where the adapter has fixed-size subgroups), rows wider
/// than the stage, the GLU epilogue, the residual add.
#[test]
fn several_tokens_in_one_gemv_are_one_token_dispatches_bit_for_bit() {
    let c = ctx();
    let tuning = |gemv_tpr| Tuning {
        gemv_tpr,
        subgroup_size: 0,
        rowwise_gemm: false,
    };
    let mut kernels = vec![
        (c, Kernels::with_tuning(&c.gpu, tuning(4))),
        (c, Kernels::with_tuning(&c.gpu, tuning(16))),
    ];
    let all = ctx_all();
    let sg = all.gpu.adapter.subgroup_size;
    if sg > 0 {
        let subgroups = Tuning {
            subgroup_size: sg,
            ..tuning(4)
        };
        kernels.push((all, Kernels::with_tuning(&all.gpu, subgroups)));
    }
    let gemvs = [
        Gemv::Plain,
        Gemv::Normed(None),
        Gemv::Normed(Some(Activation::Silu)),
    ];
    for (i, (c, k)) in kernels.iter().enumerate() {
        for ty in [
            Ggml(GgmlType::Q4_1),
            Ggml(GgmlType::Q4K),
            Ggml(GgmlType::Q6K),
            Ggml(GgmlType::F16),
            Palette(4, 16),
        ] {
            for (j, (rows, cols, n)) in [(37, 96, 2), (129, 576, 8), (5, 3104, 5)]
                .into_iter()
                .enumerate()
            {
                let kind = gemvs[(i + j) % gemvs.len()];
                check_tokens_bitwise((c, k), ty, rows, cols, n, kind, (i + j) % 2 == 1);
            }
        }
    }
    // And against the CPU reference, through `matmul` (which picks the GEMV).
    for ty in kinds() {
        check(ty, 41, 160, 7, None, true);
    }
}

/// Both GEMM kinds: tiles (GPUs) and one thread per row (software adapters).
#[test]
fn gemm_tiled_and_rowwise() {
    let c = ctx();
    for rowwise_gemm in [false, true] {
        let k = Kernels::with_tuning(
            &c.gpu,
            Tuning {
                gemv_tpr: 4,
                subgroup_size: 0,
                rowwise_gemm,
            },
        );
        for ty in kinds() {
            for (rows, cols, t) in [(37, 96, 2), (130, 160, 17), (65, 64, 9)] {
                check_on(c, &k, ty, rows, cols, t, None, false);
            }
            check_on(c, &k, ty, 45, 64, 11, Some(10 * 64), true);
        }
    }
}

/// A matrix split into many parts compiles one pipeline per kernel, not one a part:
/// where a part lands is its own uniform (Chromium compiles each pipeline separately).
#[test]
fn split_matrices_compile_one_pipeline_per_kernel() {
    let c = ctx();
    for rowwise_gemm in [false, true] {
        let tuning = Tuning {
            gemv_tpr: 4,
            subgroup_size: 0,
            rowwise_gemm,
        };
        let k = Kernels::with_tuning(&c.gpu, tuning);
        let q6k = Ggml(GgmlType::Q6K);
        // 4 rows a part: 13 parts, the last one short.
        check_on(c, &k, q6k, 49, 256, 1, Some(4 * 210), false);
        assert_eq!(k.pipelines(), 1, "gemv");
        check_on(c, &k, q6k, 49, 256, 9, Some(4 * 210), true);
        assert_eq!(k.pipelines(), 2, "gemm (rowwise: {rowwise_gemm})");
        let k = Kernels::with_tuning(&c.gpu, tuning);
        check_norm_gemv(&k, q6k, 49, 256, None, false, Some(4 * 210));
        assert_eq!(k.pipelines(), 1, "norm gemv");
    }
}

/// The subgroup GEMV, on adapters with subgroups of a fixed size (lavapipe has them:
/// `scripts/test` sets PIPPIN_REQUIRE_SUBGROUPS=1, so CI can never skip this).
#[test]
fn gemv_with_subgroups_on_fixed_size_subgroup_adapters() {
    let c = ctx_all();
    let sg = c.gpu.adapter.subgroup_size;
    if sg == 0 {
        assert!(!c.gpu.caps.subgroups, "subgroups are on without a size");
        assert!(
            std::env::var_os("PIPPIN_REQUIRE_SUBGROUPS").is_none(),
            "PIPPIN_REQUIRE_SUBGROUPS is set but {} has no fixed-size subgroups",
            c.gpu.adapter.name
        );
        eprintln!(
            "SKIPPED gemv_with_subgroups: {} has no fixed-size subgroups",
            c.gpu.adapter.name
        );
        return;
    }
    // Forced on: the default tuning leaves it off on software adapters, where it is slower.
    let k = Kernels::with_tuning(
        &c.gpu,
        Tuning {
            gemv_tpr: 4,
            subgroup_size: sg,
            rowwise_gemm: false,
        },
    );
    for ty in kinds() {
        for (rows, cols) in [(1, 32), (37, 96), (129, 576), (300, 1536)] {
            check_on(c, &k, ty, rows, cols, 1, None, false);
        }
        check_on(c, &k, ty, 45, 64, 1, Some(10 * 64), true);
    }
}

#[test]
fn gemm_every_format_awkward_shapes() {
    for ty in kinds() {
        for (rows, cols, t) in [(1, 32, 2), (37, 96, 5), (130, 160, 17), (65, 64, 33)] {
            check(ty, rows, cols, t, None, false);
        }
    }
}

#[test]
fn accumulate_fuses_the_residual_add() {
    check(Ggml(GgmlType::Q4_1), 70, 96, 1, None, true);
    check(Ggml(GgmlType::Q8_0), 70, 96, 3, None, true);
    check(Palette(2, 16), 70, 96, 3, None, true);
}

#[test]
fn matrices_split_across_bindings() {
    // Parts of ~10 rows: the split that tensors over maxStorageBufferBindingSize get.
    let quantized = GgmlType::ALL
        .iter()
        .copied()
        .filter(|t| t.can_dequantize() && t.block().0 > 1);
    for ty in quantized
        .map(Ggml)
        .chain([Palette(4, 5), Palette(2, 3), Palette(2, 1)])
    {
        // Parts of ~10 rows of 64 values (~4 for the 256-wide K-quant rows).
        check(ty, 45, 64, 1, Some(10 * 64), false);
        check(ty, 45, 64, 19, Some(10 * 64), false);
    }
}

#[test]
fn strided_output_lands_at_the_offset() {
    // Two matrices writing into one fused [t][a + b] buffer, as q/k/v do.
    let c = ctx();
    let (a, b, cols, t) = (40, 24, 64, 3);
    let wa = values(a * cols, 1);
    let wb = values(b * cols, 2);
    let ma = GpuMatrix::upload(&c.gpu, "a", GgmlType::F32, &encode::f32s(&wa), a, cols).unwrap();
    let mb = GpuMatrix::upload(&c.gpu, "b", GgmlType::F32, &encode::f32s(&wb), b, cols).unwrap();
    let x = values(t * cols, 3);
    let (xb, yb) = (c.buf(&x), c.zeros(t * (a + b)));
    let step = c.step(t, 0);
    c.run(&step, |pass| {
        let io = |off| Io {
            y_offset: off,
            ..Io::new((&xb, cols), (&yb, a + b))
        };
        matmul::gemm(pass, false, &ma, &io(0), t).unwrap();
        matmul::gemm(pass, false, &mb, &io(a), t).unwrap();
    });
    let got = c.read(&yb, t * (a + b));
    let (ya, yb_) = (
        reference::matmul(&x, &wa, cols),
        reference::matmul(&x, &wb, cols),
    );
    for ti in 0..t {
        let row = &got[ti * (a + b)..][..a + b];
        assert!(max_diff(&row[..a], &ya[ti * a..][..a]) < 1e-4);
        assert!(max_diff(&row[a..], &yb_[ti * b..][..b]) < 1e-4);
    }
}

#[test]
fn embedding_gather_every_format_and_split() {
    let c = ctx();
    let vocab = 51;
    let tokens = [0u32, 50, 7, 7, 23, 49];
    for ty in kinds() {
        let hidden = block_cols(ty, 96);
        let table = values(vocab * hidden, 5);
        for (split, scale) in [(None, 1.0), (Some(12 * 96 * 4), 25.3)] {
            let (packed, deq) = packed_as(ty, &table, vocab, hidden);
            let m = GpuMatrix::from_packed_split(
                &c.gpu,
                "e",
                packed,
                vocab,
                hidden,
                split.unwrap_or(u64::MAX),
            )
            .unwrap();
            let tb = c.gpu.upload_u32("tokens", &tokens).unwrap();
            let out = c.zeros(tokens.len() * hidden);
            let step = c.step(tokens.len(), 0);
            c.run(&step, |pass| {
                matmul::embed(pass, &m, &tb, &out, tokens.len(), scale).unwrap()
            });
            let got = c.read(&out, tokens.len() * hidden);
            let want: Vec<f32> = reference::embed(&deq, hidden, vocab, &tokens)
                .unwrap()
                .iter()
                .map(|v| v * scale)
                .collect();
            // Exact without a scale; one rounding of the product with one.
            let scale_of = want.iter().fold(1f32, |m, v| m.max(v.abs()));
            let tol = if scale == 1.0 { 0.0 } else { 2e-7 * scale_of };
            pippin::testing::assert_close(&format!("{ty:?} split {split:?}"), &got, &want, tol);
        }
    }
}

#[test]
fn naive_gemv_baseline_matches() {
    let c = ctx();
    for ty in [
        Ggml(GgmlType::Q4_1),
        Ggml(GgmlType::Q8_0),
        Ggml(GgmlType::F16),
        Ggml(GgmlType::Q6K),
        Palette(4, 16),
    ] {
        let (rows, cols) = (77, block_cols(ty, 96));
        let w = values(rows * cols, 3);
        let (packed, deq) = packed_as(ty, &w, rows, cols);
        let m = GpuMatrix::from_packed(&c.gpu, "w", packed, rows, cols).unwrap();
        let x = values(cols, 4);
        let (xb, yb, step) = (c.buf(&x), c.zeros(rows), c.step(1, 0));
        c.run(&step, |pass| matmul::naive(pass, &m, &xb, &yb).unwrap());
        let want = reference::matmul(&x, &deq, cols);
        assert!(max_diff(&c.read(&yb, rows), &want) < 1e-4, "{ty:?}");
    }
}

/// y (+)= W·rmsnorm(x) in one dispatch (`norm_matmul_gemv.wgsl`), and with a `glu`
/// act(gate)·up of a [gate; up] matrix of 2·`rows` rows; rmsnorm(x) written out too.
#[allow(clippy::too_many_arguments)]
fn check_norm_gemv(
    kernels: &Kernels,
    ty: Kind,
    rows: usize,
    cols: usize,
    glu: Option<Activation>,
    accumulate: bool,
    split_bytes: Option<u64>,
) {
    let c = ctx();
    let cols = block_cols(ty, cols);
    let w_rows = if glu.is_some() { 2 * rows } else { rows };
    let w = values(w_rows * cols, (rows * 17 + cols) as u64);
    let (packed, wq) = packed_as(ty, &w, w_rows, cols);
    let m = match split_bytes {
        Some(b) => GpuMatrix::from_packed_split(&c.gpu, "w", packed, w_rows, cols, b).unwrap(),
        None => GpuMatrix::from_packed(&c.gpu, "w", packed, w_rows, cols).unwrap(),
    };
    let what = format!("{ty:?}");
    let m = (&m, &wq[..]);
    block_on(matmul_case::norm_product(
        c, kernels, m, glu, accumulate, &what,
    ));
}

#[test]
fn norm_folded_into_gemv_every_format() {
    let c = ctx();
    let wide = Kernels::with_tuning(&c.gpu, Tuning::gpu(0));
    for ty in kinds() {
        for (i, (rows, cols)) in [(1, 32), (37, 96), (129, 576), (300, 64)]
            .into_iter()
            .enumerate()
        {
            check_norm_gemv(&c.k, ty, rows, cols, None, i % 2 == 1, None);
        }
        check_norm_gemv(&wide, ty, 129, 576, None, false, None);
        check_norm_gemv(&c.k, ty, 45, 64, None, false, Some(10 * 64));
    }
}

/// Rows wider than the 3,072 values the GEMVs stage in workgroup memory read x from
/// the buffer instead.
#[test]
fn gemvs_over_rows_wider_than_the_stage() {
    let c = ctx();
    for ty in [Ggml(GgmlType::Q4_1), Ggml(GgmlType::Q4K), Palette(4, 16)] {
        check(ty, 40, 4096, 1, None, true);
        check_norm_gemv(&c.k, ty, 40, 4096, None, false, None);
        check_norm_gemv(&c.k, ty, 9, 3104, Some(Activation::Silu), false, None);
    }
}

#[test]
fn norm_gemv_with_the_gated_epilogue() {
    let c = ctx();
    let wide = Kernels::with_tuning(&c.gpu, Tuning::gpu(0));
    for ty in kinds() {
        for act in [Activation::Silu, Activation::GeluTanh] {
            check_norm_gemv(&c.k, ty, 7, 96, Some(act), false, None);
            check_norm_gemv(&wide, ty, 130, 64, Some(act), false, None);
        }
    }
}

/// Q, K and V (or gate and up) stacked into one matrix at load: one GEMV and one GEMM
/// give what the three give apart; mismatched formats and rows that end inside a word
/// of scales or a table stay apart.
#[test]
fn stacked_matrices_equal_their_parts() {
    let c = ctx();
    for ty in kinds() {
        // Rows of 3 blocks (K-quants: 1 super-block); [80, 80, 48] ends every matrix
        // on a word of scales and a table; 33 rows of 3 blocks end mid-word of half
        // scales and mid-table.
        let cols = block_cols(ty, 96);
        let half = matches!(
            ty,
            Ggml(GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Iq4Nl)
        );
        let table = matches!(ty, Palette(_, lut) if lut > 1);
        for (rows, expect_one) in [([80, 80, 48], true), ([64, 33, 32], !(half || table))] {
            check_stacked(c, ty, cols, rows, expect_one);
        }
    }
    // Different formats stay apart.
    let w = values(32 * 64, 1);
    let a = GpuMatrix::upload(&c.gpu, "a", GgmlType::F32, &encode::f32s(&w), 32, 64).unwrap();
    let b = GpuMatrix::upload(&c.gpu, "b", GgmlType::Q8_0, &encode::q8_0(&w), 32, 64).unwrap();
    assert!(matches!(
        Stacked::stack(&c.gpu, "mixed", vec![a, b]).unwrap(),
        Stacked::Apart(_)
    ));
}

fn check_stacked(c: &Ctx, ty: Kind, cols: usize, rows: [usize; 3], expect_one: bool) {
    let mut mats = vec![];
    let mut wq = vec![];
    for (i, &r) in rows.iter().enumerate() {
        let w = values(r * cols, 40 + i as u64);
        let (packed, deq) = packed_as(ty, &w, r, cols);
        mats.push(GpuMatrix::from_packed(&c.gpu, "w", packed, r, cols).unwrap());
        wq.extend(deq);
    }
    let s = Stacked::stack(&c.gpu, "stacked", mats).unwrap();
    assert_eq!(matches!(s, Stacked::One(_)), expect_one, "{ty:?} {rows:?}");
    let total: usize = rows.iter().sum();
    for t in [1, 5] {
        let x = values(t * cols, 41);
        let (xb, yb) = (c.buf(&x), c.zeros(t * total));
        let step = c.step(t, 0);
        c.run(&step, |pass| {
            for (m, off) in s.mats() {
                let io = Io {
                    y_offset: off,
                    ..Io::new((&xb, cols), (&yb, total))
                };
                matmul::matmul(pass, m, &io, t).unwrap();
            }
        });
        let want = reference::matmul(&x, &wq, cols);
        let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
        let d = max_diff(&c.read(&yb, t * total), &want);
        assert!(d <= 2e-5 * scale * 16.0, "{ty:?} {rows:?} t {t}: {d}");
    }
}

/// Reads every part of `m` back: (row0, rows, qs words, scale words).
fn words(gpu: &pippin::gpu::Gpu, m: &GpuMatrix) -> Vec<(usize, usize, Vec<u8>, Vec<u8>)> {
    m.parts
        .iter()
        .map(|p| {
            let read = |b: &wgpu::Buffer| pollster::block_on(gpu.read(b, 0, b.size())).unwrap();
            (p.row0, p.rows, read(&p.qs), read(&p.scales))
        })
        .collect()
}

/// Every format, odd row counts, parts of a few rows, slices of two to a few rows:
/// written slice by slice equals packed and uploaded whole.
#[test]
fn a_matrix_written_in_slices_equals_one_uploaded_whole() {
    let gpu = &ctx().gpu;
    let types = GgmlType::ALL.iter().copied().filter(|t| t.can_dequantize());
    for (i, ty) in types.enumerate() {
        let cols = if ty.block().0 == 256 { 512 } else { 96 };
        let row_bytes = ty.bytes_for(cols as u64).unwrap() as usize;
        // Words of values per row, from two rows packed: parts of 3 rows' worth hold 2.
        let two = pack(ty, &vec![0; 2 * row_bytes], 2 * cols).unwrap();
        let small = (3 * two.qs.len() / 2 * 4) as u64;
        for (rows, max_bytes, slice) in [
            (7, 1 << 20, 1),
            (13, small, 3),
            (31, small, 1),
            (30, 1 << 20, 1 << 20),
        ] {
            let data = encode::random_blocks(ty, rows * cols, 11 + i as u64);
            let whole = pack(ty, &data, rows * cols).unwrap();
            let want =
                GpuMatrix::from_packed_split(gpu, "w", whole, rows, cols, max_bytes).unwrap();
            let mut w = GpuMatrix::writer(gpu, "w", ty, (rows, cols), max_bytes).unwrap();
            while let Some(r) = w.next_rows(slice * row_bytes) {
                let bytes = &data[r.start * row_bytes..r.end * row_bytes];
                w.write(gpu, r, bytes).unwrap();
            }
            let got = w.finish().unwrap();
            let what =
                format!("{ty} {rows}×{cols}, parts of {max_bytes} bytes, slices of {slice} rows");
            assert_eq!(got.format, want.format, "{what}");
            assert_eq!(words(gpu, &got), words(gpu, &want), "{what}");
        }
    }
}

#[test]
fn slices_out_of_order_or_missing_are_errors() {
    let gpu = &ctx().gpu;
    let (rows, cols) = (6, 64);
    let row_bytes = GgmlType::Q8_0.bytes_for(cols as u64).unwrap() as usize;
    let data = encode::random_blocks(GgmlType::Q8_0, rows * cols, 5);
    let mut w = GpuMatrix::writer(gpu, "w", GgmlType::Q8_0, (rows, cols), 1 << 20).unwrap();
    assert!(w
        .write(gpu, 2..4, &data[2 * row_bytes..4 * row_bytes])
        .is_err());
    w.write(gpu, 0..2, &data[..2 * row_bytes]).unwrap();
    assert!(
        w.write(gpu, 2..3, &data[2 * row_bytes..3 * row_bytes])
            .is_err(),
        "an odd slice inside a part"
    );
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 2..0;
    assert!(
        w.write(gpu, backwards, &[]).is_err(),
        "an empty, reversed range"
    );
    assert!(w.finish().is_err(), "rows 2..6 were never written");
}

/// A launch given a buffer smaller than its shapes reach fails when it is recorded,
/// naming the kernel and the binding, and records nothing: the GPU never reads or
/// writes past the buffer, and what was bound stays usable.
#[test]
fn buffers_too_small_for_the_shapes_are_refused_by_name() {
    let c = ctx();
    let (rows, cols) = (37, 96);
    let w = values(rows * cols, 7);
    let (packed, _) = packed_as(Ggml(GgmlType::Q8_0), &w, rows, cols);
    let m = GpuMatrix::from_packed(&c.gpu, "w", packed, rows, cols).unwrap();
    let (x, step) = (c.buf(&values(2 * cols, 8)), c.step(2, 0));
    let record = |y: &wgpu::Buffer, n: usize| {
        let mut out = None;
        c.run(&step, |p| {
            out = Some(matmul::matmul(p, &m, &Io::new((&x, cols), (y, rows)), n))
        });
        out.unwrap()
    };
    let short = c.zeros(rows - 1);
    let e = record(&short, 1).unwrap_err().to_string();
    assert!(e.contains("MatmulGemv") && e.contains("(y)"), "{e}");
    assert!(e.contains(&format!("holds {}", short.size())), "{e}");
    // One token fits where two do not: the reach follows the token count.
    let one = c.zeros(rows);
    record(&one, 1).unwrap();
    let e = record(&one, 2).unwrap_err().to_string();
    assert!(
        e.contains("(y)") && e.contains(&format!("reach {}", 4 * (rows + rows))),
        "{e}"
    );
    // x too short for the second token's row.
    let (x1, y2) = (c.buf(&values(cols, 9)), c.zeros(2 * rows));
    let mut out = None;
    c.run(&step, |p| {
        let io = Io::new((&x1, cols), (&y2, rows));
        out = Some(matmul::matmul(p, &m, &io, 2));
    });
    let e = out.unwrap().unwrap_err().to_string();
    assert!(e.contains("(x)"), "{e}");
}
