//! f32 and int8 products in plain loops (all targets: natively LLVM vectorizes them;
//! the reference of `simd::f32` and `simd::int8`).

/// `Σ a·b` with eight independent sums, so the compiler can vectorize it.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += a·x`.
#[inline]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(v, b)| *v += a * b);
}

/// `Σ a·b` for f32 `a` and int8 `b`.
#[inline]
pub fn dot8(a: &[f32], b: &[i8]) -> f32 {
    a.iter().zip(b).map(|(x, &y)| x * y as f32).sum()
}

/// `y += w·x` for int8 `x`.
#[inline]
pub fn axpy8(y: &mut [f32], w: f32, x: &[i8]) {
    y.iter_mut().zip(x).for_each(|(a, &b)| *a += w * b as f32);
}
