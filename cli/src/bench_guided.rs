//! `pippin bench`'s guided-generation figures: the time to compute each token's mask
//! (llguidance over the model's vocabulary) in a real JSON Schema reply, and decode
//! tokens/s with and without the mask, greedy on the engine's session (GPU or CPU).

use pippin::engine::{Backend, Engine, Logits, Masked, Want};
use pippin::guided::{allows, GrammarCache, Guide, ResponseFormat};
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
    /// Decode tokens/s of the guided reply, each mask computed while its step's
    /// layers run.
    pub decode_tokens_per_s: f64,
    /// The same reply, each mask computed before its step is submitted.
    pub mask_first_tokens_per_s: f64,
}

/// The step's greedy token: the GPU's top candidate (masked already), or on the CPU
/// backend, which gives every logit, the best one `mask` allows.
fn first(l: Logits, mask: &[u32]) -> Result<u32> {
    match l {
        Logits::Top(c) => c.first().map(|c| c.0),
        Logits::Full(v) => (0..v.len() as u32)
            .filter(|&t| allows(mask, t))
            .max_by(|&a, &b| v[a as usize].total_cmp(&v[b as usize])),
    }
    .ok_or_else(|| Error::invalid("the guided step gave no candidate"))
}

fn masked(mask: &[u32]) -> Want<'_> {
    Want {
        mask: Some(mask),
        ..Want::top(1)
    }
}

/// A greedy JSON reply of at most `max` tokens on the engine's session, twice: each
/// mask computed (and timed) before its step is submitted, then while the step's
/// layers run (`forward_masked`, as the generate loop does).
pub fn guided(e: &mut Engine, max: usize) -> Result<Guided> {
    let tk = e.tokenizer();
    let format = ResponseFormat::JsonSchema {
        schema: schema(),
        strict: None,
    };
    let t = Instant::now();
    let cache = GrammarCache::default();
    pollster::block_on(cache.guide(tk, &format))?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let prompt = tk.encode_chat(
        &[Message::new(
            "user",
            "Describe a software developer as JSON.",
        )],
        true,
    )?;
    let vocab = tk.vocab_size();
    let new_guide = |e: &Engine| {
        pollster::block_on(cache.guide(e.tokenizer(), &format))?
            .ok_or_else(|| Error::invalid("the bench's format is plain text"))
    };
    // A reply to warm up (plans recorded, caches filled), then the two measured.
    reply(e, new_guide(e)?, &prompt, max, true)?;
    let first_run = reply(e, new_guide(e)?, &prompt, max, false)?;
    let (steps, secs, mut masks) = reply(e, new_guide(e)?, &prompt, max, true)?;
    masks.sort_by(f64::total_cmp);
    if masks.is_empty() {
        return Err(Error::invalid("the guided reply was empty"));
    }
    let at = |q: f64| masks[((masks.len() - 1) as f64 * q).round() as usize];
    Ok(Guided {
        vocab,
        compile_ms,
        steps,
        mask_ms_median: at(0.5),
        mask_ms_p99: at(0.99),
        decode_tokens_per_s: steps as f64 / secs,
        mask_first_tokens_per_s: first_run.0 as f64 / first_run.1,
    })
}

/// One greedy guided reply: (steps, seconds, mask times in ms). `overlap`: each mask
/// is computed while the device runs its step's layers.
fn reply(
    e: &mut Engine,
    mut guide: Guide,
    prompt: &[u32],
    max: usize,
    overlap: bool,
) -> Result<(usize, f64, Vec<f64>)> {
    let stops = e.tokenizer().stop_tokens().to_vec();
    let mut b = e.backend()?;
    b.truncate(0);
    let mut token = first(
        pollster::block_on(b.forward(prompt, masked(guide.mask())))?,
        guide.mask(),
    )?;
    let (mut masks, t0) = (Vec::new(), Instant::now());
    let mut steps = 0;
    while steps < max && !stops.contains(&token) {
        steps += 1;
        if guide.consume(token)? {
            break;
        }
        let mut mask = || {
            let t = Instant::now();
            guide.update()?;
            masks.push(t.elapsed().as_secs_f64() * 1e3);
            Ok(guide.mask().to_vec())
        };
        let step = if overlap {
            let (tokens, want, mask) = (&[token][..], Want::top(1), &mut mask);
            pollster::block_on(b.forward_masked(Masked { tokens, want, mask }))?
        } else {
            let bits = mask()?;
            pollster::block_on(b.forward(&[token], masked(&bits)))?
        };
        token = first(step, guide.mask())?;
    }
    Ok((steps, t0.elapsed().as_secs_f64(), masks))
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
            "mask_first_tokens_per_s": self.mask_first_tokens_per_s,
        })
    }
}

impl std::fmt::Display for Guided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "guided (JSON Schema, {} tokens, vocabulary {}): set-up {:.0} ms (vocabulary and schema compiled), mask {:.3} ms median, {:.3} ms p99 per token; decode {:.1} tokens/s with each mask computed while its step's layers run, {:.1} computed before",
            self.steps, self.vocab, self.compile_ms, self.mask_ms_median, self.mask_ms_p99, self.decode_tokens_per_s, self.mask_first_tokens_per_s
        )
    }
}
