//! `pippin bench`'s speculative-decoding figures: the same greedy chat reply with
//! speculation auto (where it pays), on (at every guess) and off, side by side, by
//! prompt lookup or by the engine's draft model (`--draft`), on
//! a task that copies from its input and on open text — decode tokens/s each way,
//! guesses proposed and kept, tokens per forward, and whether the texts are equal
//! (they must be).

use pippin::engine::{generate_drafted, Backend, Engine, GenerateOptions, Speculation, Usage};
use pippin::tokenizer::{Message, Tokenizer};
use pippin::Result;

/// A passage after the Debian Social Contract's first clause: text to copy.
const PASSAGE: &str = "Debian will remain 100% free. We provide the guidelines that we use to determine if a work is free in the document entitled The Debian Free Software Guidelines. We promise that the Debian system and all its components will be free according to these guidelines. We will support people who create or use both free and non-free works on Debian. We will never make the system require the use of a non-free component.";

/// (name, user message) of each task.
fn tasks() -> [(&'static str, String); 2] {
    [
        (
            "copy",
            format!("Repeat this passage word for word:\n\n{PASSAGE}"),
        ),
        (
            "open",
            "Write a short story about a lighthouse keeper.".to_string(),
        ),
    ]
}

pub struct Task {
    pub name: &'static str,
    /// "prompt lookup" or "draft".
    pub proposer: &'static str,
    pub tokens: usize,
    /// `Speculation::Auto`'s, `On`'s and `Off`'s.
    pub auto: Usage,
    pub on: Usage,
    pub off: Usage,
    pub same_text: bool,
}

/// Each task's reply of up to `max` tokens, speculation off, auto and on (a first
/// reply off warms the backend).
pub fn speculation(e: &mut Engine, tk: &Tokenizer, max: usize) -> Result<Vec<Task>> {
    let mut out = Vec::new();
    for (i, (name, ask)) in tasks().into_iter().enumerate() {
        let prompt = tk.encode_chat(&[Message::new("user", &ask)], true)?;
        if i == 0 {
            reply(e, tk, &prompt, max, Speculation::Off)?;
        }
        let (off_text, off) = reply(e, tk, &prompt, max, Speculation::Off)?;
        let (auto_text, auto) = reply(e, tk, &prompt, max, Speculation::Auto)?;
        let (on_text, on) = reply(e, tk, &prompt, max, Speculation::On)?;
        out.push(Task {
            name,
            proposer: if e.has_draft() {
                "draft"
            } else {
                "prompt lookup"
            },
            tokens: on.generated_tokens,
            auto,
            on,
            off,
            same_text: on_text == off_text && auto_text == off_text,
        });
    }
    Ok(out)
}

/// One greedy reply from an empty cache (the draft's too): (text, usage).
fn reply(
    e: &mut Engine,
    tk: &Tokenizer,
    prompt: &[u32],
    max: usize,
    speculation: Speculation,
) -> Result<(String, Usage)> {
    let (mut b, mut d) = e.backends()?;
    b.truncate(0);
    if let Some(d) = &mut d {
        d.truncate(0);
    }
    let o = GenerateOptions {
        max_tokens: max,
        speculation,
        ..Default::default()
    };
    let mut text = String::new();
    let r = generate_drafted(&mut b, d.as_mut(), tk, prompt, &o, None, |t, _| {
        text.push_str(t);
        true
    });
    let (_, usage, _) = pollster::block_on(r)?;
    Ok((text, usage))
}

impl Task {
    pub fn speed_up(&self, u: &Usage) -> f64 {
        u.decode_tokens_per_s() / self.off.decode_tokens_per_s()
    }

    /// Decode's tokens per forward (the prefill gave the first).
    pub fn tokens_per_forward(u: &Usage) -> f64 {
        let forwards = u.speculation.forwards.max(1);
        u.generated_tokens.saturating_sub(1) as f64 / forwards as f64
    }

    pub fn acceptance(u: &Usage) -> f64 {
        u.speculation.accepted as f64 / u.speculation.proposed.max(1) as f64
    }

    fn setting(&self, u: &Usage) -> serde_json::Value {
        let s = u.speculation;
        serde_json::json!({
            "proposed": s.proposed,
            "accepted": s.accepted,
            "acceptance": Task::acceptance(u),
            "forwards": s.forwards,
            "tokens_per_forward": Task::tokens_per_forward(u),
            "decode_tokens_per_s": u.decode_tokens_per_s(),
            "speed_up": self.speed_up(u),
        })
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "task": self.name,
            "proposer": self.proposer,
            "tokens": self.tokens,
            "auto": self.setting(&self.auto),
            "on": self.setting(&self.on),
            "decode_tokens_per_s_off": self.off.decode_tokens_per_s(),
            "same_text": self.same_text,
        })
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "speculation ({}, {}, {} tokens): decode {:.1} tokens/s off",
            self.name,
            self.proposer,
            self.tokens,
            self.off.decode_tokens_per_s()
        )?;
        for (name, u) in [("auto", &self.auto), ("on", &self.on)] {
            let s = u.speculation;
            write!(
                f,
                "; {name} {:.1} ({:.2}×, {}/{} guesses kept, {:.2} tokens a forward)",
                u.decode_tokens_per_s(),
                self.speed_up(u),
                s.accepted,
                s.proposed,
                Task::tokens_per_forward(u),
            )?;
        }
        write!(f, "; same text: {}", self.same_text)
    }
}
