//! Speculative decoding: guesses of the next tokens that the model checks in one
//! forward. A proposer guesses; the backend runs the last picked token and the
//! guesses in one pass (`Backend::verify`), each position's logits bit for bit those
//! of one-token steps; the generate loop picks at every position as one-token decode
//! would (the same logits, penalty, mask and draw), keeping guesses while they equal
//! its picks. So the text is plain decoding's, token for token and draw for draw —
//! for greedy and sampled replies alike — and only the number of forwards changes:
//! where decode is bound by reading the weights, k positions cost about one.
//!
//! Two proposers guess. Prompt lookup, the default: the last few tokens of the
//! conversation are looked for earlier in it, and what followed them there is the
//! guess; it needs no second model and pays on replies that copy from their input
//! (extraction, summaries, code edits, structured output from a text). A draft model
//! (`draft`), when the app loads one: a smaller model of the same vocabulary, run
//! ahead greedily on the same backend.
//!
//! Sampled replies keep plain decoding's draws: each position draws from the target's
//! distribution and a guess is kept when it is the draw. For a proposer that guesses
//! one token (greedy drafts, prompt lookup) that is the standard accept/reject rule:
//! the guess is kept with the target's probability of it, and a miss draws from the
//! target's distribution without the guess (the residual) — so the text follows the
//! target's distribution and the same seed gives the same text with or without
//! speculation.

use super::{common_prefix, Backend, Logits, Want};
use crate::error::Result;
use serde::{Deserialize, Serialize};

/// Whether replies are decoded speculatively.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speculation {
    /// Prompt lookup where it pays: on backends that verify several positions in one
    /// pass, guessing as many tokens as the measured cost of a check and the rate of
    /// kept guesses make worth it (none where a check costs what its steps would).
    #[default]
    Auto,
    /// Prompt lookup at every match, paying or not (tests, benchmarks).
    On,
    /// One token a forward.
    Off,
}

/// The longest and shortest run of tokens looked up: a longer match is a better
/// guess; one token alone matches too often in open text to pay for its checks.
const NGRAM_MAX: usize = 3;
const NGRAM_MIN: usize = 2;

/// Prompt lookup: what followed the conversation's last tokens where they last
/// occurred before.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lookup;

impl Lookup {
    /// Up to `limit` tokens that followed the most recent earlier occurrence of
    /// `history`'s last tokens (the longest run that occurred); none without a match.
    pub fn propose(&self, history: &[u32], limit: usize) -> Vec<u32> {
        if limit == 0 {
            return Vec::new();
        }
        for n in (NGRAM_MIN..=NGRAM_MAX).rev() {
            if let Some(next) = find_earlier(history, n) {
                let end = (next + limit).min(history.len());
                if end > next {
                    return history[next..end].to_vec();
                }
            }
        }
        Vec::new()
    }
}

/// A draft model's guesses: up to `limit` tokens it picks greedily after `history`
/// (none at or past `vocab`, the target's vocabulary, nor past its context), and how
/// many tokens it ran to catch up with `history` first. Its KV cache follows the
/// conversation: what it holds past the common prefix with `history` (guesses that
/// were not kept) is cut, what it lacks is run.
pub async fn draft<B: Backend>(
    d: &mut B,
    history: &[u32],
    limit: usize,
    vocab: usize,
) -> Result<(Vec<u32>, usize)> {
    if limit == 0 || history.is_empty() || history.len() + limit >= d.context_length() {
        return Ok((Vec::new(), 0));
    }
    // The last token always runs: its logits give the first guess.
    let keep = common_prefix(d.tokens(), history).min(history.len() - 1);
    d.truncate(keep);
    let have = d.tokens().len().min(keep);
    let caught_up = history.len() - have;
    let mut run = history[have..].to_vec();
    let mut guesses = Vec::with_capacity(limit);
    while guesses.len() < limit {
        match greedy(d, &run).await? {
            Some(t) if (t as usize) < vocab => guesses.push(t),
            _ => break,
        }
        run = vec![guesses[guesses.len() - 1]];
    }
    Ok((guesses, caught_up))
}

/// Runs `tokens` on a draft and returns the most likely next token: any backend
/// drafts (the CPU's returns every logit, the GPU's its best candidate).
pub async fn greedy<B: Backend>(d: &mut B, tokens: &[u32]) -> Result<Option<u32>> {
    Ok(match d.forward(tokens, Want::top(1)).await? {
        Logits::Full(l) => (0u32..)
            .zip(l)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(t, _)| t),
        Logits::Top(c) => c.first().map(|&(t, _)| t),
    })
}

/// How many tokens to guess: the number that makes the most tokens per unit of time,
/// from what this reply measured. A check of `1 + k` positions costs
/// `1 + k·extra[k]` one-token forwards (measured for each k: a kernel that reads a
/// row once for several tokens costs less per token the more it has), and keeps `a + a² + … + aᵏ` guesses on average
/// when each guess is kept with chance `a` after the ones before it were; guessing
/// pays when `(1 + kept) / (1 + k·extra)` is over 1.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Most guesses a check takes (the backend's verify width less one).
    most: usize,
    always: bool,
    /// Guesses kept and guesses tried (a miss ends a check: later ones are not
    /// tried), counts that fade so the rate follows the reply.
    kept: f64,
    tried: f64,
    /// A one-token forward in ms (moving average), once one was timed.
    step_ms: Option<f64>,
    /// A check of `k` guesses: its cost per position past the first, in one-token
    /// forwards.
    extra: Vec<f64>,
    /// Which of `extra` were measured. The others take the prior or the lowest
    /// measured value, whichever is lower, until tried (optimism: each width is
    /// tried once while it might pay). Not the value measured at another width:
    /// kernels that take tokens by groups (the CPU backend's SIMD ones, four at a
    /// time) make a short check cost more a position than a long one, and a first
    /// check of one guess would otherwise rule out the long checks that pay; nor the
    /// prior alone, which kept a reply at two guesses a check measured at 0.3 a
    /// position (Chromium, two threads) where seven paid more. A backend whose checks
    /// cost their steps is found out after one check of each width.
    measured: Vec<bool>,
    /// Steps since the last check while guessing did not pay: after `probe` of them
    /// one guess is checked, so a reply that turns to copying is noticed.
    idle: usize,
    /// `PROBE`, doubled by each probe that kept nothing (up to `PROBE_MOST`): open
    /// text pays ~1% for its probes, not the ~5% of one every `PROBE` steps.
    probe: usize,
    /// A draft model's forward in ms (moving average), when a draft guesses.
    draft_ms: Option<f64>,
}

/// A check's cost a position past the first, in one-token forwards, before one is
/// measured (SIMD kernels in Chromium, the default model).
const PRIOR_EXTRA: f64 = 0.6;
/// Fading of the kept/tried counts per check, and of the timings per sample.
const FADE: f64 = 0.8;
const SMOOTH: f64 = 0.5;
const PROBE: usize = 16;
/// Tokens per forward's cost over which guessing is worth it (noise in the timings
/// aside).
const GAIN_MIN: f64 = 1.02;
const PROBE_MOST: usize = 256;
/// A draft whose forward costs this many one-token forwards of the model or more is
/// not probed: while guessing does not pay it falls behind, and a probe first runs it
/// over every token since the last check — about what decoding them cost again.
const DRAFT_MOST: f64 = 0.5;

impl Policy {
    /// `most` guesses at most; `always`: guess at every step (`Speculation::On`).
    pub fn new(most: usize, always: bool) -> Policy {
        Policy {
            most,
            always,
            // Priors: 3 of 4 guesses kept (hopeful: a first check is what measures
            // it), and `PRIOR_EXTRA`.
            kept: 3.0,
            tried: 4.0,
            step_ms: None,
            extra: vec![PRIOR_EXTRA; most + 1],
            measured: vec![false; most + 1],
            idle: 0,
            probe: PROBE,
            draft_ms: None,
        }
    }

    /// The chance that a guess is kept after the ones before it were.
    pub fn acceptance(&self) -> f64 {
        self.kept / self.tried
    }

    /// Tokens per forward's cost guessing `k` (each guess a draft forward too).
    fn gain(&self, k: usize) -> f64 {
        let a = self.acceptance();
        let kept: f64 = (1..=k as i32).map(|i| a.powi(i)).sum();
        (1.0 + kept) / (1.0 + k as f64 * (self.extra[k] + self.draft_cost()))
    }

    /// A draft forward in one-token forwards of the model (0 without a draft).
    fn draft_cost(&self) -> f64 {
        match (self.draft_ms, self.step_ms) {
            (Some(d), Some(s)) if s > 0.0 => d / s,
            _ => 0.0,
        }
    }

    /// The number of guesses that gains most (0 with none allowed).
    fn best(&self) -> usize {
        (1..=self.most)
            .max_by(|&a, &b| self.gain(a).total_cmp(&self.gain(b)))
            .unwrap_or(0)
    }

    /// Tokens to guess at this step (0: run one token).
    pub fn guesses(&mut self) -> usize {
        let best = self.best();
        if self.always {
            return best;
        }
        if self.step_ms.is_none() {
            return 0; // a one-token forward is timed first
        }
        if self.gain(best) > GAIN_MIN {
            return best;
        }
        if self.draft_cost() >= DRAFT_MOST {
            return 0;
        }
        self.idle += 1;
        if self.idle >= self.probe {
            1
        } else {
            0
        }
    }

    /// A draft model's forward took `ms` (an average over a check's guesses).
    pub fn drafted(&mut self, ms: f64) {
        self.draft_ms = Some(match self.draft_ms {
            Some(d) => d + SMOOTH * (ms - d),
            None => ms,
        });
    }

    /// A one-token forward took `ms`.
    pub fn stepped(&mut self, ms: f64) {
        self.step_ms = Some(match self.step_ms {
            Some(s) => s + SMOOTH * (ms - s),
            None => ms,
        });
    }

    /// A check of `proposed` guesses (and the token before them) took `ms` (the
    /// model's pass: a draft's forwards are `drafted`) and kept `accepted`.
    pub fn checked(&mut self, proposed: usize, accepted: usize, ms: f64) {
        let probed = self.idle >= self.probe;
        self.idle = 0;
        self.kept = self.kept * FADE + accepted as f64;
        self.tried = self.tried * FADE + (accepted + usize::from(accepted < proposed)) as f64;
        if let (Some(step), Some(extra)) = (self.step_ms, self.extra.get_mut(proposed)) {
            let seen = ((ms / step - 1.0) / proposed.max(1) as f64).clamp(0.0, 2.0);
            *extra += SMOOTH * (seen - *extra);
            self.measured[proposed] = true;
            let lowest = (self.extra.iter().zip(&self.measured))
                .filter(|(_, &m)| m)
                .fold(PRIOR_EXTRA, |low, (&e, _)| low.min(e));
            for (x, &m) in self.extra.iter_mut().zip(&self.measured) {
                if !m {
                    *x = lowest;
                }
            }
        }
        // A probe (guessing did not pay) after which guessing still does not pay —
        // it kept nothing, or its check cost what the kept guesses saved: wait longer
        // for the next. A check that kept guesses and pays: back to probing often.
        let pays = self.gain(self.best()) > GAIN_MIN;
        self.probe = match (probed && !pays, accepted) {
            (true, _) => (self.probe * 2).min(PROBE_MOST),
            (false, 0) => self.probe,
            (false, _) => PROBE,
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
        assert_eq!(Lookup.propose(&h, 4), vec![7, 8, 2, 3]);
        assert_eq!(Lookup.propose(&h, 2), vec![7, 8]);
        // The 3-gram "9 2 3" wins over a more recent 2-gram.
        let h = [9, 2, 3, 4, 4, 2, 3, 5, 9, 2, 3];
        assert_eq!(Lookup.propose(&h, 4), vec![4, 4, 2, 3]);
    }

    #[test]
    fn no_match_no_guess() {
        assert!(Lookup.propose(&[1, 2, 3, 4], 8).is_empty());
        assert!(Lookup.propose(&[], 8).is_empty());
        assert!(
            Lookup.propose(&[5, 5], 8).is_empty(),
            "nothing follows the match"
        );
        assert!(Lookup.propose(&[5, 5, 5, 5], 0).is_empty());
        // A repeated token: the 3-gram "5 5 5" occurred at 0, and "5" follows it.
        assert_eq!(Lookup.propose(&[5, 5, 5, 5], 8), vec![5]);
    }

    #[test]
    fn a_draft_that_costs_a_forward_is_not_probed() {
        let probes = |draft_ms| {
            let mut p = Policy::new(7, false);
            p.stepped(10.0);
            p.drafted(draft_ms);
            for _ in 0..5 {
                p.checked(3, 0, 60.0);
            }
            (0..PROBE + 1).filter(|_| p.guesses() > 0).count()
        };
        assert_eq!(probes(8.0), 0, "a draft near the model's cost");
        assert!(probes(1.0) > 0, "a small draft is probed");
    }

    #[test]
    fn a_short_check_that_costs_its_steps_does_not_rule_out_long_ones() {
        // Kernels that take tokens by fours: a check of one guess costs two steps,
        // one of seven costs four.
        let mut p = Policy::new(7, false);
        p.stepped(10.0);
        for _ in 0..3 {
            p.checked(1, 1, 20.0);
        }
        let k = p.guesses();
        assert!(k > 1, "the wider checks are still untried: {k}");
        p.checked(7, 7, 40.0);
        p.checked(7, 7, 40.0);
        assert_eq!(p.guesses(), 7, "{:?}", p.extra);
        // A cheap width measured makes the untried ones worth a try: two guesses at
        // 0.3 a position do not keep the reply at two.
        let mut p = Policy::new(7, false);
        p.stepped(10.0);
        for _ in 0..6 {
            p.checked(2, 2, 16.0);
        }
        assert!(p.guesses() > 2, "{:?}", p.extra);
    }

    #[test]
    fn guesses_follow_acceptance_and_the_cost_of_a_check() {
        let mut p = Policy::new(7, false);
        assert_eq!(p.guesses(), 0, "a one-token forward is timed first");
        p.stepped(10.0);
        let first = p.guesses();
        assert!((1..=7).contains(&first), "the priors pay: {first}");
        // Every guess kept, a check of 8 costing 4 steps: the longest guess.
        for _ in 0..5 {
            p.checked(7, 7, 40.0);
        }
        assert_eq!(p.guesses(), 7);
        // Every guess missed: none, until a probe.
        for _ in 0..10 {
            p.checked(3, 0, 40.0);
        }
        let waited = (0..PROBE).take_while(|_| p.guesses() == 0).count();
        assert_eq!(waited, PROBE - 1, "one guess after {PROBE} steps");
        // A probe that keeps nothing doubles the wait; so does one that keeps its
        // guess when its check cost what the guess saved (2 positions, 2 steps' time).
        p.checked(1, 0, 20.0);
        let waited = (0..4 * PROBE).take_while(|_| p.guesses() == 0).count();
        assert_eq!(waited, 2 * PROBE - 1);
        p.checked(1, 1, 20.0);
        let waited = (0..8 * PROBE).take_while(|_| p.guesses() == 0).count();
        assert_eq!(waited, 4 * PROBE - 1);
        // Cheap checks that keep their guesses: guessing pays again, at every step.
        for _ in 0..8 {
            p.checked(3, 3, 12.0);
        }
        assert!(p.guesses() > 0 && p.guesses() > 0, "{:?}", p.extra);
        // A check that costs its steps (plain loops): guessing never pays.
        let mut p = Policy::new(7, false);
        p.stepped(10.0);
        for k in 1..=7 {
            for _ in 0..5 {
                p.checked(k, k - 1, 10.0 * (k + 1) as f64);
            }
        }
        assert!(p.extra.iter().skip(1).all(|&e| e > 0.9), "{:?}", p.extra);
        assert_eq!(p.guesses(), 0);
        // `On` guesses regardless, as many as pay best or one.
        let mut p = Policy::new(7, true);
        assert!(p.guesses() >= 1);
    }
}
