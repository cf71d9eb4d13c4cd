//! Palettized rows times 16-bit activations in SIMD128 (`crate::palette` is the
//! plain-loop reference and says why the levels are integers). Per 32 indices: the
//! indices are put in order in two i8x16, each looked up twice with `i8x16.swizzle`
//! (the levels' low and high bytes), the bytes paired into four i16x8 of levels, and
//! multiplied with the activations by `i32x4.dot_i16x8_s` (8 products a lane: < 2^31, `crate::palette::LEVEL_MAX`).

use crate::palette::Levels;
use crate::Acts;
use core::arch::wasm32::*;

/// The 32 indices from `w` (4 words of 4-bit or 2 words of 2-bit indices) as two
/// i8x16: indices 0..16 and 16..32.
#[inline(always)]
fn indices(bits: u32, w: &[u32]) -> (v128, v128) {
    if bits == 4 {
        let v = u32x4(w[0], w[1], w[2], w[3]);
        // Byte b holds index 2b (low nibble) and 2b + 1 (high nibble).
        let (lo, hi) = (v128_and(v, u8x16_splat(15)), u8x16_shr(v, 4));
        (
            i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(lo, hi),
            i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(lo, hi),
        )
    } else {
        let v = u32x4(w[0], w[1], 0, 0);
        // Byte b holds indices 4b..4b + 4 at bits 0, 2, 4, 6.
        let three = u8x16_splat(3);
        let s = [
            v128_and(v, three),
            v128_and(u8x16_shr(v, 2), three),
            v128_and(u8x16_shr(v, 4), three),
            u8x16_shr(v, 6),
        ];
        // Pairs (4b, 4b + 1) and (4b + 2, 4b + 3) for b < 8, then the pairs in order.
        let a = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(s[0], s[1]);
        let b = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(s[2], s[3]);
        (
            i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(a, b),
            i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(a, b),
        )
    }
}

/// The levels of 16 indices as two i16x8 (`lo`/`hi`: the levels' low and high bytes).
#[inline(always)]
fn look_up(lo: v128, hi: v128, idx: v128) -> (v128, v128) {
    let (l, h) = (i8x16_swizzle(lo, idx), i8x16_swizzle(hi, idx));
    (
        i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(l, h),
        i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(l, h),
    )
}

/// `row · x` for a row of packed `bits`-bit indices (2 or 4) into `lv`, and one
/// token's activations.
pub fn dot(bits: u32, words: &[u32], lv: &Levels, x: Acts) -> f32 {
    // The levels' low bytes in one i8x16 and high bytes in another (lanes are
    // little-endian: level i's low byte is byte 2i of its i16x8).
    let q = lv.q;
    let l0 = i16x8(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]);
    let l1 = i16x8(q[8], q[9], q[10], q[11], q[12], q[13], q[14], q[15]);
    let lo = i8x16_shuffle::<0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30>(l0, l1);
    let hi = i8x16_shuffle::<1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31>(l0, l1);
    let mut acc = f32x4_splat(0.0);
    for (b, w) in words.chunks_exact(bits as usize).enumerate() {
        let (i0, i1) = indices(bits, w);
        let (w0, w1) = look_up(lo, hi, i0);
        let (w2, w3) = look_up(lo, hi, i1);
        let xv = super::blocks::acts(x.q, b * 32);
        let sum = i32x4_add(
            i32x4_add(i32x4_dot_i16x8(w0, xv[0]), i32x4_dot_i16x8(w1, xv[1])),
            i32x4_add(i32x4_dot_i16x8(w2, xv[2]), i32x4_dot_i16x8(w3, xv[3])),
        );
        acc = f32x4_add(
            acc,
            f32x4_mul(f32x4_convert_i32x4(sum), f32x4_splat(x.d[b])),
        );
    }
    let sum = f32x4_extract_lane::<0>(acc)
        + f32x4_extract_lane::<1>(acc)
        + f32x4_extract_lane::<2>(acc)
        + f32x4_extract_lane::<3>(acc);
    sum * lv.scale
}
