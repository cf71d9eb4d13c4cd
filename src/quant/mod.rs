//! Weight formats: the GGML tensor types, their block layout, and CPU dequantization
//! (the ground truth the GPU kernels are tested against).

pub mod dequant;
pub mod encode;
pub mod gpu_layout;
pub mod kv;
pub mod palette;

pub use crate::gguf::GgmlType;
pub use dequant::{dequantize, dequantize_into, dequantize_tensor};
