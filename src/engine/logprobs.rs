//! Log-probabilities of a reply's tokens and logit biases, as OpenAI's chat API
//! offers them (`logprobs`, `top_logprobs`, `logit_bias`).
//!
//! A log-probability is the model's: the log-softmax of a step's logits over the whole
//! vocabulary before the bias, the repetition penalty, the temperature, the filters and
//! a response format's mask — what the model says, whatever picked the token. Both need
//! a step's every logit, so a reply that asks for either reads them back (the backend's
//! full logits) instead of the device's few candidates.

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most alternatives a token's log-probability lists (OpenAI's bound).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// A bias past ±100 is as good as a ban or a sure pick (OpenAI's range).
pub const MAX_BIAS: f32 = 100.0;

/// A generated token's log-probability and the most likely tokens at its position.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenLogprob {
    pub token_id: u32,
    /// Its text (a partial character reads as U+FFFD; `bytes` are exact).
    pub token: String,
    pub bytes: Vec<u8>,
    /// In f64 as JSON numbers are (computed in f32).
    pub logprob: f64,
    /// Most likely first (ties: the smaller id first).
    pub top_logprobs: Vec<Alternative>,
}

/// A token and its log-probability.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alternative {
    pub token_id: u32,
    /// Its text (a partial character reads as U+FFFD; `bytes` are exact).
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f64,
}

/// A step's log-probabilities, kept until its token is handled (ids only: the text
/// is looked up for tokens that are emitted).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Step {
    pub token: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// Log-softmax of `logits` at `chosen` and the `n` most likely tokens.
pub(super) fn step(logits: &[f32], chosen: u32, n: usize) -> Step {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // Summed in blocks: 100k+ terms of very different sizes stay within f32's precision.
    let sum: f32 = logits
        .chunks(256)
        .map(|c| c.iter().map(|&l| (l - max).exp()).sum::<f32>())
        .sum();
    let norm = max + sum.ln();
    let lp = |t: u32| {
        logits
            .get(t as usize)
            .map_or(f32::NEG_INFINITY, |l| l - norm)
    };
    Step {
        token: chosen,
        logprob: lp(chosen),
        top: best(logits, n).into_iter().map(|t| (t, lp(t))).collect(),
    }
}

/// The `n` largest logits' ids, best first (ties: the smaller id first). One pass,
/// each kept in place: n is at most 20.
fn best(logits: &[f32], n: usize) -> Vec<u32> {
    let mut top: Vec<u32> = Vec::with_capacity(n + 1);
    for (t, &l) in (0u32..).zip(logits) {
        if top.len() == n && top.last().is_none_or(|&w| l <= logits[w as usize]) {
            continue;
        }
        let at = top.partition_point(|&b| logits[b as usize] >= l);
        top.insert(at, t);
        top.truncate(n);
    }
    top
}

impl Step {
    /// With each token's text and bytes.
    pub fn spelled(self, tk: &Tokenizer) -> TokenLogprob {
        let ids: Vec<u32> = std::iter::once(self.token)
            .chain(self.top.iter().map(|t| t.0))
            .collect();
        let mut bytes = tk.bytes_of_tokens(&ids).into_iter();
        let mut spell = |token_id, logprob: f32| {
            let bytes = bytes.next().unwrap_or_default();
            Alternative {
                token_id,
                token: String::from_utf8_lossy(&bytes).into_owned(),
                bytes,
                logprob: logprob.into(),
            }
        };
        let Alternative {
            token_id,
            token,
            bytes,
            logprob,
        } = spell(self.token, self.logprob);
        TokenLogprob {
            token_id,
            token,
            bytes,
            logprob,
            top_logprobs: self.top.into_iter().map(|(t, l)| spell(t, l)).collect(),
        }
    }
}

/// Adds each bias to its token's logit (OpenAI's `logit_bias`: before anything else
/// acts on the logits).
pub(super) fn bias(logits: &mut [f32], biases: &LogitBias) {
    for &(t, b) in &biases.0 {
        if let Some(l) = logits.get_mut(t as usize) {
            *l += b;
        }
    }
}

/// Biases by token id, one each, by id. In JSON an object keyed by the ids
/// (`{"1234": -100}`), as OpenAI's `logit_bias` is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogitBias(Vec<(u32, f32)>);

impl LogitBias {
    /// From (token, bias) pairs; a token given twice keeps its last bias.
    pub fn new(pairs: impl IntoIterator<Item = (u32, f32)>) -> LogitBias {
        // Kept in order as they come (OpenAI allows 300): no sort linked for it.
        let mut v: Vec<(u32, f32)> = Vec::new();
        for (t, b) in pairs {
            match v.binary_search_by_key(&t, |p| p.0) {
                Ok(i) => v[i].1 = b,
                Err(i) => v.insert(i, (t, b)),
            }
        }
        LogitBias(v)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn pairs(&self) -> &[(u32, f32)] {
        &self.0
    }

    /// Ids within the vocabulary and biases within ±100.
    pub fn check(&self, vocab: usize) -> Result<()> {
        for &(t, b) in &self.0 {
            if t as usize >= vocab {
                return Err(Error::invalid(format!(
                    "logit bias for token {t}, but the vocabulary has {vocab} tokens"
                )));
            }
            if !(-MAX_BIAS..=MAX_BIAS).contains(&b) {
                return Err(Error::invalid(format!(
                    "logit bias {b} for token {t} is out of range (-100 to 100)"
                )));
            }
        }
        Ok(())
    }
}

impl Serialize for LogitBias {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(t, b)| (t.to_string(), b)))
    }
}

impl<'de> Deserialize<'de> for LogitBias {
    // Read as a JSON value: object keys are text, and a struct with a flattened field
    // (GenerateOptions) hands its fields over buffered, keys as text.
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let serde_json::Value::Object(map) = serde_json::Value::deserialize(d)? else {
            return Err(D::Error::custom(
                "logit bias is an object of token ids to biases",
            ));
        };
        let pair = |(k, v): (&String, &serde_json::Value)| {
            let t = k.trim().parse::<u32>();
            match (t, v.as_f64()) {
                (Ok(t), Some(b)) => Ok((t, b as f32)),
                (Err(_), _) => Err(D::Error::custom(format!(
                    "logit bias keys are token ids, not {k:?}"
                ))),
                (_, None) => Err(D::Error::custom(format!(
                    "the logit bias of {k} is not a number"
                ))),
            }
        };
        Ok(LogitBias::new(
            map.iter()
                .map(pair)
                .collect::<std::result::Result<Vec<_>, _>>()?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_and_the_best_alternatives() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let s = step(&logits, 2, 3);
        let norm = logits.iter().map(|l| l.exp()).sum::<f32>().ln();
        assert!((s.logprob - (2.0 - norm)).abs() < 1e-6);
        // Ties: the smaller id first.
        assert_eq!(s.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3, 2]);
        let total: f32 = logits.iter().map(|l| (l - norm).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!(step(&logits, 0, 0).top.is_empty());
        assert_eq!(step(&logits, 0, 99).top.len(), 4);
        // The best n of many, as a sort finds them.
        let many: Vec<f32> = (0..5000u32)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.01)
            .collect();
        let mut sorted: Vec<u32> = (0..5000).collect();
        sorted.sort_by(|a, b| {
            many[*b as usize]
                .total_cmp(&many[*a as usize])
                .then(a.cmp(b))
        });
        assert_eq!(best(&many, 20), sorted[..20]);
    }

    #[test]
    fn large_logits_stay_finite() {
        let s = step(&[900.0, -900.0, 899.0], 0, 2);
        assert!(s.logprob.is_finite() && s.logprob < 0.0 && s.logprob > -1.0);
    }

    #[test]
    fn biases_read_from_json_and_checked() {
        let b: LogitBias = serde_json::from_str(r#"{" 7": 5.5, "2": -100}"#).unwrap();
        assert_eq!(b.pairs(), [(2, -100.0), (7, 5.5)]);
        assert_eq!(
            LogitBias::new([(3, 1.0), (1, 2.0), (3, 4.0)]).pairs(),
            [(1, 2.0), (3, 4.0)]
        );
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"2":-100.0,"7":5.5}"#
        );
        assert!(b.check(8).is_ok());
        assert!(b.check(7).is_err(), "an id past the vocabulary");
        let far: LogitBias = serde_json::from_str(r#"{"1": 101}"#).unwrap();
        assert!(far.check(8).is_err());
        assert!(serde_json::from_str::<LogitBias>(r#"{"a": 1}"#).is_err());
        assert!(serde_json::from_str::<LogitBias>(r#"{"1": "a"}"#).is_err());
        assert!(serde_json::from_str::<LogitBias>(r#"[1]"#).is_err());
        let mut l = [0.0f32, 1.0, 2.0];
        bias(
            &mut l,
            &serde_json::from_str(r#"{"0": 5, "9": 1}"#).unwrap(),
        );
        assert_eq!(l, [5.0, 1.0, 2.0]);
    }
}
