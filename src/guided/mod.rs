//! Guided generation in the engine: `pippin-guided` (the `guided/` crate) compiles a
//! response format into the set of tokens allowed before each token. Natively the
//! compiler is linked in (`native.rs`); in the browser it is a second wasm module the
//! engine loads on its first guided reply (`web.rs`), so that the engine's own wasm
//! does not carry it (~0.7 MB: llguidance, its regex engine, JSON Schema handling).
//! Both give the generate loop the same `GrammarCache` and `Guide`.

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

pub use pippin_guided::{allows, guide_schema, GrammarError, ResponseFormat};

#[cfg(not(target_arch = "wasm32"))]
mod native;
#[cfg(not(target_arch = "wasm32"))]
pub use native::{GrammarCache, Guide};

#[cfg(target_arch = "wasm32")]
mod web;
#[cfg(target_arch = "wasm32")]
pub use web::{set_loader, GrammarCache, Guide};

impl From<GrammarError> for Error {
    fn from(e: GrammarError) -> Self {
        Error::Grammar(e.0)
    }
}

/// The vocabulary as the compiler sees it (each token's bytes, special tokens marked)
/// and the token that ends a guided reply.
fn vocabulary(tk: &Tokenizer) -> Result<(Vec<Vec<u8>>, u32)> {
    let eos = tk.end_of_text().ok_or_else(|| {
        Error::Grammar("this model has no end-of-text token to end a guided reply".into())
    })?;
    Ok((tk.token_bytes()?, eos))
}
