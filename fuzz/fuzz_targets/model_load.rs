//! Any bytes through the CPU reference's whole loader (header, config, tensor shapes,
//! every weight decoded) and, when they parse that far, a one-token forward pass:
//! errors are fine, panics, hangs and huge allocations are bugs. The GPU loader shares
//! everything up to the upload; `tests/suite/crafted_files.rs` runs crafted files there.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pippin::gguf::read_header;
use pippin::model::{Config, KvCache, Reference, Weights};
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = read_header(Cursor::new(data), Some(data.len() as u64)) else {
        return;
    };
    let Ok(c) = Config::from_gguf(&g) else { return };
    // Keep each run small: the fuzzer's files are tiny, a hostile header is not.
    if c.vocab_size * c.hidden > 1 << 20 || c.n_layers > 4 || c.ffn_dim * c.hidden > 1 << 20 {
        return;
    }
    let Ok(w) = Weights::load(&g, &c, &mut Cursor::new(data)) else {
        return;
    };
    let r = Reference::new(c.clone(), w);
    let _ = r.forward(&mut KvCache::new(&c), &[0], false);
});
