//! Any bytes through the GGUF header parser, the model config, the tokenizer builder
//! and every tensor's dequantization: errors are fine, panics, hangs and huge
//! allocations are bugs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pippin::gguf::read_header;
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = read_header(Cursor::new(data), Some(data.len() as u64)) else {
        return;
    };
    let _ = pippin::model::Config::from_gguf(&g);
    if g.metadata.len() < 64 {
        let _ = pippin::tokenizer::Tokenizer::from_gguf(&g.metadata);
    }
    let mut c = Cursor::new(data);
    for t in &g.tensors {
        if let Ok(bytes) = g.read_tensor(&mut c, t) {
            let _ = pippin::quant::dequantize_tensor(t, &bytes);
        }
    }
});
