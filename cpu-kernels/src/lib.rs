//! The CPU backend's inner loops. They live in a crate of their own because the
//! browser build is optimized for size (`opt-level = "z"`), where LLVM leaves every
//! `core::arch` intrinsic a function call and does not unroll (decode ran at ~17
//! instead of ~26 tokens/s; K-quant rows decoded ~10% slower); Cargo's `wasm` profile
//! compiles this crate alone for speed.
//!
//! - `ggml`: GGML's block formats decoded to f32, exactly as ggml does (all targets).
//! - `dots`: integer dot products of 4-, 5- and 8-bit rows with 16-bit activations in
//!   plain loops (all targets; the reference of `simd::blocks`).
//! - `kquants`: integer dot products of K-quant super-blocks (Q2_K…Q6_K) with 16-bit
//!   activations in plain loops (all targets; the reference of `simd::kquants`).
//! - `palette`: integer dot products of palettized rows (2- and 4-bit indices into a
//!   table quantized to integers) with 16-bit activations in plain loops (all targets;
//!   the reference of `simd::palette`).
//! - `simd`: quantized block dot products, int8 attention and f32 dot/axpy in wasm
//!   SIMD128 (only there; elsewhere the engine's plain loops run, the reference these
//!   are tested against in `pkg-tests`).

pub mod dots;
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

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod simd {
    pub mod blocks;
    pub mod f32;
    pub mod int8;
    pub mod kquants;
    pub mod palette;
}
