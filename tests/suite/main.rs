//! The native test suite in one binary (one link and one copy of the engine's generic
//! code instead of one per file: most of what building the tests cost). Each module is
//! the tests of one subject; `cargo test --test suite <module>::` runs one of them.
//! `tests/memory.rs` stays its own binary: it counts the process's allocations.

mod common;

mod adapters;
mod convert;
mod cpu_backend;
mod cpu_backend_files;
mod cpu_threads;
mod crafted_files;
mod device_limits;
mod engine;
mod families;
mod families_llama_cpp;
mod generate;
mod ggml_formats;
mod gguf;
mod gpu_model;
mod guided;
mod kernels_matmul;
mod kernels_other;
mod layers;
mod logprobs;
mod palettized;
mod pipelined;
mod real_models_cpu;
mod real_models_gpu;
mod recover;
mod reference_model;
mod sessions;
mod speculation;
mod speculation_gpu;
mod split_files;
mod tokenizer;
mod tools;
