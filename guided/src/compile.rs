//! The compiler: a response format turned by `llguidance` into a parser that gives,
//! before each token, the set of tokens that keep the text valid.
//!
//! A `Grammars` is one vocabulary compiled (tens of milliseconds): the engine keeps
//! one per model, each reply gets its own `Guide`.

use crate::format::options;
use crate::{allows, set, GrammarError, ResponseFormat, Result};
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::json;
use std::sync::Arc;

/// The grammar llguidance compiles for `format`; `None` for plain text.
fn grammar(format: &ResponseFormat) -> Result<Option<TopLevelGrammar>> {
    Ok(Some(match format {
        ResponseFormat::JsonSchema { schema, strict } => {
            if !schema.is_object() && !schema.is_boolean() {
                return Err(GrammarError(
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
                return Err(GrammarError("the grammar is empty".into()));
            }
            TopLevelGrammar::from_lark(grammar.clone())
        }
        ResponseFormat::Text => return Ok(None),
    }))
}

/// The compiled form of one vocabulary: what every guide of that tokenizer shares.
pub struct Grammars {
    factory: ParserFactory,
    eos: u32,
    /// Tokens that end a reply: allowed wherever the grammar allows `eos`.
    stops: Vec<u32>,
}

impl Grammars {
    /// `tokens[id]` is token `id`'s bytes (a special token: 0xFF then its text, as
    /// llguidance marks them; none: empty); `eos` ends the text, and so does every
    /// token in `stops`.
    pub fn new(tokens: &[Vec<u8>], eos: u32, stops: &[u32]) -> Result<Grammars> {
        let n = u32::try_from(tokens.len())
            .map_err(|_| GrammarError("the vocabulary is too large".into()))?;
        if eos >= n {
            return Err(GrammarError(format!(
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
        let Some(grammar) = grammar(format)? else {
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
            return Err(GrammarError(
                "no text satisfies this response format".into(),
            ));
        }
        Ok(Some(guide))
    }
}

fn grammar_err(e: impl std::fmt::Display) -> GrammarError {
    GrammarError(e.to_string())
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
                Some(e) => Err(GrammarError(e)),
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

#[cfg(test)]
mod tests {
    use super::*;

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
