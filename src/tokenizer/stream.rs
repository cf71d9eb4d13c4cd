//! Streaming detokenization: turns one token id at a time into text that is always
//! valid UTF-8, holding back bytes until a character that spans several tokens is whole.

use super::Tokenizer;
use crate::error::Result;

#[derive(Default)]
pub struct TextStream {
    ids: Vec<u32>,
    /// Start of the window that is decoded again each step (context for the decoder).
    prefix: usize,
    /// End of what has been emitted.
    read: usize,
}

impl TextStream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token; returns the text it completes (possibly empty).
    pub fn push(&mut self, tk: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let before = tk.decode(&self.ids[self.prefix..self.read], true)?;
        let now = tk.decode(&self.ids[self.prefix..], true)?;
        if now.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        match now.get(before.len()..) {
            Some(new) if now.starts_with(&before) => {
                let new = new.to_string();
                self.prefix = self.read;
                self.read = self.ids.len();
                Ok(new)
            }
            _ => Ok(String::new()),
        }
    }

    /// Whatever is still held back (an incomplete character at the very end).
    pub fn finish(&mut self, tk: &Tokenizer) -> Result<String> {
        let before = tk.decode(&self.ids[self.prefix..self.read], true)?;
        let now = tk.decode(&self.ids[self.prefix..], true)?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(now.get(before.len()..).unwrap_or_default().to_string())
    }
}
