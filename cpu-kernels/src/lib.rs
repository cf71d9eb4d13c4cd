//! The CPU backend's inner loops. They live in a crate of their own because the
//! browser build is optimized for size (`opt-level = "z"`), where LLVM leaves every
//! `core::arch` intrinsic a function call and does not unroll (decode ran at ~17
//! instead of ~26 tokens/s; K-quant rows decoded ~10% slower); Cargo's `wasm` profile
//! compiles this crate alone for speed.
//!
//! - `blocks32`: GGML's block formats of 32 weights, one type each (`Block32`: GGML's
//!   id, layout, ggml's decode, the integer dot product with 16-bit activations in
//!   plain loops and SIMD128, the GPU's word layout), and `Format`, every weight
//!   format with an integer dot product by name, written from their list.
//! - `ggml`: GGML's K-quant super-blocks decoded to f32, exactly as ggml does.
//! - `kquants`: integer dot products of K-quant super-blocks (Q2_K…Q6_K) with 16-bit
//!   activations in plain loops (all targets; the reference of `simd::kquants`).
//! - `palette`: integer dot products of palettized rows (2- and 4-bit indices into a
//!   table quantized to integers) with 16-bit activations in plain loops (all targets;
//!   the reference of `simd::palette`).
//! - `floats`: f32 and int8 dot/axpy in plain loops (all targets; the reference of
//!   `simd::f32` and `simd::int8`).
//! - `simd`: quantized block dot products, int8 attention and f32 dot/axpy in wasm
//!   SIMD128 (only there; tested against the plain loops in `pkg-tests`).
//! - `fastest`: the one the engine calls — SIMD where compiled in, plain loops
//!   elsewhere; the only code here (and in the engine's CPU backend) that asks.

pub mod blocks32;
pub mod fastest;
pub mod floats;
pub mod ggml;
pub mod kquants;
pub mod palette;

/// Activations quantized per 32 values (`q ≈ x / d`; `s = d·Σq` per block), one token
/// after another.
#[derive(Clone, Copy)]
pub struct Acts<'a> {
    pub q: &'a [i16],
    pub d: &'a [f32],
    pub s: &'a [f32],
}

impl<'a> Acts<'a> {
    /// Token `t`'s activations, for rows of `cols` values.
    #[inline]
    pub fn token(self, t: usize, cols: usize) -> Acts<'a> {
        let (b, n) = (t * cols / 32, cols / 32);
        Acts {
            q: &self.q[t * cols..][..cols],
            d: &self.d[b..][..n],
            s: &self.s[b..][..n],
        }
    }
}

/// Several tokens' `d` and `s` (of `Acts`) by groups of four tokens, block after block
/// within a group, the four tokens side by side (`lanes`): what the several-token
/// kernels multiply as one vector. Apart from `Acts`, which the one-token kernels take.
#[derive(Clone, Copy)]
pub struct Lanes<'a> {
    pub d: &'a [f32],
    pub s: &'a [f32],
}

/// `v` (`[token][block]`, `blocks` a token) as groups of four tokens: `[group][block]
/// [token in group]`, zeros past the last token.
pub fn lanes(v: &[f32], blocks: usize) -> Vec<f32> {
    let tokens = v.len() / blocks.max(1);
    let mut out = vec![0f32; tokens.div_ceil(4) * blocks * 4];
    for (t, row) in v.chunks_exact(blocks.max(1)).enumerate() {
        let (g, j) = (t / 4, t % 4);
        for (i, &x) in row.iter().enumerate() {
            out[(g * blocks + i) * 4 + j] = x;
        }
    }
    out
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod simd {
    pub mod blocks;
    pub mod f32;
    pub mod int8;
    pub mod kquants;
    pub mod palette;
}

#[cfg(test)]
mod tests {
    #[test]
    fn lanes_put_four_tokens_side_by_side_block_after_block() {
        // Five tokens of two blocks: token t's block i is 10·t + i.
        let v: Vec<f32> = (0..5)
            .flat_map(|t| (0..2).map(move |i| (10 * t + i) as f32))
            .collect();
        let l = super::lanes(&v, 2);
        assert_eq!(
            l,
            [
                0., 10., 20., 30., 1., 11., 21., 31., // group 0: blocks 0, 1
                40., 0., 0., 0., 41., 0., 0., 0., // group 1: token 4, zeros
            ]
        );
    }
}
