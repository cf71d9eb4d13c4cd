//! Any bytes as an adapter's safetensors file (with a valid config), and any bytes as
//! its config: errors are fine, panics and huge allocations are bugs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pippin::model::{Arch, Config, RopeStyle};

fn config() -> Config {
    Config {
        arch: Arch::Llama,
        n_layers: 2,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 32,
        hidden: 64,
        ffn_dim: 96,
        vocab_size: 64,
        rope_dim: 32,
        rope_style: RopeStyle::Adjacent,
        context_length: 64,
        ..Config::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let c = config();
    let cfg = br#"{"r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}"#;
    let _ = pippin::adapters::parse(cfg, data, &c);
    let _ = pippin::adapters::parse(data, &[], &c);
});
