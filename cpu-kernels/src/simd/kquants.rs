//! K-quant rows times 16-bit activations in SIMD128 (`crate::kquants` is the
//! plain-loop reference and explains the arithmetic). A super-block's 256 weights are
//! unpacked with byte shuffles and shifts into sixteen i8x16 registers, each the 16
//! values of one sub-scale; per 32-value activation block two `i32x4.dot_i16x8_s`
//! pairs give the sums of its two halves, scaled in i32 lanes (at most 4 products
//! per lane: ≤ 2^29 after a scale, both halves together < 2^31), converted once.

use super::blocks::{acts, f16_at, halves};
use crate::kquants::{scales, KQuant, Super};
use crate::Acts;
use core::arch::wasm32::*;

/// 16 bytes of `b` from `at`.
///
/// # Safety
/// `at + 16 <= b.len()`.
#[inline(always)]
unsafe fn load(b: &[u8], at: usize) -> v128 {
    v128_load(b.as_ptr().add(at) as *const v128)
}

#[inline(always)]
fn low2(v: v128, k: u32) -> v128 {
    v128_and(u8x16_shr(v, 2 * k), u8x16_splat(3))
}

/// The 256 weights `q` of super-block `b` (`Super::w`), sixteen per register.
#[inline(always)]
fn weights(ty: KQuant, b: &[u8]) -> [v128; 16] {
    assert!(b.len() >= ty.bytes());
    // SAFETY: every load below reads 16 bytes inside the super-block, whose length
    // was just checked: Q2_K's last at 64 of 84 bytes, Q3_K's at 80 of 110, Q4_K's
    // at 128 of 144, Q5_K's at 160 of 176, Q6_K's at 176 of 210.
    let load = |at: usize| unsafe { load(b, at) };
    let mut w = [u8x16_splat(0); 16];
    let nib = u8x16_splat(15);
    match ty {
        KQuant::Q2K | KQuant::Q3K => {
            let at = if ty == KQuant::Q2K { 16 } else { 32 };
            let hm = [load(0), load(16)];
            for (c, o) in w.iter_mut().enumerate() {
                let q = load(at + 32 * (c / 8) + 16 * (c % 2));
                *o = low2(q, ((c % 8) / 2) as u32);
                if ty == KQuant::Q3K {
                    // A clear hmask bit c / 2 makes the value 4 lower.
                    let hb = v128_and(u8x16_shr(hm[c % 2], (c / 2) as u32), u8x16_splat(1));
                    *o = i8x16_sub(v128_or(*o, i8x16_shl(hb, 2)), u8x16_splat(4));
                }
            }
        }
        KQuant::Q4K | KQuant::Q5K => {
            let q5 = ty == KQuant::Q5K;
            let (at, qh) = (if q5 { 48 } else { 16 }, [load(16), load(32)]);
            for i in 0..4 {
                let v = [load(at + 32 * i), load(at + 32 * i + 16)];
                for h in 0..2 {
                    w[4 * i + h] = v128_and(v[h], nib);
                    w[4 * i + 2 + h] = u8x16_shr(v[h], 4);
                }
            }
            if q5 {
                // Bit j of qh[l] is the fifth bit of sub-block j's value l.
                for (c, o) in w.iter_mut().enumerate() {
                    let bit = v128_and(u8x16_shr(qh[c % 2], (c / 2) as u32), u8x16_splat(1));
                    *o = v128_or(*o, i8x16_shl(bit, 4));
                }
            }
        }
        KQuant::Q6K => {
            for h in 0..2 {
                let a = [load(64 * h), load(64 * h + 16)];
                let q = [load(64 * h + 32), load(64 * h + 48)];
                let hi = [load(128 + 32 * h), load(128 + 32 * h + 16)];
                for k in 0..4 {
                    let src = if k % 2 == 0 { &a } else { &q };
                    for l in 0..2 {
                        let low = if k < 2 {
                            v128_and(src[l], nib)
                        } else {
                            u8x16_shr(src[l], 4)
                        };
                        let v = v128_or(low, i8x16_shl(low2(hi[l], k as u32), 4));
                        w[8 * h + 2 * k + l] = i8x16_sub(v, u8x16_splat(32));
                    }
                }
            }
        }
    }
    w
}

/// Σ q·x over 16 values (one i8x16 of weights, two i16x8 of activations).
#[inline(always)]
fn half(w: v128, x0: v128, x1: v128) -> v128 {
    i32x4_add(
        i32x4_dot_i16x8(i16x8_extend_low_i8x16(w), x0),
        i32x4_dot_i16x8(i16x8_extend_high_i8x16(w), x1),
    )
}

/// Q2_K's `dmin·dx·Σ m·x` over activation block `b` (as four partial sums): the
/// activations of each half dotted with its splatted minimum.
#[inline(always)]
fn q2k_mins(xv: &[v128; 4], s: &Super, b: usize, dx: f32) -> v128 {
    let (m0, m1) = (i16x8_splat(s.mn[2 * b]), i16x8_splat(s.mn[2 * b + 1]));
    let m = i32x4_add(
        i32x4_add(i32x4_dot_i16x8(xv[0], m0), i32x4_dot_i16x8(xv[1], m0)),
        i32x4_add(i32x4_dot_i16x8(xv[2], m1), i32x4_dot_i16x8(xv[3], m1)),
    );
    f32x4_mul(f32x4_convert_i32x4(m), f32x4_splat(s.dmin * dx))
}

/// One super-block (`w`, scales `s`) times one token's 256 activations from block
/// `blk`, added to `acc` (f32x4 partial sums) and, for formats whose minimum is per 32
/// values (Q4_K, Q5_K), `Σ dmin·m·x` subtracted from `extra` through the blocks' sums.
#[inline(always)]
fn super_dot(
    ty: KQuant,
    w: &[v128; 16],
    s: &Super,
    x: Acts,
    blk: usize,
    acc: &mut v128,
    extra: &mut f32,
) {
    let mut mins = 0f32;
    for b in 0..8 {
        let xv = acts(x.q, (blk + b) * 32);
        let (a0, a1) = (2 * b, 2 * b + 1);
        let p0 = i32x4_mul(half(w[a0], xv[0], xv[1]), i32x4_splat(s.sc[a0] as i32));
        let p1 = i32x4_mul(half(w[a1], xv[2], xv[3]), i32x4_splat(s.sc[a1] as i32));
        let dx = x.d[blk + b];
        let mut v = f32x4_mul(
            f32x4_convert_i32x4(i32x4_add(p0, p1)),
            f32x4_splat(s.d * dx),
        );
        match ty {
            KQuant::Q2K => v = f32x4_sub(v, q2k_mins(&xv, s, b, dx)),
            // The minimum is the same for both halves: dx·Σq is the block's s.
            KQuant::Q4K | KQuant::Q5K => mins += s.mn[a0] as f32 * x.s[blk + b],
            KQuant::Q3K | KQuant::Q6K => {}
        }
        *acc = f32x4_add(*acc, v);
    }
    *extra -= s.dmin * mins;
}

/// Calls `$f` with `$ty` as a constant in each arm, so that the format's branches in
/// the inlined loops fold away.
macro_rules! each_format {
    ($ty:expr, $f:ident($($arg:expr),*)) => {
        match $ty {
            KQuant::Q2K => $f(KQuant::Q2K, $($arg),*),
            KQuant::Q3K => $f(KQuant::Q3K, $($arg),*),
            KQuant::Q4K => $f(KQuant::Q4K, $($arg),*),
            KQuant::Q5K => $f(KQuant::Q5K, $($arg),*),
            KQuant::Q6K => $f(KQuant::Q6K, $($arg),*),
        }
    };
}

/// `row · x` for a row of `ty` super-blocks and one token's activations.
pub fn dot(ty: KQuant, row: &[u8], x: Acts) -> f32 {
    each_format!(ty, dot_of(row, x))
}

#[inline(always)]
fn dot_of(ty: KQuant, row: &[u8], x: Acts) -> f32 {
    let (mut s, h) = (Super::default(), halves());
    let (mut acc, mut extra) = (f32x4_splat(0.0), 0f32);
    for (i, b) in row.chunks_exact(ty.bytes()).enumerate() {
        scales(ty, b, &mut s, |v| f16_at(h, v, 0));
        super_dot(ty, &weights(ty, b), &s, x, 8 * i, &mut acc, &mut extra);
    }
    sum4(acc) + extra
}

/// Tokens one pass of `dots` takes: each super-block is unpacked, and its weights
/// scaled, once for all of them (a speculative check has at most 8 positions).
const GROUP: usize = 8;

/// `row · x_t` into `out[t]` for the first `out.len()` tokens of `x` (rows of
/// `cols`). Each token's sum is `dot`'s bit for bit (speculative checks rely on it):
/// the same integers — the weights times their sub-scale in i16 lanes (|q·sc| ≤
/// 4096) before the products, where `dot` scales the i32 sums after them, which is
/// the same integer without overflow — and the same f32 operations in the same order.
/// Scaling the shared weights takes the i32 multiplies out of each token's work.
/// One copy for the five formats (their branches taken at run time, unlike `dot`'s):
/// a copy each cost the engine's wasm 6 KB more and measured no faster (Chromium,
/// the ~3B Q4_K_M's checks: 23.9 s against 23.2 s for the same reply).
pub fn dots(ty: KQuant, row: &[u8], x: Acts, cols: usize, out: &mut [f32]) {
    for (g, o) in out.chunks_mut(GROUP).enumerate() {
        dots_of(ty, row, x, cols, g * GROUP, o);
    }
}

/// Weights `w` (i8x16) as two i16x8 times `sc`.
#[inline(always)]
fn scaled(w: v128, sc: i16) -> [v128; 2] {
    let sc = i16x8_splat(sc);
    [
        i16x8_mul(i16x8_extend_low_i8x16(w), sc),
        i16x8_mul(i16x8_extend_high_i8x16(w), sc),
    ]
}

fn dots_of(ty: KQuant, row: &[u8], x: Acts, cols: usize, t0: usize, out: &mut [f32]) {
    let n = out.len();
    let last = t0 + n - 1;
    let xs: [Acts; GROUP] = core::array::from_fn(|t| x.token((t0 + t).min(last), cols));
    let (mut s, h) = (Super::default(), halves());
    let mut acc = [f32x4_splat(0.0); GROUP];
    let mut extra = [0f32; GROUP];
    for (i, b) in row.chunks_exact(ty.bytes()).enumerate() {
        scales(ty, b, &mut s, |v| f16_at(h, v, 0));
        let w = weights(ty, b);
        let mut mins = [0f32; GROUP];
        for k in 0..8 {
            let (a0, a1, blk) = (2 * k, 2 * k + 1, 8 * i + k);
            let ([w0, w1], [w2, w3]) = (scaled(w[a0], s.sc[a0]), scaled(w[a1], s.sc[a1]));
            for t in 0..n {
                let xv = acts(xs[t].q, blk * 32);
                let p0 = i32x4_add(i32x4_dot_i16x8(w0, xv[0]), i32x4_dot_i16x8(w1, xv[1]));
                let p1 = i32x4_add(i32x4_dot_i16x8(w2, xv[2]), i32x4_dot_i16x8(w3, xv[3]));
                let dx = xs[t].d[blk];
                let mut v = f32x4_mul(
                    f32x4_convert_i32x4(i32x4_add(p0, p1)),
                    f32x4_splat(s.d * dx),
                );
                match ty {
                    KQuant::Q2K => v = f32x4_sub(v, q2k_mins(&xv, &s, k, dx)),
                    KQuant::Q4K | KQuant::Q5K => mins[t] += s.mn[a0] as f32 * xs[t].s[blk],
                    KQuant::Q3K | KQuant::Q6K => {}
                }
                acc[t] = f32x4_add(acc[t], v);
            }
        }
        for t in 0..n {
            extra[t] -= s.dmin * mins[t];
        }
    }
    for (t, o) in out.iter_mut().enumerate() {
        *o = sum4(acc[t]) + extra[t];
    }
}

fn sum4(v: v128) -> f32 {
    f32x4_extract_lane::<0>(v)
        + f32x4_extract_lane::<1>(v)
        + f32x4_extract_lane::<2>(v)
        + f32x4_extract_lane::<3>(v)
}
