//! The f32 loops of the forward pass: dot products and `y += a·x`.

use core::arch::wasm32::*;

fn sum4(v: v128) -> f32 {
    f32x4_extract_lane::<0>(v)
        + f32x4_extract_lane::<1>(v)
        + f32x4_extract_lane::<2>(v)
        + f32x4_extract_lane::<3>(v)
}

/// `a · b` over the shorter length, eight lanes at a time.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (mut acc0, mut acc1) = (f32x4_splat(0.0), f32x4_splat(0.0));
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, both slices hold at least n values.
        unsafe {
            let pa = a.as_ptr().add(i) as *const v128;
            let pb = b.as_ptr().add(i) as *const v128;
            acc0 = f32x4_add(acc0, f32x4_mul(v128_load(pa), v128_load(pb)));
            acc1 = f32x4_add(acc1, f32x4_mul(v128_load(pa.add(1)), v128_load(pb.add(1))));
        }
        i += 8;
    }
    let tail: f32 = a[i..n].iter().zip(&b[i..n]).map(|(x, y)| x * y).sum();
    sum4(f32x4_add(acc0, acc1)) + tail
}

/// `y += a·x` over the shorter length.
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    let av = f32x4_splat(a);
    let mut i = 0;
    while i + 4 <= n {
        // SAFETY: i + 4 <= n, both slices hold at least n values.
        unsafe {
            let py = y.as_mut_ptr().add(i) as *mut v128;
            let px = x.as_ptr().add(i) as *const v128;
            v128_store(py, f32x4_add(v128_load(py), f32x4_mul(av, v128_load(px))));
        }
        i += 4;
    }
    y[i..n]
        .iter_mut()
        .zip(&x[i..n])
        .for_each(|(v, b)| *v += a * b);
}
