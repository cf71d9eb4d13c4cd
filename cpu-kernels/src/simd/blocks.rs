//! Dot products of quantized weight rows (blocks of 32) with activations quantized
//! to 16 bits per block: `i32x4.dot_i16x8_s` on four i16x8 lanes per block, summed
//! in f32 with the block scales (each `Block32::dot` is the plain-loop reference; the
//! engine's `engine::cpu::dot` says why 16 bits).

use crate::blocks32::Format;
use crate::{Acts, Lanes};
use core::arch::wasm32::*;
use std::sync::OnceLock;

/// Every f16 as f32 (256 KB, built on first use): a block's scales are one load
/// each instead of a software conversion (wasm has no f16 instructions).
pub type Halves = [f32; 65536];

pub fn halves() -> &'static Halves {
    static TABLE: OnceLock<Box<Halves>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([0f32; 65536]);
        for (h, v) in t.iter_mut().enumerate() {
            *v = half::f16::from_bits(h as u16).to_f32();
        }
        t
    })
}

#[inline(always)]
pub fn f16_at(h: &Halves, b: &[u8], i: usize) -> f32 {
    h[u16::from_le_bytes([b[i], b[i + 1]]) as usize]
}

/// Bit e of the 32-bit `qh` at `b[at..]` as 16 in byte e of two i8x16 (values 0..16
/// and 16..32): each byte of qh is copied to eight lanes, each lane keeps its own bit.
#[inline(always)]
pub fn fifth_bits(b: &[u8], at: usize) -> (v128, v128) {
    let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let v = u32x4_splat(qh);
    let bits = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    let spread = |lo: u8, hi: u8| {
        let sel = u8x16(
            lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi,
        );
        let set = i8x16_ne(v128_and(i8x16_swizzle(v, sel), bits), u8x16_splat(0));
        v128_and(set, u8x16_splat(16))
    };
    (spread(0, 1), spread(2, 3))
}

/// The 16 bytes of block `b` from `at`, unchecked: the `Block32::lanes` of each
/// format loads at constant offsets inside its whole blocks.
///
/// # Safety
/// `at + 16 <= b.len()`.
#[inline(always)]
pub unsafe fn load(b: &[u8], at: usize) -> v128 {
    debug_assert!(at + 16 <= b.len());
    v128_load(b.as_ptr().add(at) as *const v128)
}

/// 16 bytes of nibbles (byte j: value j low, j + 16 high) as four u16x8.
#[inline(always)]
pub fn nibbles(qs: v128) -> [v128; 4] {
    let (lo, hi) = (v128_and(qs, u8x16_splat(15)), u8x16_shr(qs, 4));
    widen_u(lo, hi)
}

/// Nibbles as `nibbles`, each with its fifth bit (`fifth_bits`) as four u16x8.
#[inline(always)]
pub fn fives(qs: v128, (h0, h1): (v128, v128)) -> [v128; 4] {
    let (lo, hi) = (v128_and(qs, u8x16_splat(15)), u8x16_shr(qs, 4));
    widen_u(v128_or(lo, h0), v128_or(hi, h1))
}

fn widen_u(lo: v128, hi: v128) -> [v128; 4] {
    [
        u16x8_extend_low_u8x16(lo),
        u16x8_extend_high_u8x16(lo),
        u16x8_extend_low_u8x16(hi),
        u16x8_extend_high_u8x16(hi),
    ]
}

/// 32 signed bytes (values 0..16 in `a`, 16..32 in `b`) as four i16x8.
#[inline(always)]
pub fn signed(a: v128, b: v128) -> [v128; 4] {
    [
        i16x8_extend_low_i8x16(a),
        i16x8_extend_high_i8x16(a),
        i16x8_extend_low_i8x16(b),
        i16x8_extend_high_i8x16(b),
    ]
}

/// 16 bytes of nibbles as `nibbles`, each an index into the 16 signed `levels`.
#[inline(always)]
pub fn levels(qs: v128, levels: &[i8; 16]) -> [v128; 4] {
    // SAFETY: the table is 16 bytes.
    let lut = unsafe { v128_load(levels.as_ptr() as *const v128) };
    let lo = i8x16_swizzle(lut, v128_and(qs, u8x16_splat(15)));
    let hi = i8x16_swizzle(lut, u8x16_shr(qs, 4));
    signed(lo, hi)
}

/// The 32 activations of `q` from `at` as four i16x8.
#[inline(always)]
pub(crate) fn acts(q: &[i16], at: usize) -> [v128; 4] {
    let x = &q[at..at + 32];
    // SAFETY: `x` holds 32 i16: four 16-byte loads.
    unsafe {
        let p = x.as_ptr() as *const v128;
        [
            v128_load(p),
            v128_load(p.add(1)),
            v128_load(p.add(2)),
            v128_load(p.add(3)),
        ]
    }
}

/// Σ w·x over a block, as four i32 partial sums.
#[inline(always)]
fn block_dot(w: &[v128; 4], x: &[v128; 4]) -> v128 {
    i32x4_add(
        i32x4_add(i32x4_dot_i16x8(w[0], x[0]), i32x4_dot_i16x8(w[1], x[1])),
        i32x4_add(i32x4_dot_i16x8(w[2], x[2]), i32x4_dot_i16x8(w[3], x[3])),
    )
}

/// `row · x` for a row of `f` blocks (of 32) and one token's activations. One loop
/// for every format, `f`'s unpacking chosen per block (`Format::lanes`): a copy per
/// format was ~9 KB more of the package's wasm.
pub fn dot(f: Format, row: &[u8], x: Acts) -> f32 {
    let (bytes, h) = (f.block().1, halves());
    let mut acc = f32x4_splat(0.0);
    let mut extra = 0f32;
    for (i, b) in row.chunks_exact(bytes).enumerate() {
        let (w, d, c) = f.lanes(h, b);
        let sumi = block_dot(&w, &acts(x.q, i * 32));
        acc = f32x4_add(
            acc,
            f32x4_mul(f32x4_convert_i32x4(sumi), f32x4_splat(d * x.d[i])),
        );
        extra += c * x.s[i];
    }
    sum4(acc) + extra
}

/// `row · x_t` into `out[t]` for the first `out.len()` tokens of `x` (rows of `cols`;
/// `l` its scales and sums by fours), four tokens at a time: each weight block is unpacked once
/// per four, and the four tokens' float work is one vector op — the block's four
/// partial integer sums of each token transposed so that lane j holds token j's, then
/// converted, scaled and added as `dot` does lane by lane. Each token's sum is `dot`'s,
/// bit for bit (the same f32 operations in the same order; speculative decoding
/// relies on it). A check or a prefill: one token's float work had been ~40% of its
/// share of a block.
pub fn dots(f: Format, row: &[u8], x: Acts, l: Lanes, cols: usize, out: &mut [f32]) {
    let (bytes, nb, h) = (f.block().1, cols / 32, halves());
    assert!(
        l.d.len() >= out.len().div_ceil(4) * nb * 4 && l.s.len() == l.d.len(),
        "dots needs the activations' scales by groups of four tokens"
    );
    for (g, outs) in out.chunks_mut(4).enumerate() {
        let t0 = g * 4;
        if outs.len() <= 2 {
            // A group's float work costs about two tokens' of `dot`: fewer go alone.
            for (j, o) in outs.iter_mut().enumerate() {
                *o = dot(f, row, x.token(t0 + j, cols));
            }
            continue;
        }
        // acc[l] lane j: lane l of `dot`'s accumulator for token t0 + j.
        let mut acc = [f32x4_splat(0.0); 4];
        let mut extra = f32x4_splat(0.0);
        for (i, b) in row.chunks_exact(bytes).enumerate() {
            let (w, d, c) = f.lanes(h, b);
            let mut s = [i32x4_splat(0); 4];
            for (j, sj) in s.iter_mut().enumerate().take(outs.len()) {
                *sj = block_dot(&w, &acts(x.q, (t0 + j) * cols + i * 32));
            }
            let at = (g * nb + i) * 4;
            // SAFETY: `at + 4 <= l.d.len() == l.s.len()` (asserted above).
            let (xd, xs) = unsafe {
                (
                    v128_load(l.d.as_ptr().add(at) as *const v128),
                    v128_load(l.s.as_ptr().add(at) as *const v128),
                )
            };
            let scale = f32x4_mul(f32x4_splat(d), xd);
            for (a, v) in acc.iter_mut().zip(transpose(s)) {
                *a = f32x4_add(*a, f32x4_mul(f32x4_convert_i32x4(v), scale));
            }
            extra = f32x4_add(extra, f32x4_mul(f32x4_splat(c), xs));
        }
        let sum = f32x4_add(f32x4_add(f32x4_add(acc[0], acc[1]), acc[2]), acc[3]);
        let r = f32x4_add(sum, extra);
        let r = [
            f32x4_extract_lane::<0>(r),
            f32x4_extract_lane::<1>(r),
            f32x4_extract_lane::<2>(r),
            f32x4_extract_lane::<3>(r),
        ];
        outs.copy_from_slice(&r[..outs.len()]);
    }
}

/// Rows of four i32x4 as columns: lane j of result l is lane l of `s[j]`.
#[inline(always)]
fn transpose(s: [v128; 4]) -> [v128; 4] {
    let a = i32x4_shuffle::<0, 4, 1, 5>(s[0], s[1]); // s0l0 s1l0 s0l1 s1l1
    let b = i32x4_shuffle::<2, 6, 3, 7>(s[0], s[1]); // s0l2 s1l2 s0l3 s1l3
    let c = i32x4_shuffle::<0, 4, 1, 5>(s[2], s[3]);
    let d = i32x4_shuffle::<2, 6, 3, 7>(s[2], s[3]);
    [
        i32x4_shuffle::<0, 1, 4, 5>(a, c),
        i32x4_shuffle::<2, 3, 6, 7>(a, c),
        i32x4_shuffle::<0, 1, 4, 5>(b, d),
        i32x4_shuffle::<2, 3, 6, 7>(b, d),
    ]
}

fn sum4(v: v128) -> f32 {
    f32x4_extract_lane::<0>(v)
        + f32x4_extract_lane::<1>(v)
        + f32x4_extract_lane::<2>(v)
        + f32x4_extract_lane::<3>(v)
}
