//! The vocabulary every GGUF tokenizer has (token texts and their llama.cpp types)
//! and its added tokens: what the byte-level BPE (`from_gguf`) and SentencePiece
//! (`spm`) builders both read.

use crate::error::{Error, Result};
use crate::gguf::Metadata;

// llama.cpp token types.
pub(super) const TT_NORMAL: i64 = 1;
pub(super) const TT_CONTROL: i64 = 3;
pub(super) const TT_USER_DEFINED: i64 = 4;

/// The vocabulary every GGUF tokenizer has: token texts and their llama.cpp types.
pub(super) struct Vocab<'a> {
    pub tokens: &'a [String],
    pub types: Vec<i64>,
}

pub(super) fn vocab(md: &Metadata) -> Result<Vocab<'_>> {
    let tokens = md
        .strings("tokenizer.ggml.tokens")
        .ok_or_else(|| Error::Tokenizer("tokenizer.ggml.tokens is missing".into()))?;
    if tokens.is_empty() || tokens.len() > u32::MAX as usize {
        return Err(Error::Tokenizer(format!(
            "tokenizer.ggml.tokens has {} tokens",
            tokens.len()
        )));
    }
    let types = match md.array("tokenizer.ggml.token_type") {
        Some(a) => a
            .to_i64s()
            .filter(|t| t.len() == tokens.len())
            .ok_or_else(|| {
                Error::Tokenizer("tokenizer.ggml.token_type does not match the tokens".into())
            })?,
        None => vec![TT_NORMAL; tokens.len()],
    };
    Ok(Vocab { tokens, types })
}
/// Added tokens as `tokenizers` takes them: control tokens are special (text only
/// when special-token parsing is on), user-defined ones always match, as llama.cpp
/// treats them.
pub(super) fn added_tokens(v: &Vocab) -> Vec<(u32, String, bool)> {
    v.tokens
        .iter()
        .zip(&v.types)
        .enumerate()
        .filter(|(_, (_, &ty))| ty == TT_CONTROL || ty == TT_USER_DEFINED)
        .map(|(i, (tok, &ty))| (i as u32, tok.clone(), ty == TT_CONTROL))
        .collect()
}
