//! Guided generation for Pippin: a reply's shape (a JSON Schema, any JSON object, a
//! regular expression or a Lark grammar) as a set of allowed tokens before each token.
//! The generate loop applies that set to the logits before sampling (on the GPU as a
//! bitmask in the top-k kernel, on the CPU to the full logits) and feeds each accepted
//! token back.
//!
//! Its own crate so that the browser's engine need not carry the compiler: without
//! the `compile` feature it is only what a request and a mask are (the engine's
//! wasm); with it, `Grammars` and `Guide` (native builds, and the guided module the
//! browser loads on the first guided reply, `guided/wasm`).

#[cfg(feature = "compile")]
mod compile;
mod format;

#[cfg(feature = "compile")]
pub use compile::{Grammars, Guide};
pub use format::{guide_schema, ResponseFormat};

/// A response format that cannot be used (invalid, or satisfied by no text).
#[derive(Clone, Debug, PartialEq)]
pub struct GrammarError(pub String);

impl std::fmt::Display for GrammarError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GrammarError {}

pub type Result<T, E = GrammarError> = std::result::Result<T, E>;

/// Whether bit `token` of `mask` is set (tokens past the mask are not allowed).
pub fn allows(mask: &[u32], token: u32) -> bool {
    mask.get(token as usize / 32)
        .is_some_and(|w| w & (1 << (token % 32)) != 0)
}

#[cfg_attr(not(feature = "compile"), allow(dead_code))]
fn set(mask: &mut [u32], token: u32, on: bool) {
    if let Some(w) = mask.get_mut(token as usize / 32) {
        let bit = 1 << (token % 32);
        *w = if on { *w | bit } else { *w & !bit };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_bits() {
        let mut m = vec![0u32; 2];
        set(&mut m, 33, true);
        set(&mut m, 0, true);
        assert!(allows(&m, 33) && allows(&m, 0) && !allows(&m, 1));
        assert!(!allows(&m, 64), "past the mask: not allowed");
        set(&mut m, 33, false);
        assert!(!allows(&m, 33));
        set(&mut m, 1000, true); // out of range: ignored
    }
}
