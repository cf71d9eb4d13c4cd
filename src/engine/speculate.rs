//! Speculative decoding: guesses of the next tokens that the model checks in one
//! forward. A proposer guesses; the backend runs the last picked token and the
//! guesses in one pass (`Backend::verify`), each position's logits bit for bit those
//! of one-token steps; the generate loop picks at every position as one-token decode
//! would (the same logits, penalty, mask and draw), keeping guesses while they equal
//! its picks. So the text is plain decoding's, token for token and draw for draw —
//! for greedy and sampled replies alike — and only the number of forwards changes:
//! where decode is bound by reading the weights, k positions cost about one.
//!
//! The proposer here is prompt lookup: the last few tokens of the conversation are
//! looked for earlier in it, and what followed them there is the guess. It needs no
//! second model and pays on replies that copy from their input (extraction,
//! summaries, code edits, structured output from a text).

use serde::{Deserialize, Serialize};

/// Whether replies are decoded speculatively.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speculation {
    /// Prompt lookup, on backends that verify several positions in one pass.
    #[default]
    Auto,
    /// One token a forward.
    Off,
}

/// The longest and shortest run of tokens looked up: a longer match is a better
/// guess; one token alone matches too often in open text to pay for its checks.
const NGRAM_MAX: usize = 3;
const NGRAM_MIN: usize = 2;

/// Prompt lookup with a guess length that follows how many guesses were kept.
#[derive(Clone, Debug)]
pub struct Lookup {
    /// Tokens to guess next time (1..=`most`).
    k: usize,
    most: usize,
}

impl Lookup {
    /// Guesses of up to `most` tokens (the backend's verify width less the input).
    pub fn new(most: usize) -> Lookup {
        Lookup {
            k: most.min(4),
            most,
        }
    }

    /// Up to `limit` (and the current guess length) tokens that followed the most
    /// recent earlier occurrence of `history`'s last tokens; none without a match.
    pub fn propose(&self, history: &[u32], limit: usize) -> Vec<u32> {
        let want = self.k.min(limit);
        if want == 0 {
            return Vec::new();
        }
        for n in (NGRAM_MIN..=NGRAM_MAX).rev() {
            if let Some(next) = find_earlier(history, n) {
                let end = (next + want).min(history.len());
                if end > next {
                    return history[next..end].to_vec();
                }
            }
        }
        Vec::new()
    }

    /// After a check: all `proposed` kept lengthens the next guess; a miss makes it
    /// what was kept, and one more.
    pub fn update(&mut self, proposed: usize, accepted: usize) {
        self.k = if accepted == proposed {
            (self.k + 2).min(self.most)
        } else {
            (accepted + 1).clamp(1, self.most)
        };
    }
}

/// Where what followed the most recent earlier occurrence of `h`'s last `n` tokens
/// starts (an occurrence that ends before `h`'s last token, so something follows).
fn find_earlier(h: &[u32], n: usize) -> Option<usize> {
    if h.len() <= n {
        return None;
    }
    let tail = &h[h.len() - n..];
    (0..h.len() - n)
        .rev()
        .find(|&s| &h[s..s + n] == tail)
        .map(|s| s + n)
}

/// What speculation did over a reply (reported in `Usage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpeculationStats {
    /// Guessed tokens checked.
    pub proposed: usize,
    /// Guesses that were the token picked.
    pub accepted: usize,
    /// Forwards of the model while decoding (a check is one).
    pub forwards: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_recent_longest_match_is_proposed() {
        // "1 2 3 4 5 ... 9 2 3 7 ... 2 3" : the 2-gram "2 3" last occurred before 7.
        let h = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 2, 3];
        let l = Lookup::new(8);
        assert_eq!(l.propose(&h, 8), vec![7, 8, 2, 3]);
        assert_eq!(l.propose(&h, 2), vec![7, 8]);
        // The 3-gram "9 2 3" wins over a more recent 2-gram.
        let h = [9, 2, 3, 4, 4, 2, 3, 5, 9, 2, 3];
        assert_eq!(l.propose(&h, 8), vec![4, 4, 2, 3]);
    }

    #[test]
    fn no_match_no_guess() {
        let l = Lookup::new(8);
        assert!(l.propose(&[1, 2, 3, 4], 8).is_empty());
        assert!(l.propose(&[], 8).is_empty());
        assert!(
            l.propose(&[5, 5], 8).is_empty(),
            "nothing follows the match"
        );
        assert!(l.propose(&[5, 5, 5, 5], 0).is_empty());
        // A repeated token: the 3-gram "5 5 5" occurred at 0, and "5" follows it.
        assert_eq!(l.propose(&[5, 5, 5, 5], 8), vec![5]);
    }

    #[test]
    fn the_guess_length_follows_acceptance() {
        let mut l = Lookup::new(8);
        let h: Vec<u32> = (0..20).chain(0..3).collect();
        assert_eq!(l.propose(&h, 99).len(), 4);
        l.update(4, 4);
        assert_eq!(l.propose(&h, 99).len(), 6);
        l.update(6, 6);
        l.update(8, 8);
        assert_eq!(l.propose(&h, 99).len(), 8);
        l.update(8, 0);
        assert_eq!(l.propose(&h, 99).len(), 1);
        l.update(1, 1);
        assert_eq!(l.propose(&h, 99).len(), 3);
    }
}
