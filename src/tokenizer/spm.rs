//! SentencePiece vocabularies in GGUF (`tokenizer.ggml.model = "llama"`: Gemma, Llama 2,
//! Mistral) as a `tokenizers` BPE model, the way Hugging Face converts them.
//!
//! llama.cpp tokenizes them by repeatedly merging the adjacent pair of symbols whose
//! concatenation is a token with the highest score, starting from characters, with
//! `<0xNN>` byte tokens for characters the vocabulary lacks. That is BPE whose merges
//! are every split of every token into two tokens, ranked by the whole token's score;
//! spaces are `▁`, prefixed to the text when `add_space_prefix` says so.

use super::vocab::{added_tokens, Vocab, TT_NORMAL, TT_USER_DEFINED};
use crate::error::{Error, Result};
use crate::gguf::Metadata;
use std::collections::HashMap;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::AddedToken;

const SPACE: char = '▁';

fn tk_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

pub(super) fn build(md: &Metadata, v: &Vocab) -> Result<tokenizers::Tokenizer> {
    let n = v.tokens.len();
    let scores = match md.array("tokenizer.ggml.scores") {
        Some(a) => a.to_f32s().filter(|s| s.len() == n).ok_or_else(|| {
            Error::Tokenizer("tokenizer.ggml.scores does not match the tokens".into())
        })?,
        // llama.cpp scores every token 0 when the file has none.
        None => vec![0.0; n],
    };
    // The first id of a text wins, as llama.cpp's map keeps it.
    let mut vocab: HashMap<String, u32> = HashMap::with_capacity(n);
    for (i, t) in v.tokens.iter().enumerate() {
        vocab.entry(t.clone()).or_insert(i as u32);
    }
    let merges = merges(v, &scores, &vocab);
    let unk = md
        .u64("tokenizer.ggml.unknown_token_id")
        .and_then(|i| v.tokens.get(usize::try_from(i).ok()?))
        .cloned();
    let mut bpe = BPE::builder()
        .vocab_and_merges(
            vocab
                .into_iter()
                .collect::<tokenizers::models::bpe::Vocab>(),
            merges,
        )
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(u) = unk {
        bpe = bpe.unk_token(u);
    }
    let mut tk = tokenizers::Tokenizer::new(bpe.build().map_err(tk_err)?);
    let prefix = md.bool("tokenizer.ggml.add_space_prefix").unwrap_or(true);
    let scheme = if prefix {
        PrependScheme::First
    } else {
        PrependScheme::Never
    };
    tk.with_pre_tokenizer(Some(Metaspace::new(SPACE, scheme, false)));
    let decoder = Sequence::new(vec![
        DecoderWrapper::Replace(Replace::new(SPACE.to_string(), " ").map_err(tk_err)?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ]);
    tk.with_decoder(Some(decoder));
    let (special, plain): (Vec<_>, Vec<_>) = added_tokens(v)
        .into_iter()
        .map(|(_, text, special)| (AddedToken::from(text, special).normalized(false), special))
        .partition(|(_, special)| *special);
    tk.add_special_tokens(&special.into_iter().map(|t| t.0).collect::<Vec<_>>());
    tk.add_tokens(&plain.into_iter().map(|t| t.0).collect::<Vec<_>>());
    Ok(tk)
}

/// Every (left, right) split of a normal or user-defined token into two tokens, best
/// score first (ties: lower id first).
fn merges(v: &Vocab, scores: &[f32], vocab: &HashMap<String, u32>) -> Vec<(String, String)> {
    let mut found: Vec<(f32, u32, usize)> = Vec::new();
    for (i, (t, &ty)) in v.tokens.iter().zip(&v.types).enumerate() {
        if !(ty == TT_NORMAL || ty == TT_USER_DEFINED) || vocab.get(t) != Some(&(i as u32)) {
            continue;
        }
        for (at, _) in t.char_indices().skip(1) {
            if vocab.contains_key(&t[..at]) && vocab.contains_key(&t[at..]) {
                found.push((scores[i], i as u32, at));
            }
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    found
        .into_iter()
        .map(|(_, i, at)| {
            let t = &v.tokens[i as usize];
            (t[..at].to_string(), t[at..].to_string())
        })
        .collect()
}
