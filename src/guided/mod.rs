//! Guided generation: the answer's shape (a JSON Schema, any JSON object, a regular
//! expression or a Lark grammar) compiled by `llguidance` into a parser that gives,
//! before each token, the set of tokens that keep the text valid. The generate loop
//! applies that set to the logits before sampling (on the GPU as a bitmask in the
//! top-k kernel, on the CPU to the full logits) and feeds each accepted token back.
//!
//! A `Grammars` is one vocabulary compiled (tens of milliseconds): the engine keeps
//! one per model (`GrammarCache`), each reply gets its own `Guide`.

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

/// The shape a reply must have (`responseFormat` in JavaScript).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// A JSON value valid under `schema`. A keyword the grammar cannot express
    /// (`uniqueItems`, ...) is an error, unless `strict` is false: then it is ignored
    /// (the rest is still enforced).
    JsonSchema {
        schema: Value,
        #[serde(default)]
        strict: Option<bool>,
    },
    /// Any JSON object.
    JsonObject,
    /// Text matching the regular expression as a whole (Rust `regex` syntax).
    Regex { pattern: String },
    /// A Lark-style grammar (llguidance's dialect: `start: ...`).
    Grammar { grammar: String },
    /// No constraint (OpenAI's `{ type: "text" }`).
    Text,
}

impl ResponseFormat {
    /// The grammar llguidance compiles; `None` for plain text.
    fn grammar(&self) -> Result<Option<TopLevelGrammar>> {
        Ok(Some(match self {
            ResponseFormat::JsonSchema { schema, strict } => {
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(Error::Grammar(
                        "a JSON Schema is an object (or true/false)".into(),
                    ));
                }
                let lenient = *strict == Some(false);
                TopLevelGrammar::from_json_schema(options(schema.clone(), lenient))
            }
            ResponseFormat::JsonObject => {
                TopLevelGrammar::from_json_schema(options(json!({"type": "object"}), false))
            }
            ResponseFormat::Regex { pattern } => TopLevelGrammar::from_regex(pattern),
            ResponseFormat::Grammar { grammar } => {
                if grammar.trim().is_empty() {
                    return Err(Error::Grammar("the grammar is empty".into()));
                }
                TopLevelGrammar::from_lark(grammar.clone())
            }
            ResponseFormat::Text => return Ok(None),
        }))
    }
}

/// `schema` as a JSON Schema guide compiles it, for a Lark grammar's `%json` (compact
/// JSON, bounded numbers; `lenient`: keywords the grammar cannot express ignored).
pub fn guide_schema(schema: Value, lenient: bool) -> Value {
    options(schema, lenient)
}

/// The compiler's options, in the schema's `x-guidance` (the schema's own win): JSON
/// without free whitespace between tokens (a small model offered optional whitespace
/// can spend its whole budget on it); `lenient` ignores keywords the grammar cannot
/// express (`uniqueItems`, ...) instead of refusing the schema.
fn options(mut schema: Value, lenient: bool) -> Value {
    bound_numbers(&mut schema);
    if let Some(o) = schema.as_object_mut() {
        let g = o.entry("x-guidance").or_insert_with(|| json!({}));
        if let Some(g) = g.as_object_mut() {
            g.entry("whitespace_flexible").or_insert(json!(false));
            g.entry("lenient").or_insert(json!(lenient));
        }
    }
    schema
}

/// The step of a JSON number whose schema sets no `multipleOf`: at most 6 fractional
/// digits (llama.cpp's JSON grammars bound digits likewise). Without a bound a small
/// model sampling a number can write digits until `maxTokens`. (Finer steps overflow
/// llguidance's arithmetic with some ranges: 1e-9 with -50..60.)
const NUMBER_STEP: f64 = 1e-6;

/// The magnitude a JSON number or integer may reach when its schema sets no bound:
/// 16 integral digits at most (f64 holds integers exactly to 2^53 ≈ 9e15).
const NUMBER_LIMIT: f64 = 1e15;

/// Bounds every number and integer subschema that leaves its digits unbounded: a
/// `number` without `multipleOf` gets one of `NUMBER_STEP`, a side without a bound
/// gets ±`NUMBER_LIMIT` — a subset of what it allows, so every reply still
/// validates. Literal values (`const`, `enum`, `default`, `examples`) are left alone.
fn bound_numbers(v: &mut Value) {
    match v {
        Value::Object(o) => {
            let is = |kind: &str| match o.get("type") {
                Some(Value::String(t)) => t == kind,
                Some(Value::Array(ts)) => ts.iter().any(|t| t == kind),
                _ => false,
            };
            let (number, integer) = (is("number"), is("integer"));
            if number && !o.contains_key("multipleOf") {
                o.insert("multipleOf".into(), json!(NUMBER_STEP));
            }
            if number || integer {
                if !o.contains_key("minimum") && !o.contains_key("exclusiveMinimum") {
                    o.insert("minimum".into(), json!(-NUMBER_LIMIT));
                }
                if !o.contains_key("maximum") && !o.contains_key("exclusiveMaximum") {
                    o.insert("maximum".into(), json!(NUMBER_LIMIT));
                }
            }
            for (k, child) in o.iter_mut() {
                if !matches!(k.as_str(), "const" | "enum" | "default" | "examples") {
                    bound_numbers(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(bound_numbers),
        _ => {}
    }
}

/// The compiled form of one vocabulary: what every guide of that tokenizer shares.
pub struct Grammars {
    factory: ParserFactory,
    eos: u32,
    /// Tokens that end a reply: allowed wherever the grammar allows `eos`.
    stops: Vec<u32>,
}

impl Grammars {
    /// The tokenizer's vocabulary, compiled.
    pub fn for_tokenizer(tk: &Tokenizer) -> Result<Grammars> {
        let eos = tk.end_of_text().ok_or_else(|| {
            Error::Grammar("this model has no end-of-text token to end a guided reply".into())
        })?;
        Self::new(&tk.token_bytes()?, eos, tk.stop_tokens())
    }

    /// `tokens[id]` is token `id`'s bytes (a special token: 0xFF then its text, as
    /// llguidance marks them; none: empty); `eos` ends the text, and so does every
    /// token in `stops`.
    pub fn new(tokens: &[Vec<u8>], eos: u32, stops: &[u32]) -> Result<Grammars> {
        let n = u32::try_from(tokens.len())
            .map_err(|_| Error::Grammar("the vocabulary is too large".into()))?;
        if eos >= n {
            return Err(Error::Grammar(format!(
                "the end-of-text token {eos} is outside the vocabulary ({n} tokens)"
            )));
        }
        let trie = TokTrie::from(&TokRxInfo::new(n, eos), tokens);
        let env: llguidance::toktrie::TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(grammar_err)?;
        factory.quiet();
        let mut stops: Vec<u32> = stops.iter().copied().filter(|&t| t < n).collect();
        stops.push(eos);
        stops.sort_unstable();
        stops.dedup();
        Ok(Grammars {
            factory,
            eos,
            stops,
        })
    }

    /// A guide for one reply; `None` for plain text. An invalid schema, regex or
    /// grammar, or one no text satisfies, is an error here, before any token.
    pub fn guide(&self, format: &ResponseFormat) -> Result<Option<Guide>> {
        let Some(grammar) = format.grammar()? else {
            return Ok(None);
        };
        let parser = self.factory.create_parser(grammar).map_err(grammar_err)?;
        let mut guide = Guide {
            matcher: Matcher::new(Ok(parser)),
            mask: Vec::new(),
            stale: true,
            eos: self.eos,
            stops: self.stops.clone(),
        };
        guide.update()?;
        if guide.mask.iter().all(|&w| w == 0) {
            return Err(Error::Grammar(
                "no text satisfies this response format".into(),
            ));
        }
        Ok(Some(guide))
    }
}

/// One model's compiled vocabulary, built on the first guided reply and kept.
#[derive(Default)]
pub struct GrammarCache(OnceLock<Arc<Grammars>>);

impl GrammarCache {
    /// A guide for a reply of shape `format` (`None`: plain text, nothing compiled).
    pub fn guide(&self, tk: &Tokenizer, format: &ResponseFormat) -> Result<Option<Guide>> {
        if *format == ResponseFormat::Text {
            return Ok(None);
        }
        let grammars = match self.0.get() {
            Some(g) => g.clone(),
            None => {
                let g = Arc::new(Grammars::for_tokenizer(tk)?);
                self.0.get_or_init(|| g).clone()
            }
        };
        grammars.guide(format)
    }
}

fn grammar_err(e: impl std::fmt::Display) -> Error {
    Error::Grammar(e.to_string())
}

/// One reply's parser state and the tokens allowed next.
pub struct Guide {
    matcher: Matcher,
    /// Bit `t % 32` of word `t / 32`: token `t` is allowed next.
    mask: Vec<u32>,
    /// The matcher moved past the position `mask` is for.
    stale: bool,
    eos: u32,
    stops: Vec<u32>,
}

impl Guide {
    /// The tokens allowed next, as bits (see `allows`).
    pub fn mask(&self) -> &[u32] {
        &self.mask
    }

    pub fn allows(&self, token: u32) -> bool {
        allows(&self.mask, token)
    }

    /// Advances past `token` (one the mask allowed) and computes the next mask; true
    /// when the text is complete and nothing may follow.
    pub fn accept(&mut self, token: u32) -> Result<bool> {
        let complete = self.consume(token)?;
        if !complete {
            self.update()?;
        }
        Ok(complete)
    }

    /// Advances past `token` without computing the next mask yet (`update` does:
    /// until then `mask` is the previous position's, `is_stale` says so).
    pub fn consume(&mut self, token: u32) -> Result<bool> {
        self.matcher.consume_token(token).map_err(grammar_err)?;
        if self.matcher.is_stopped() {
            return match self.matcher.get_error() {
                Some(e) => Err(Error::Grammar(e)),
                None => Ok(true),
            };
        }
        self.stale = true;
        Ok(false)
    }

    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// Computes the mask for the next token (when it is stale); the stop tokens join
    /// the end-of-text token wherever the grammar may end.
    pub fn update(&mut self) -> Result<()> {
        if !self.stale {
            return Ok(());
        }
        let vob = self.matcher.compute_mask().map_err(grammar_err)?;
        self.mask.clear();
        self.mask.extend_from_slice(vob.as_slice());
        let may_end = allows(&self.mask, self.eos);
        for &t in &self.stops {
            set(&mut self.mask, t, may_end);
        }
        self.stale = false;
        Ok(())
    }
}

/// Whether bit `token` of `mask` is set (tokens past the mask are not allowed).
pub fn allows(mask: &[u32], token: u32) -> bool {
    mask.get(token as usize / 32)
        .is_some_and(|w| w & (1 << (token % 32)) != 0)
}

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
    fn numbers_are_bounded_and_literals_left_alone() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "x": {"type": "number"},
                "n": {"type": ["integer", "null"], "minimum": 3},
                "m": {"type": "number", "multipleOf": 0.5, "exclusiveMaximum": 10},
                "c": {"const": {"type": "number"}},
                "e": {"enum": [{"type": "integer"}]}
            }
        });
        bound_numbers(&mut s);
        let p = &s["properties"];
        assert_eq!(p["x"]["multipleOf"], json!(NUMBER_STEP));
        assert_eq!(p["x"]["minimum"], json!(-NUMBER_LIMIT));
        assert_eq!(p["x"]["maximum"], json!(NUMBER_LIMIT));
        assert_eq!(p["n"]["minimum"], json!(3));
        assert_eq!(p["n"]["maximum"], json!(NUMBER_LIMIT));
        assert!(
            p["n"].get("multipleOf").is_none(),
            "integers have no fraction"
        );
        assert_eq!(p["m"]["multipleOf"], json!(0.5));
        assert!(
            p["m"].get("maximum").is_none(),
            "an exclusive bound is a bound"
        );
        assert_eq!(p["c"], json!({"const": {"type": "number"}}));
        assert_eq!(p["e"], json!({"enum": [{"type": "integer"}]}));
    }

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

    /// A byte-level vocabulary of single bytes plus a special token: a JSON Schema
    /// guide allows only what can start the value, and ends on EOS.
    #[test]
    fn guide_over_a_byte_vocabulary() {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        tokens.push(b"\xFF<eos>".to_vec());
        let eos = 256;
        let g = Grammars::new(&tokens, eos, &[eos]).unwrap();
        let format = ResponseFormat::Regex {
            pattern: "ab?".into(),
        };
        let mut guide = g.guide(&format).unwrap().unwrap();
        let allowed: Vec<u32> = (0..257).filter(|&t| guide.allows(t)).collect();
        assert_eq!(allowed, vec![b'a' as u32]);
        assert!(!guide.accept(b'a' as u32).unwrap());
        assert!(guide.allows(b'b' as u32) && guide.allows(eos));
        assert!(guide.accept(b'b' as u32).unwrap(), "complete after \"ab\"");
        assert!(g.guide(&ResponseFormat::Text).unwrap().is_none());
    }
}
