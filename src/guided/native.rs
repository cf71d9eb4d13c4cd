//! Natively the compiler is linked in: the cache holds `pippin_guided::Grammars`.

use super::{vocabulary, ResponseFormat};
use crate::error::Result;
use crate::tokenizer::Tokenizer;
use pippin_guided::Grammars;
use std::sync::{Arc, OnceLock};

pub use pippin_guided::Guide;

/// One model's compiled vocabulary, built on the first guided reply and kept.
#[derive(Default)]
pub struct GrammarCache(OnceLock<Arc<Grammars>>);

impl GrammarCache {
    /// A guide for a reply of shape `format` (`None`: plain text, nothing compiled).
    /// An invalid schema, regex or grammar, or one no text satisfies, is an error here.
    /// (Async as the browser's, which may first load its guided module.)
    pub async fn guide(&self, tk: &Tokenizer, format: &ResponseFormat) -> Result<Option<Guide>> {
        if *format == ResponseFormat::Text {
            return Ok(None);
        }
        let grammars = match self.0.get() {
            Some(g) => g.clone(),
            None => {
                let (tokens, eos) = vocabulary(tk)?;
                let g = Arc::new(Grammars::new(&tokens, eos, tk.stop_tokens())?);
                self.0.get_or_init(|| g).clone()
            }
        };
        Ok(grammars.guide(format)?)
    }
}
