//! `row · x` for a row of GGML blocks of 32 weights and one token's activations
//! quantized to 16 bits (`Acts`): integer products summed per block, scaled in f32
//! (llama.cpp's `vec_dot_*_q8` with 16-bit activations). Plain loops: natively LLVM
//! vectorizes them; they are the reference `simd::blocks` is tested against.

use crate::ggml::{le_f16, IQ4_NL_LEVELS};
use crate::Acts;

/// Σ over the row's blocks of `block(bytes, its 32 activations, d, s)`.
#[inline(always)]
fn row_dot(
    row: &[u8],
    bytes: usize,
    x: Acts,
    block: impl Fn(&[u8], &[i16], f32, f32) -> f32,
) -> f32 {
    let mut sum = 0f32;
    for (i, b) in row.chunks_exact(bytes).enumerate() {
        sum += block(b, &x.q[i * 32..][..32], x.d[i], x.s[i]);
    }
    sum
}

/// Q4_0: w = d·(q − 8).
pub fn q4_0(row: &[u8], x: Acts) -> f32 {
    row_dot(row, 18, x, |b, xq, dx, sx| {
        le_f16(b) * (dx * nibbles(&b[2..18], xq) as f32 - 8.0 * sx)
    })
}

/// Q4_1: w = d·q + m.
pub fn q4_1(row: &[u8], x: Acts) -> f32 {
    row_dot(row, 20, x, |b, xq, dx, sx| {
        le_f16(b) * dx * nibbles(&b[4..20], xq) as f32 + le_f16(&b[2..]) * sx
    })
}

/// Q5_0: w = d·(q − 16), q's fifth bit from `qh`.
pub fn q5_0(row: &[u8], x: Acts) -> f32 {
    row_dot(row, 22, x, |b, xq, dx, sx| {
        le_f16(b) * (dx * fives(&b[2..6], &b[6..22], xq) as f32 - 16.0 * sx)
    })
}

/// Q5_1: w = d·q + m, q's fifth bit from `qh`.
pub fn q5_1(row: &[u8], x: Acts) -> f32 {
    row_dot(row, 24, x, |b, xq, dx, sx| {
        le_f16(b) * dx * fives(&b[4..8], &b[8..24], xq) as f32 + le_f16(&b[2..]) * sx
    })
}

/// Q8_0: w = d·q.
pub fn q8_0(row: &[u8], x: Acts) -> f32 {
    row_dot(row, 34, x, |b, xq, dx, _| {
        let w = b[2..34].iter().zip(xq);
        le_f16(b) * dx * w.map(|(&w, &x)| w as i8 as i32 * x as i32).sum::<i32>() as f32
    })
}

/// IQ4_NL: w = d·levels[q].
pub fn iq4_nl(row: &[u8], x: Acts) -> f32 {
    row_dot(row, 18, x, |b, xq, dx, _| {
        le_f16(b) * dx * levels(&b[2..18], xq) as f32
    })
}

/// Σ nibble·x: low nibbles are values 0..16, high ones 16..32. Never inlined: LLVM
/// vectorizes it alone, and inlined into `row_dot`'s loop it did not (natively, Q4_1
/// decode went from 56 to 21 tokens/s when another change to this crate tipped the
/// inliner). The same for `fives` and `levels`.
#[inline(never)]
fn nibbles(qs: &[u8], x: &[i16]) -> i32 {
    let (x0, x1) = x.split_at(16);
    qs.iter()
        .zip(x0.iter().zip(x1))
        .map(|(&q, (&a, &b))| (q & 15) as i32 * a as i32 + (q >> 4) as i32 * b as i32)
        .sum()
}

/// Σ 5-bit value·x: the nibbles plus bit e of `qh` for value e.
#[inline(never)]
fn fives(qh: &[u8], qs: &[u8], x: &[i16]) -> i32 {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut s = 0;
    for (j, &q) in qs.iter().enumerate() {
        let lo = (q & 15) as u32 | ((h >> j) & 1) << 4;
        let hi = (q >> 4) as u32 | ((h >> (j + 16)) & 1) << 4;
        s += lo as i32 * x[j] as i32 + hi as i32 * x[j + 16] as i32;
    }
    s
}

/// Σ level(nibble)·x for IQ4_NL.
#[inline(never)]
fn levels(qs: &[u8], x: &[i16]) -> i32 {
    let l = &IQ4_NL_LEVELS;
    let (x0, x1) = x.split_at(16);
    qs.iter()
        .zip(x0.iter().zip(x1))
        .map(|(&q, (&a, &b))| {
            l[(q & 15) as usize] as i32 * a as i32 + l[(q >> 4) as usize] as i32 * b as i32
        })
        .sum()
}
