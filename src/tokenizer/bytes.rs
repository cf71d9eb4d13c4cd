//! Each token's bytes, as guided generation sees the vocabulary: byte-level BPE
//! vocabularies (GPT-2's byte-to-character map), SentencePiece-style ones (`▁` for a
//! space, `<0xNN>` byte tokens), special tokens marked with a leading 0xFF.

use super::Tokenizer;
use crate::error::Result;
use std::collections::HashMap;

/// A vocabulary's spelling and GPT-2's byte map, kept by the tokenizer.
pub(super) type Spelled = (Spelling, HashMap<char, u8>);

/// How a vocabulary writes bytes in its token strings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Spelling {
    /// GPT-2's map: printable bytes stand for themselves, the rest for U+0100 on.
    ByteLevel,
    /// Text as is, `▁` for a space, `<0xNN>` for a raw byte.
    Text,
}

/// The marker llguidance expects before a special token's text.
const SPECIAL: u8 = 0xFF;

/// GPT-2's byte-to-character map, inverted.
fn byte_level_map() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut next = 0x100u32;
    let mut map = HashMap::with_capacity(256);
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap_or(char::REPLACEMENT_CHARACTER)
        };
        map.insert(c, b);
    }
    map
}

fn spelling(tk: &tokenizers::Tokenizer) -> Spelling {
    let decoder = tk
        .get_decoder()
        .and_then(|d| serde_json::to_value(d).ok())
        .unwrap_or_default();
    let is_byte_level = |d: &serde_json::Value| d["type"] == "ByteLevel";
    let nested = decoder["decoders"]
        .as_array()
        .is_some_and(|ds| ds.iter().any(is_byte_level));
    if is_byte_level(&decoder) || nested {
        Spelling::ByteLevel
    } else {
        Spelling::Text
    }
}

/// `<0xNN>`: the byte NN.
fn byte_token(s: &str) -> Option<u8> {
    let hex = s.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

fn bytes_of(s: &str, spelling: Spelling, map: &HashMap<char, u8>) -> Vec<u8> {
    match spelling {
        Spelling::ByteLevel => {
            // A character outside the map (a hand-added token) stands for itself.
            let mut out = Vec::with_capacity(s.len());
            for c in s.chars() {
                match map.get(&c) {
                    Some(&b) => out.push(b),
                    None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                }
            }
            out
        }
        Spelling::Text => match byte_token(s) {
            Some(b) => vec![b],
            None => s.replace('\u{2581}', " ").into_bytes(),
        },
    }
}

impl Tokenizer {
    /// The bytes of each of `ids` as the reply's text has them (a special token's
    /// text, unmarked; an id no token has: empty).
    pub fn bytes_of_tokens(&self, ids: &[u32]) -> Vec<Vec<u8>> {
        let tk = &self.special;
        let (spelling, map) = self
            .spelling
            .get_or_init(|| (spelling(tk), byte_level_map()));
        let added = tk.get_added_tokens_decoder();
        ids.iter()
            .map(|id| match (added.get(id), tk.id_to_token(*id)) {
                (Some(t), _) => t.content.as_bytes().to_vec(),
                (None, Some(text)) => bytes_of(&text, *spelling, map),
                (None, None) => Vec::new(),
            })
            .collect()
    }

    /// Every token's bytes by id (`vocab_size()` entries; an id no token has: empty).
    pub fn token_bytes(&self) -> Result<Vec<Vec<u8>>> {
        let tk = &self.special;
        let spelling = spelling(tk);
        let map = byte_level_map();
        let mut out = vec![Vec::new(); self.vocab_size()];
        for (text, id) in tk.get_vocab(false) {
            if let Some(slot) = out.get_mut(id as usize) {
                *slot = bytes_of(&text, spelling, &map);
            }
        }
        // Added tokens are written as their text; special ones are marked.
        for (id, t) in tk.get_added_tokens_decoder() {
            if let Some(slot) = out.get_mut(id as usize) {
                let mut b = Vec::with_capacity(t.content.len() + 1);
                if t.special {
                    b.push(SPECIAL);
                }
                b.extend_from_slice(t.content.as_bytes());
                *slot = b;
            }
        }
        Ok(out)
    }
}
