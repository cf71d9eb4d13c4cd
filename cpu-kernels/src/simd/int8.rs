//! Attention over an int8 KV cache: dot products with, and sums of, int8 rows.

use core::arch::wasm32::*;

/// Eight int8 values at `p` as two f32x4.
///
/// # Safety
/// `p` must point to eight readable bytes.
#[inline(always)]
unsafe fn widen(p: *const i8) -> (v128, v128) {
    let w = i16x8_extend_low_i8x16(v128_load64_zero(p as *const u64));
    (
        f32x4_convert_i32x4(i32x4_extend_low_i16x8(w)),
        f32x4_convert_i32x4(i32x4_extend_high_i16x8(w)),
    )
}

/// `Σ a·b` over the shorter length, eight values at a time.
pub fn dot8(a: &[f32], b: &[i8]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = f32x4_splat(0.0);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n: eight values of each slice.
        unsafe {
            let (lo, hi) = widen(b.as_ptr().add(i));
            let pa = a.as_ptr().add(i) as *const v128;
            let s = f32x4_add(
                f32x4_mul(v128_load(pa), lo),
                f32x4_mul(v128_load(pa.add(1)), hi),
            );
            acc = f32x4_add(acc, s);
        }
        i += 8;
    }
    let tail: f32 = a[i..n]
        .iter()
        .zip(&b[i..n])
        .map(|(x, &y)| x * y as f32)
        .sum();
    f32x4_extract_lane::<0>(acc)
        + f32x4_extract_lane::<1>(acc)
        + f32x4_extract_lane::<2>(acc)
        + f32x4_extract_lane::<3>(acc)
        + tail
}

/// `y += w·x` over the shorter length.
pub fn axpy8(y: &mut [f32], w: f32, x: &[i8]) {
    let n = y.len().min(x.len());
    let wv = f32x4_splat(w);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n: eight values of each slice.
        unsafe {
            let (lo, hi) = widen(x.as_ptr().add(i));
            let py = y.as_mut_ptr().add(i) as *mut v128;
            v128_store(py, f32x4_add(v128_load(py), f32x4_mul(wv, lo)));
            v128_store(
                py.add(1),
                f32x4_add(v128_load(py.add(1)), f32x4_mul(wv, hi)),
            );
        }
        i += 8;
    }
    y[i..n]
        .iter_mut()
        .zip(&x[i..n])
        .for_each(|(a, &b)| *a += w * b as f32);
}
