//! The browser's guided module: `pippin-guided`'s compiler behind wasm-bindgen, a
//! second wasm file (`pippin_guided_bg.wasm`) that the engine loads on its first
//! guided reply, so that apps that never constrain a reply do not download it.
//! The engine's side of the bridge is `src/guided/web.rs`; both run on the page's (or
//! the worker's) one thread, each in its own wasm memory.
#![cfg(target_arch = "wasm32")]

use pippin_guided::{Grammars, Guide, ResponseFormat};
use wasm_bindgen::prelude::*;

/// One vocabulary compiled: what every guide of that model shares.
#[wasm_bindgen(js_name = Grammars)]
pub struct JsGrammars(Grammars);

/// Compiles a vocabulary: token `i`'s bytes are `bytes[ends[i - 1]..ends[i]]` (one
/// flat array, not 50,000 small ones across the bridge); `eos` ends the text, and so
/// does every token in `stops`.
#[wasm_bindgen]
pub fn grammars(
    bytes: &[u8],
    ends: &[u32],
    eos: u32,
    stops: &[u32],
) -> Result<JsGrammars, JsError> {
    let mut tokens = Vec::with_capacity(ends.len());
    let mut start = 0;
    for &end in ends {
        let end = end as usize;
        let token = bytes
            .get(start..end)
            .ok_or_else(|| JsError::new("the vocabulary's token offsets are out of order"))?;
        tokens.push(token.to_vec());
        start = end;
    }
    Grammars::new(&tokens, eos, stops)
        .map(JsGrammars)
        .map_err(|e| JsError::new(&e.0))
}

#[wasm_bindgen(js_class = Grammars)]
impl JsGrammars {
    /// A guide for `format` (a response format as JSON, as the engine serializes it);
    /// `undefined` for plain text. An invalid or unsatisfiable format throws.
    pub fn guide(&self, format: &str) -> Result<Option<JsGuide>, JsError> {
        let format: ResponseFormat = serde_json::from_str(format)
            .map_err(|e| JsError::new(&format!("a response format the engine sent: {e}")))?;
        let guide = self.0.guide(&format).map_err(|e| JsError::new(&e.0))?;
        Ok(guide.map(JsGuide))
    }
}

/// One reply's parser state.
#[wasm_bindgen(js_name = Guide)]
pub struct JsGuide(Guide);

#[wasm_bindgen(js_class = Guide)]
impl JsGuide {
    /// Advances past `token`; true when the text is complete and nothing may follow.
    pub fn consume(&mut self, token: u32) -> Result<bool, JsError> {
        self.0.consume(token).map_err(|e| JsError::new(&e.0))
    }

    /// Computes the mask of the next position (when the last `consume` left it stale).
    pub fn update(&mut self) -> Result<(), JsError> {
        self.0.update().map_err(|e| JsError::new(&e.0))
    }

    /// The tokens allowed next: bit `t % 32` of word `t / 32` (a copy).
    pub fn mask(&self) -> Vec<u32> {
        self.0.mask().to_vec()
    }
}
