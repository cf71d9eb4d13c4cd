//! Builds a `tokenizers` tokenizer from a GGUF file's own tokenizer metadata
//! (`tokenizer.ggml.*`): byte-level BPE (`tokenizer.ggml.model = "gpt2"`: SmolLM2,
//! Llama 3, Qwen), described as a `tokenizer.json` with the pre-tokenizer llama.cpp's
//! `tokenizer.ggml.pre` names; and SentencePiece vocabularies (`"llama"`: Gemma,
//! Llama 2, Mistral), see `spm`.

use super::spm;
use super::vocab::{added_tokens, vocab};
use crate::error::{Error, Result};
use crate::gguf::Metadata;
use serde_json::{json, Value};

const LLAMA3_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// What the GGUF says beyond the vocabulary.
#[derive(Clone, Debug, Default)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub add_bos: bool,
}

pub(super) fn special_ids(md: &Metadata, n_tokens: usize) -> SpecialIds {
    let id = |k: &str| {
        md.u64(k)
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| (v as usize) < n_tokens)
    };
    SpecialIds {
        bos: id("tokenizer.ggml.bos_token_id"),
        eos: id("tokenizer.ggml.eos_token_id"),
        eot: id("tokenizer.ggml.eot_token_id"),
        add_bos: md.bool("tokenizer.ggml.add_bos_token").unwrap_or(false),
    }
}

/// The GGUF's tokenizer, ready to use, with its special ids.
pub fn build(md: &Metadata) -> Result<(tokenizers::Tokenizer, SpecialIds)> {
    let model = md.str("tokenizer.ggml.model").unwrap_or("(missing)");
    match model {
        "gpt2" => {
            let (json, ids) = tokenizer_json(md)?;
            let tk = tokenizers::Tokenizer::from_bytes(json.to_string())
                .map_err(|e| Error::Tokenizer(e.to_string()))?;
            Ok((tk, ids))
        }
        "llama" => {
            let v = vocab(md)?;
            let ids = special_ids(md, v.tokens.len());
            Ok((spm::build(md, &v)?, ids))
        }
        other => Err(Error::unsupported(format!(
            "tokenizer type {other:?} (supported: byte-level BPE \"gpt2\" and SentencePiece \"llama\"); pass a tokenizer.json instead"
        ))),
    }
}

/// A byte-level BPE GGUF tokenizer as a `tokenizer.json` description.
pub fn tokenizer_json(md: &Metadata) -> Result<(Value, SpecialIds)> {
    let model = md.str("tokenizer.ggml.model").unwrap_or("(missing)");
    if model != "gpt2" {
        return Err(Error::unsupported(format!(
            "tokenizer type {model:?} has no tokenizer.json description here (only byte-level BPE, \"gpt2\")"
        )));
    }
    let v = vocab(md)?;
    let merges = md
        .strings("tokenizer.ggml.merges")
        .ok_or_else(|| Error::Tokenizer("tokenizer.ggml.merges is missing".into()))?;
    let pre = md.str("tokenizer.ggml.pre").unwrap_or("default");
    let vocab: serde_json::Map<String, Value> = v
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    if vocab.len() != v.tokens.len() {
        return Err(Error::Tokenizer(
            "tokenizer.ggml.tokens has duplicate tokens".into(),
        ));
    }
    let added: Vec<Value> = added_tokens(&v)
        .into_iter()
        .map(|(i, tok, special)| {
            json!({"id": i, "content": tok, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": !special, "special": special})
        })
        .collect();
    let tj = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer(pre)?,
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": pre == "llama-bpe",
                  "vocab": vocab, "merges": merges},
    });
    Ok((tj, special_ids(md, v.tokens.len())))
}

fn byte_level(use_regex: bool) -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex})
}

fn split(re: &str) -> Value {
    json!({"type": "Split", "pattern": {"Regex": re}, "behavior": "Isolated", "invert": false})
}

/// llama.cpp's pre-tokenizer names mapped to Hugging Face pre-tokenizers.
fn pre_tokenizer(pre: &str) -> Result<Value> {
    Ok(match pre {
        // llama.cpp: ["\p{N}", GPT-2 regex] == Digits(individual) + ByteLevel(regex).
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            json!({
                "type": "Sequence",
                "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level(true)]
            })
        }
        "llama-bpe" | "llama3" | "dbrx" | "smaug-bpe" => {
            json!({"type": "Sequence", "pretokenizers": [split(LLAMA3_RE), byte_level(false)]})
        }
        "qwen2" | "deepseek-r1-qwen" => {
            json!({"type": "Sequence", "pretokenizers": [split(QWEN2_RE), byte_level(false)]})
        }
        "default" | "gpt-2" | "gpt2" => byte_level(true),
        other => {
            return Err(Error::unsupported(format!(
                "tokenizer pre-processing {other:?} is not known; pass a tokenizer.json instead"
            )))
        }
    })
}
