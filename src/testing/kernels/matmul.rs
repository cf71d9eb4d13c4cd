//! y (+)= W·x (`matmul`) and y (+)= W·rmsnorm(x) (`norm_gemv`, optionally with the
//! gated epilogue) for a matrix already on the GPU, against the CPU on the weights as
//! the reference dequantizes them. Each suite makes its matrices its own way.

use super::{values, Ctx};
use crate::kernels::matmul::{self, GpuMatrix, Io, NormIn};
use crate::kernels::Kernels;
use crate::model::reference;
use crate::model::Activation;
use crate::testing::max_abs_diff;

/// The epilogue a case asks of the kernel, (scale, soft-cap): accumulating cases
/// scale the product (Granite's residual multiplier, not 1), the others soft-cap it
/// (Gemma 2's final logits; a cap of 3 bends most of these products).
fn epilogue(accumulate: bool) -> (f32, f32) {
    if accumulate {
        (0.75, 0.0)
    } else {
        (1.0, 3.0)
    }
}

/// `x` (rows of `xs`) times a matrix into `y` (rows of `ys`) with a case's epilogue.
pub fn io_with<'a>(
    accumulate: bool,
    x: (&'a wgpu::Buffer, usize),
    y: (&'a wgpu::Buffer, usize),
) -> Io<'a> {
    let (scale, cap) = epilogue(accumulate);
    Io {
        accumulate,
        scale,
        cap,
        ..Io::new(x, y)
    }
}

/// What the kernel should have written over `y0`, the product being `want`.
fn expected(mut want: Vec<f32>, y0: &[f32], accumulate: bool) -> Vec<f32> {
    let (scale, cap) = epilogue(accumulate);
    for (a, b) in want.iter_mut().zip(y0) {
        let v = reference::softcap(scale * *a, cap);
        *a = if accumulate { v + b } else { v };
    }
    want
}

/// The largest difference `got` may have from `want`: rounding grows with the
/// product's size (the cap shrinks errors, never grows them) and with √cols.
fn tolerance(per: f32, product: &[f32], y0: &[f32], cols: usize) -> f32 {
    let scale = product.iter().chain(y0).fold(1f32, |m, v| m.max(v.abs()));
    per * scale * (cols as f32).sqrt()
}

/// y = W·x for `t` tokens with kernels `k` (accumulating onto random y when
/// `accumulate`), `wq` being W as the CPU reference dequantizes it; `what` names the
/// case in a failure.
pub async fn product(
    c: &Ctx,
    k: &Kernels,
    (m, wq): (&GpuMatrix, &[f32]),
    t: usize,
    accumulate: bool,
    what: &str,
) {
    let (rows, cols) = (m.rows, m.cols);
    let x = values(t * cols, 7);
    let y0 = values(t * rows, 9);
    let (xb, yb) = (c.buf(&x), c.buf(&y0));
    let step = c.step(t, 0);
    c.run_on(k, &step, |pass| {
        let io = io_with(accumulate, (&xb, cols), (&yb, rows));
        matmul::matmul(pass, m, &io, t).expect("matmul");
    });
    let got = c.read(&yb, t * rows).await;
    let product = reference::matmul(&x, wq, cols);
    let tol = tolerance(2e-5, &product, &y0, cols);
    let d = max_abs_diff(&got, &expected(product, &y0, accumulate));
    assert!(d <= tol, "{what} {rows}x{cols} t={t}: max diff {d}");
}

/// y (+)= W·rmsnorm(x) in one dispatch (`norm_matmul_gemv.wgsl`), and with a `glu`
/// act(gate)·up of a [gate; up] matrix `m` of 2·`m.rows / 2` rows; rmsnorm(x) written
/// out too and checked. x is of a residual stream's size (norm ≫ 1), the norm's
/// weights around 1.
pub async fn norm_product(
    c: &Ctx,
    k: &Kernels,
    (m, wq): (&GpuMatrix, &[f32]),
    glu: Option<Activation>,
    accumulate: bool,
    what: &str,
) {
    let cols = m.cols;
    let rows = if glu.is_some() { m.rows / 2 } else { m.rows };
    let x: Vec<f32> = values(cols, 21).iter().map(|v| v * 40.0).collect();
    let g: Vec<f32> = values(cols, 22).iter().map(|v| 1.0 + v * 0.5).collect();
    let y0 = values(rows, 23);
    let (xb, gb, yb, nb) = (c.buf(&x), c.buf(&g), c.buf(&y0), c.zeros(cols));
    let step = c.step(1, 0);
    let eps = 1e-6;
    c.run_on(k, &step, |pass| {
        let io = io_with(accumulate, (&xb, cols), (&yb, rows));
        let norm = NormIn::new(&gb, eps, glu, &nb);
        matmul::norm_gemv(pass, m, &io, &norm, 1).expect("norm_gemv");
    });
    let xn = reference::rmsnorm(&x, &g, eps);
    let dn = max_abs_diff(&c.read(&nb, cols).await, &xn);
    assert!(dn < 1e-4, "{what} normed x: {dn}");
    let full = reference::matmul(&xn, wq, cols);
    let product = match glu {
        Some(act) => reference::glu(act, &full[..rows], &full[rows..]),
        None => full,
    };
    let tol = tolerance(4e-5, &product, &y0, cols);
    let d = max_abs_diff(
        &c.read(&yb, rows).await,
        &expected(product, &y0, accumulate),
    );
    assert!(
        d <= tol,
        "{what} {rows}x{cols} glu {glu:?} accumulate {accumulate}: {d}"
    );
}
