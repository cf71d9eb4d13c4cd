//! Builds a Hugging Face `tokenizer.json` description from a GGUF file's own tokenizer
//! metadata (`tokenizer.ggml.*`), which the `tokenizers` crate then loads. Only
//! byte-level BPE (`tokenizer.ggml.model = "gpt2"`) is supported: SmolLM2, Llama 3,
//! Qwen. The pre-tokenizer follows llama.cpp's `tokenizer.ggml.pre` names.

use crate::error::{Error, Result};
use crate::gguf::Metadata;
use serde_json::{json, Value};

// llama.cpp token types.
const TT_CONTROL: i64 = 3;
const TT_USER_DEFINED: i64 = 4;

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

pub fn tokenizer_json(md: &Metadata) -> Result<(Value, SpecialIds)> {
    let model = md.str("tokenizer.ggml.model").unwrap_or("(missing)");
    if model != "gpt2" {
        return Err(Error::unsupported(format!(
            "tokenizer type {model:?}: only byte-level BPE (\"gpt2\") is supported; pass a tokenizer.json instead"
        )));
    }
    let tokens = md
        .strings("tokenizer.ggml.tokens")
        .ok_or_else(|| Error::Tokenizer("tokenizer.ggml.tokens is missing".into()))?;
    let merges = md
        .strings("tokenizer.ggml.merges")
        .ok_or_else(|| Error::Tokenizer("tokenizer.ggml.merges is missing".into()))?;
    let types = match md.array("tokenizer.ggml.token_type") {
        Some(a) => a
            .to_i64s()
            .filter(|t| t.len() == tokens.len())
            .ok_or_else(|| {
                Error::Tokenizer("tokenizer.ggml.token_type does not match the tokens".into())
            })?,
        None => vec![1; tokens.len()],
    };
    let pre = md.str("tokenizer.ggml.pre").unwrap_or("default");
    let vocab: serde_json::Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    if vocab.len() != tokens.len() {
        return Err(Error::Tokenizer(
            "tokenizer.ggml.tokens has duplicate tokens".into(),
        ));
    }
    let added: Vec<Value> = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .filter(|(_, (_, &ty))| ty == TT_CONTROL || ty == TT_USER_DEFINED)
        .map(|(i, (tok, &ty))| {
            json!({"id": i, "content": tok, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": ty != TT_CONTROL, "special": ty == TT_CONTROL})
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
    let id = |k: &str| {
        md.u64(k)
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| (v as usize) < tokens.len())
    };
    let special = SpecialIds {
        bos: id("tokenizer.ggml.bos_token_id"),
        eos: id("tokenizer.ggml.eos_token_id"),
        eot: id("tokenizer.ggml.eot_token_id"),
        add_bos: md.bool("tokenizer.ggml.add_bos_token").unwrap_or(false),
    };
    Ok((tj, special))
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
