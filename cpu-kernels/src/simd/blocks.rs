//! Dot products of quantized weight rows (blocks of 32) with activations quantized
//! to 16 bits per block: `i32x4.dot_i16x8_s` on four i16x8 lanes per block, summed
//! in f32 with the block scales (`crate::dots` is the plain-loop reference; the
//! engine's `engine::cpu::dot` says why 16 bits).

use crate::{Acts, Lanes};
use core::arch::wasm32::*;
use std::sync::OnceLock;

/// A weight block format with a SIMD dot product (32 weights per block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// f16 d, 16 bytes of nibbles: w = d·(q − 8).
    Q4_0,
    /// f16 d, f16 m, 16 bytes of nibbles: w = d·q + m.
    Q4_1,
    /// f16 d, 32 signed bytes: w = d·q.
    Q8_0,
    /// f16 d, 32 bits qh, 16 bytes of nibbles: w = d·(q − 16), bit e of qh q's fifth.
    Q5_0,
    /// f16 d, f16 m, 32 bits qh, 16 bytes of nibbles: w = d·q + m.
    Q5_1,
    /// f16 d, 16 bytes of nibbles indexing the 16 levels: w = d·levels[q].
    Iq4Nl(&'static [i8; 16]),
}

impl Block {
    /// Bytes per block.
    pub fn bytes(self) -> usize {
        match self {
            Block::Q4_0 | Block::Iq4Nl(_) => 18,
            Block::Q4_1 => 20,
            Block::Q8_0 => 34,
            Block::Q5_0 => 22,
            Block::Q5_1 => 24,
        }
    }
}

/// Every f16 as f32 (256 KB, built on first use): a block's scales are one load
/// each instead of a software conversion (wasm has no f16 instructions).
pub(crate) type Halves = [f32; 65536];

pub(crate) fn halves() -> &'static Halves {
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
pub(crate) fn f16_at(h: &Halves, b: &[u8], i: usize) -> f32 {
    h[u16::from_le_bytes([b[i], b[i + 1]]) as usize]
}

/// Bit e of the 32-bit `qh` at `b[at..]` as 16 in byte e of two i8x16 (values 0..16
/// and 16..32): each byte of qh is copied to eight lanes, each lane keeps its own bit.
#[inline(always)]
fn fifth_bits(b: &[u8], at: usize) -> (v128, v128) {
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

/// A block's 32 weights as four i16x8 lanes (values 0..8, 8..16, 16..24, 24..32),
/// its scale d, and the factor of the activations' block sum s in its dot product
/// (Q4_0: −8·d, Q5_0: −16·d, Q4_1 and Q5_1: the minimum m, else 0).
#[inline(always)]
fn unpack(h: &Halves, ty: Block, b: &[u8]) -> ([v128; 4], f32, f32) {
    // SAFETY: every load reads 16 bytes inside the block (`b` is a whole block of
    // `ty`: loads at offsets 2 and 18 of 34 bytes, 2 of 18, 4 of 20, 6 of 22, 8 of
    // 24).
    let load = |at: usize| unsafe { v128_load(b.as_ptr().add(at) as *const v128) };
    let d = f16_at(h, b, 0);
    let fives = |qs: v128, (h0, h1): (v128, v128)| {
        let (lo, hi) = (v128_and(qs, u8x16_splat(15)), u8x16_shr(qs, 4));
        let (lo, hi) = (v128_or(lo, h0), v128_or(hi, h1));
        [
            u16x8_extend_low_u8x16(lo),
            u16x8_extend_high_u8x16(lo),
            u16x8_extend_low_u8x16(hi),
            u16x8_extend_high_u8x16(hi),
        ]
    };
    let nibbles = |qs: v128| {
        let (lo, hi) = (v128_and(qs, u8x16_splat(15)), u8x16_shr(qs, 4));
        [
            u16x8_extend_low_u8x16(lo),
            u16x8_extend_high_u8x16(lo),
            u16x8_extend_low_u8x16(hi),
            u16x8_extend_high_u8x16(hi),
        ]
    };
    let signed = |a: v128, b: v128| {
        [
            i16x8_extend_low_i8x16(a),
            i16x8_extend_high_i8x16(a),
            i16x8_extend_low_i8x16(b),
            i16x8_extend_high_i8x16(b),
        ]
    };
    match ty {
        Block::Q4_0 => (nibbles(load(2)), d, -8.0 * d),
        Block::Q4_1 => (nibbles(load(4)), d, f16_at(h, b, 2)),
        Block::Q8_0 => (signed(load(2), load(18)), d, 0.0),
        Block::Q5_0 => (fives(load(6), fifth_bits(b, 2)), d, -16.0 * d),
        Block::Q5_1 => (fives(load(8), fifth_bits(b, 4)), d, f16_at(h, b, 2)),
        Block::Iq4Nl(levels) => {
            let qs = load(2);
            // SAFETY: the table is 16 bytes.
            let lut = unsafe { v128_load(levels.as_ptr() as *const v128) };
            let lo = i8x16_swizzle(lut, v128_and(qs, u8x16_splat(15)));
            let hi = i8x16_swizzle(lut, u8x16_shr(qs, 4));
            (signed(lo, hi), d, 0.0)
        }
    }
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

/// `row · x` for a row of `ty` blocks and one token's activations.
pub fn dot(ty: Block, row: &[u8], x: Acts) -> f32 {
    let (bytes, h) = (ty.bytes(), halves());
    let mut acc = f32x4_splat(0.0);
    let mut extra = 0f32;
    for (i, b) in row.chunks_exact(bytes).enumerate() {
        let (w, d, c) = unpack(h, ty, b);
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
pub fn dots(ty: Block, row: &[u8], x: Acts, l: Lanes, cols: usize, out: &mut [f32]) {
    let (bytes, nb, h) = (ty.bytes(), cols / 32, halves());
    assert!(
        l.d.len() >= out.len().div_ceil(4) * nb * 4 && l.s.len() == l.d.len(),
        "dots needs the activations' scales by groups of four tokens"
    );
    for (g, outs) in out.chunks_mut(4).enumerate() {
        let t0 = g * 4;
        if outs.len() <= 2 {
            // A group's float work costs about two tokens' of `dot`: fewer go alone.
            for (j, o) in outs.iter_mut().enumerate() {
                *o = dot(ty, row, x.token(t0 + j, cols));
            }
            continue;
        }
        // acc[l] lane j: lane l of `dot`'s accumulator for token t0 + j.
        let mut acc = [f32x4_splat(0.0); 4];
        let mut extra = f32x4_splat(0.0);
        for (i, b) in row.chunks_exact(bytes).enumerate() {
            let (w, d, c) = unpack(h, ty, b);
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
