//! The CPU backend's inner loops in wasm SIMD128. They live in a crate of their own
//! because the browser build is optimized for size (`opt-level = "z"`), where LLVM
//! leaves every `core::arch` intrinsic a function call (decode ran at ~17 instead of
//! ~30 tokens/s); Cargo's `wasm` profile compiles this crate alone for speed.
//! Elsewhere (natively, or wasm without SIMD128) it is empty and the engine's plain
//! loops run: they are the reference these are tested against (`pkg-tests`).
#![cfg(all(target_arch = "wasm32", target_feature = "simd128"))]

pub mod blocks;
pub mod f32;
pub mod int8;
