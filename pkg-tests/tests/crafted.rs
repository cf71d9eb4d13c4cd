//! Crafted model files through the streaming GPU loader in the browser, on wasm32:
//! sizes that would wrap a 32-bit `usize` (a row of 2^32 + 64 values reads as 64 there
//! if cast), widths the kernels cannot take, and valid tiny models, each a clear
//! error or a load — never a panic (which would abort the wasm module).
#![cfg(target_arch = "wasm32")]

use pippin::engine::{GpuModel, ReadSource};
use pippin::gpu::{Caps, Gpu};
use pippin::testing::synthetic::{with_dim0, with_type_id, Spec};
use std::io::Cursor;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

async fn load(bytes: Vec<u8>) -> pippin::Result<GpuModel> {
    let gpu = Gpu::new(Caps::default()).await.expect("WebGPU adapter");
    let len = bytes.len() as u64;
    let mut src = ReadSource {
        reader: Cursor::new(bytes),
        len: Some(len),
    };
    GpuModel::load_from(gpu, &mut src, &mut |_, _| {})
        .await
        .map(|(m, _)| m)
}

async fn refused(what: &str, bytes: Vec<u8>, word: &str) {
    match load(bytes).await {
        Ok(_) => panic!("{what}: loaded"),
        Err(e) => assert!(e.to_string().contains(word), "{what}: {e}"),
    }
}

#[wasm_bindgen_test]
async fn crafted_files_are_errors_on_wasm32() {
    assert_eq!(usize::BITS, 32);
    load(Spec::llama().bytes()).await.expect("a valid llama");
    load(Spec::gemma3(8).bytes()).await.expect("a valid gemma3");
    let one = Spec {
        vocab: 1,
        ..Spec::llama()
    };
    load(one.bytes()).await.expect("a one-row embedding");
    let huge = with_dim0(
        Spec::llama().bytes(),
        "blk.0.ffn_gate.weight",
        (1 << 32) + 64,
    );
    refused("2^32 + 64 columns", huge, "blk.0.ffn_gate.weight").await;
    let narrow = Spec {
        hidden: 16,
        ..Spec::llama()
    };
    refused("hidden 16", narrow.bytes(), "multiple of 32").await;
    let big_layers = Spec {
        extra: vec![(
            "llama.block_count".into(),
            pippin::gguf::Value::U64((1 << 32) + 2),
        )],
        ..Spec::llama()
    };
    refused("2^32 + 2 layers", big_layers.bytes(), "block_count").await;
    let bad_type = with_type_id(Spec::llama().bytes(), "blk.1.attn_k.weight", 99);
    refused("type 99", bad_type, "unknown type id 99").await;
}
