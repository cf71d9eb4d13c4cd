//! `pippin bench`'s guided-generation figures: the time to compute each token's mask
//! (llguidance over the model's vocabulary) in a real JSON Schema reply, and decode
//! tokens/s with and without the mask, greedy on the engine's GPU session.

use pippin::engine::{Backend, Engine, Logits, Want};
use pippin::guided::{GrammarCache, ResponseFormat};
use pippin::tokenizer::Message;
use pippin::{Error, Result};
use web_time::Instant;

/// The schema the bench answers (a small object with a string, a number and an array).
fn schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "languages": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}
        },
        "required": ["name", "age", "languages"],
        "additionalProperties": false
    })
}

pub struct Guided {
    pub vocab: usize,
    /// The first guided reply's set-up: the vocabulary and the schema compiled, the
    /// first mask.
    pub compile_ms: f64,
    pub steps: usize,
    pub mask_ms_median: f64,
    pub mask_ms_p99: f64,
    /// Decode tokens/s of the guided reply (masks included).
    pub decode_tokens_per_s: f64,
}

fn first(l: Logits) -> Result<u32> {
    match l {
        Logits::Top(c) => c.first().map(|c| c.0),
        Logits::Full(_) => None,
    }
    .ok_or_else(|| Error::invalid("the guided step gave no candidate"))
}

fn masked(mask: &[u32]) -> Want<'_> {
    Want {
        mask: Some(mask),
        ..Want::top(1)
    }
}

/// A greedy JSON reply of at most `max` tokens on the engine's session, each step's
/// mask computed (and timed) after its token, as the generate loop does.
pub fn guided(e: &mut Engine, max: usize) -> Result<Guided> {
    let tk = e.tokenizer();
    let format = ResponseFormat::JsonSchema {
        schema: schema(),
        strict: None,
    };
    let t = Instant::now();
    let mut guide = GrammarCache::default()
        .guide(tk, &format)?
        .ok_or_else(|| Error::invalid("the bench's format is plain text"))?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let prompt = tk.encode_chat(
        &[Message::new(
            "user",
            "Describe a software developer as JSON.",
        )],
        true,
    )?;
    let (stops, vocab) = (tk.stop_tokens().to_vec(), tk.vocab_size());
    let mut b = e.backend()?;
    b.truncate(0);
    let mut token = first(pollster::block_on(
        b.forward(&prompt, masked(guide.mask())),
    )?)?;
    let (mut masks, t0) = (Vec::new(), Instant::now());
    let mut steps = 0;
    while steps < max && !stops.contains(&token) {
        let t = Instant::now();
        let complete = guide.accept(token)?;
        masks.push(t.elapsed().as_secs_f64() * 1e3);
        steps += 1;
        if complete {
            break;
        }
        token = first(pollster::block_on(
            b.forward(&[token], masked(guide.mask())),
        )?)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    masks.sort_by(f64::total_cmp);
    let at = |q: f64| masks[((masks.len() - 1) as f64 * q).round() as usize];
    if masks.is_empty() {
        return Err(Error::invalid("the guided reply was empty"));
    }
    Ok(Guided {
        vocab,
        compile_ms,
        steps,
        mask_ms_median: at(0.5),
        mask_ms_p99: at(0.99),
        decode_tokens_per_s: steps as f64 / secs,
    })
}

impl Guided {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "vocab": self.vocab,
            "compile_ms": self.compile_ms,
            "steps": self.steps,
            "mask_ms_median": self.mask_ms_median,
            "mask_ms_p99": self.mask_ms_p99,
            "decode_tokens_per_s": self.decode_tokens_per_s,
        })
    }
}

impl std::fmt::Display for Guided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "guided (JSON Schema, {} tokens, vocabulary {}): set-up {:.0} ms (vocabulary and schema compiled), mask {:.3} ms median, {:.3} ms p99 per token; decode {:.1} tokens/s with masks",
            self.steps, self.vocab, self.compile_ms, self.mask_ms_median, self.mask_ms_p99, self.decode_tokens_per_s
        )
    }
}
