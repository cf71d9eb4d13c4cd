//! Pippin: an AFM-style on-device language model runtime for WebGPU.
//! See `DESIGN.md` in the shared folder for the map of modules.

pub mod adapters;
#[cfg(not(target_arch = "wasm32"))]
pub mod convert;
pub mod engine;
pub mod error;
pub mod gguf;
pub mod gpu;
pub mod guided;
pub mod kernels;
pub mod memory;
pub mod model;
pub mod par;
pub mod quant;
#[cfg(not(target_arch = "wasm32"))]
pub mod recover;
pub mod rng;
pub mod sampler;
#[cfg(any(test, feature = "dev"))]
pub mod testing;
pub mod tokenizer;
#[cfg(target_arch = "wasm32")]
pub mod wasm;

pub use error::{Error, Result};
