//! Choosing the next token from logits: greedy, or temperature with top-k, top-p and
//! min-p filtering, and a repetition penalty. Seeded, so a seed reproduces a text.
//! Order: penalty → temperature → top-k → top-p → min-p → draw (Hugging Face's order).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SamplerOptions {
    /// 0 = greedy (argmax).
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 = all.
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p; 1 = all.
    pub top_p: f32,
    /// Drop tokens less likely than min_p × the most likely one; 0 = none.
    pub min_p: f32,
    /// > 1 makes tokens seen in the last `repeat_last_n` less likely; 1 = off.
    pub repetition_penalty: f32,
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0x5eed,
        }
    }
}

/// The smallest temperature that is not greedy: logits (up to ~1e3) divided by it stay
/// far from f32's range, where a subnormal one would make them infinite and the
/// probabilities NaN.
pub const MIN_TEMPERATURE: f32 = 1e-3;

impl SamplerOptions {
    pub fn validate(&self) -> Result<(), String> {
        let ok = (self.temperature == 0.0 || (MIN_TEMPERATURE..=1e3).contains(&self.temperature))
            && (0.0..=1.0).contains(&self.top_p)
            && self.top_p > 0.0
            && (0.0..=1.0).contains(&self.min_p)
            && self.repetition_penalty > 0.0
            && self.repetition_penalty.is_finite();
        if ok {
            Ok(())
        } else {
            Err(format!(
                "sampling options out of range: temperature {} (0 for greedy, or {MIN_TEMPERATURE} to 1000), top_p {} (0 < p ≤ 1), min_p {} (0 to 1), repetition_penalty {} (> 0)",
                self.temperature, self.top_p, self.min_p, self.repetition_penalty
            ))
        }
    }
}

pub use crate::rng::Rng;

/// A forward pass's result for the last token.
#[derive(Clone, Debug, PartialEq)]
pub enum Logits {
    /// Every logit, before any penalty.
    Full(Vec<f32>),
    /// The most likely tokens, best first, after the penalty.
    Top(Vec<(u32, f32)>),
}

pub struct Sampler {
    pub opts: SamplerOptions,
    rng: Rng,
}

pub fn argmax(x: &[f32]) -> usize {
    (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b })
}

impl Sampler {
    pub fn new(opts: SamplerOptions) -> Self {
        let rng = Rng::new(opts.seed);
        Sampler { opts, rng }
    }

    /// Picks a token; `history` is every token so far (prompt included), for the penalty.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        self.penalize(logits, history);
        if self.opts.temperature == 0.0 {
            return argmax(logits) as u32;
        }
        let all: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
        self.draw(all)
    }

    /// Picks from a backend's result: full logits (penalty applied here) or the GPU's
    /// best candidates (penalty already applied there).
    pub fn choose(&mut self, logits: Logits, history: &[u32]) -> u32 {
        match logits {
            Logits::Full(mut l) => self.sample(&mut l, history),
            Logits::Top(c) if self.opts.temperature == 0.0 => c.first().map_or(0, |e| e.0),
            Logits::Top(c) => self.draw(c),
        }
    }

    fn draw(&mut self, logits: Vec<(u32, f32)>) -> u32 {
        let u = self.next_u();
        self.pick(logits, u)
    }

    /// The next uniform draw in [0, 1): one per sampled token (none when greedy). A
    /// device that picks tokens itself (`choose.wgsl`) gets it in its step uniform,
    /// so a seed gives the same text either way.
    pub fn next_u(&mut self) -> f32 {
        self.rng.next_f32()
    }

    /// The token the draw `u` picks from `logits` (id, logit) after temperature and
    /// the filters: the first whose cumulative probability exceeds u × their sum.
    pub fn pick(&self, logits: Vec<(u32, f32)>, u: f32) -> u32 {
        let cands = self.candidates_of(logits);
        let r = u * cands.iter().map(|c| c.1).sum::<f32>();
        let mut acc = 0.0;
        for &(id, p) in &cands {
            acc += p;
            if r < acc {
                return id;
            }
        }
        cands.last().map_or(0, |c| c.0)
    }

    /// Applies the repetition penalty to the tokens of `penalized_ids(history)`.
    pub fn penalize(&self, logits: &mut [f32], history: &[u32]) {
        let p = self.opts.repetition_penalty;
        if p == 1.0 {
            return;
        }
        for t in self.penalized_ids(history) {
            if let Some(l) = logits.get_mut(t as usize) {
                *l = if *l > 0.0 { *l / p } else { *l * p };
            }
        }
    }

    /// The distinct tokens among the last `repeat_last_n` of `history`.
    pub fn penalized_ids(&self, history: &[u32]) -> Vec<u32> {
        let recent = &history[history.len().saturating_sub(self.opts.repeat_last_n)..];
        let mut ids = recent.to_vec();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// (token, probability) after temperature and the filters, most likely first;
    /// probabilities are not renormalized (the draw scales by their sum).
    pub fn candidates(&self, logits: &[f32]) -> Vec<(u32, f32)> {
        self.candidates_of(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (i as u32, l))
                .collect(),
        )
    }

    fn candidates_of(&self, mut c: Vec<(u32, f32)>) -> Vec<(u32, f32)> {
        let o = &self.opts;
        if c.is_empty() {
            return c;
        }
        c.iter_mut().for_each(|e| e.1 /= o.temperature);
        let k = if o.top_k == 0 {
            c.len()
        } else {
            o.top_k.min(c.len())
        };
        if k < c.len() {
            c.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
            c.truncate(k);
        }
        c.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        let max = c[0].1;
        let mut sum = 0.0;
        for e in c.iter_mut() {
            e.1 = (e.1 - max).exp();
            sum += e.1;
        }
        c.iter_mut().for_each(|e| e.1 /= sum);
        if o.top_p < 1.0 {
            let mut acc = 0.0;
            let keep = c.iter().position(|e| {
                acc += e.1;
                acc >= o.top_p
            });
            c.truncate(keep.map_or(c.len(), |i| i + 1));
        }
        if o.min_p > 0.0 {
            let floor = c[0].1 * o.min_p;
            c.retain(|e| e.1 >= floor);
        }
        c
    }
}

/// log p(target) under one row of logits (a stable log-softmax).
pub fn log_prob(logits: &[f32], target: u32) -> f32 {
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&v| ((v - max) as f64).exp()).sum();
    logits[target as usize] - max - sum.ln() as f32
}

/// Log-probabilities of `tokens[1..]`, each given the tokens before it, from the logits
/// of every position (`[tokens.len()][vocab]`, the last row unused).
pub fn log_probs_from_logits(logits: &[f32], tokens: &[u32], vocab: usize) -> Vec<f32> {
    logits
        .chunks_exact(vocab)
        .zip(&tokens[1..])
        .map(|(row, &t)| log_prob(row, t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(f: impl FnOnce(&mut SamplerOptions)) -> SamplerOptions {
        let mut o = SamplerOptions {
            temperature: 1.0,
            ..Default::default()
        };
        f(&mut o);
        o
    }

    #[test]
    fn greedy_is_argmax() {
        let mut s = Sampler::new(SamplerOptions::default());
        assert_eq!(s.sample(&mut [0.1, 3.0, -1.0, 2.9], &[]), 1);
    }

    #[test]
    fn top_k_one_is_greedy_at_any_temperature() {
        let mut s = Sampler::new(opts(|o| {
            o.top_k = 1;
            o.temperature = 5.0
        }));
        for _ in 0..50 {
            assert_eq!(s.sample(&mut [0.1, 3.0, -1.0, 2.9], &[]), 1);
        }
    }

    #[test]
    fn top_p_and_min_p_cut_the_tail() {
        let logits = [0.0f32, 0.0, 10.0, 9.0];
        let c = Sampler::new(opts(|o| o.top_p = 0.5)).candidates(&logits);
        assert_eq!(c.iter().map(|e| e.0).collect::<Vec<_>>(), vec![2]);
        let c = Sampler::new(opts(|o| o.min_p = 0.1)).candidates(&logits);
        assert_eq!(c.iter().map(|e| e.0).collect::<Vec<_>>(), vec![2, 3]);
    }

    #[test]
    fn repetition_penalty_changes_the_choice() {
        let mut s = Sampler::new(SamplerOptions {
            repetition_penalty: 2.0,
            ..Default::default()
        });
        assert_eq!(s.sample(&mut [1.0, 3.0, 2.0], &[1]), 2);
    }

    #[test]
    fn same_seed_same_draws_and_distribution_follows_probabilities() {
        let draw = |seed| {
            let mut s = Sampler::new(opts(|o| o.seed = seed));
            (0..2000)
                .map(|_| s.sample(&mut [0.0, (3.0f32).ln()], &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let ones = draw(7).iter().filter(|&&t| t == 1).count() as f32 / 2000.0;
        assert!((ones - 0.75).abs() < 0.04, "p(1) = {ones}, expected 0.75");
    }

    #[test]
    fn bad_options_are_rejected() {
        assert!(SamplerOptions {
            top_p: 0.0,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(SamplerOptions {
            temperature: -1.0,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(SamplerOptions::default().validate().is_ok());
        // Subnormal and tiny temperatures would turn logits into inf and NaN.
        for t in [1e-40, f32::MIN_POSITIVE, 1e-6, f32::NAN, f32::INFINITY, 1e9] {
            let o = opts(|o| o.temperature = t);
            assert!(o.validate().is_err(), "temperature {t}");
        }
        let o = opts(|o| o.temperature = MIN_TEMPERATURE);
        assert!(o.validate().is_ok());
        let mut s = Sampler::new(o);
        let mut logits = vec![900.0, -900.0, 899.0];
        assert_eq!(
            s.sample(&mut logits, &[]),
            0,
            "the smallest temperature stays finite"
        );
    }
}
