//! The draft model of speculative decoding: another model of the same vocabulary
//! that proposes the guesses.

use super::Engine;
use crate::engine::backend::Backend;
use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

impl Engine {
    /// Takes `draft`'s model, on whichever backend it was loaded, as the draft of
    /// speculative decoding: it proposes the guesses instead of prompt lookup
    /// (`speculate::draft`, through `LoadedModel::backend` as any backend runs).
    /// Refused (`BadOptions`) for a model of another vocabulary, and while this
    /// model's backend does not check guesses in one pass.
    pub fn set_draft(&mut self, draft: Engine) -> Result<()> {
        self.can_draft()?;
        same_vocabulary(&self.tokenizer, &draft.tokenizer)?;
        self.draft = Some(draft.body);
        Ok(())
    }

    pub(super) fn can_draft(&mut self) -> Result<()> {
        self.idle()?;
        if self.body.backend(None).verifies() < 2 {
            return Err(Error::invalid(
                "a draft model needs a backend that checks several tokens in one pass",
            ));
        }
        Ok(())
    }

    /// Whether a draft model proposes the guesses (`set_draft`).
    pub fn has_draft(&self) -> bool {
        self.draft.is_some()
    }
}

/// A draft's tokens must be the target's, id for id: its guesses are the target's ids.
pub(super) fn same_vocabulary(target: &Tokenizer, draft: &Tokenizer) -> Result<()> {
    let n = target.vocab_size();
    if draft.vocab_size() != n {
        return Err(Error::invalid(format!(
            "the draft model's vocabulary has {} tokens, the model's {n}: a draft needs the same vocabulary",
            draft.vocab_size()
        )));
    }
    match (0..n as u32).find(|&id| target.token_text(id) != draft.token_text(id)) {
        Some(id) => Err(Error::invalid(format!(
            "the draft model's token {id} is {:?}, the model's {:?}: a draft needs the same vocabulary",
            draft.token_text(id).unwrap_or_default(),
            target.token_text(id).unwrap_or_default()
        ))),
        None => Ok(()),
    }
}
