//! `pippin bench`'s prefix-cache figure: the time to first token of a second
//! conversation that shares a ~500-token system prompt with a first one, after an
//! unrelated conversation in between (so the live KV cache no longer holds it), with
//! the prefix cache and without (budget 0), side by side in one run — and whether the
//! two replies are the same text (they must be).

use pippin::engine::{AdapterChoice, Engine, Event, GenerateOptions, Prompt, Usage};
use pippin::tokenizer::Message;
use pippin::Result;

/// A long system prompt: a shop's rules, ~500 tokens.
fn system() -> String {
    let mut s =
        String::from("You are the assistant of a small bakery. Follow these rules exactly.\n");
    let items = [
        "rye bread",
        "croissants",
        "sourdough",
        "baguettes",
        "cinnamon rolls",
        "apple pie",
        "brioche",
        "bagels",
        "scones",
        "muffins",
    ];
    for (i, item) in items.iter().enumerate() {
        s.push_str(&format!(
            "Rule {}: {item} are baked every morning at {} o'clock; say so when asked, never promise a reservation, and suggest calling the shop for orders larger than {} pieces.\n",
            i + 1,
            5 + i % 3,
            10 + 5 * i
        ));
    }
    s.push_str("Keep every answer short, friendly and precise; never invent a price.");
    s
}

pub struct PrefixFigure {
    pub system_tokens: usize,
    pub with: Usage,
    pub without: Usage,
    pub same_text: bool,
}

/// Conversation 1, an unrelated one, then conversation 2 (the figure's reply).
fn run(e: &mut Engine, system: &str) -> Result<(String, Usage)> {
    let ask = |q: &str| vec![Message::new("system", system), Message::new("user", q)];
    reply(e, ask("When are croissants baked?"))?;
    reply(e, vec![Message::new("user", "Say hello.")])?;
    reply(e, ask("Can I order 40 bagels?"))
}

fn reply(e: &mut Engine, m: Vec<Message>) -> Result<(String, Usage)> {
    let o = GenerateOptions::up_to(8);
    let id = pollster::block_on(e.start(&Prompt::Chat(m), &o, &AdapterChoice::Active))?;
    let mut text = String::new();
    loop {
        match pollster::block_on(e.next(id))? {
            Event::Text { text: t, .. } => text.push_str(&t),
            Event::Done { usage, .. } => return Ok((text, usage)),
        }
    }
}

pub fn prefix_cache(e: &mut Engine) -> Result<PrefixFigure> {
    let system = system();
    let opts = GenerateOptions::default();
    let sys = Prompt::Chat(vec![Message::new("system", &system)]);
    let system_tokens = e.prepare(&sys, &opts)?.ids.len();
    let budget = e.prefix_stats().budget;
    e.reset()?;
    let (with_text, with) = run(e, &system)?;
    e.set_prefix_budget(0);
    e.reset()?;
    let (without_text, without) = run(e, &system)?;
    e.set_prefix_budget(budget);
    Ok(PrefixFigure {
        system_tokens,
        with,
        without,
        same_text: with_text == without_text,
    })
}

impl PrefixFigure {
    pub fn to_json(&self) -> serde_json::Value {
        let side = |u: &Usage| {
            serde_json::json!({
                "time_to_first_token_ms": u.time_to_first_token_ms,
                "cached_tokens": u.cached_tokens,
                "prompt_tokens": u.prompt_tokens,
            })
        };
        serde_json::json!({
            "system_tokens": self.system_tokens,
            "with_prefix_cache": side(&self.with),
            "without": side(&self.without),
            "speed_up": self.without.time_to_first_token_ms / self.with.time_to_first_token_ms.max(1e-9),
            "same_text": self.same_text,
        })
    }
}

impl std::fmt::Display for PrefixFigure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "prefix cache (second conversation, {}-token system prompt): time to first token {:.0} ms with ({} of {} prompt tokens cached), {:.0} ms without ({} cached): {:.1}×, same text: {}",
            self.system_tokens,
            self.with.time_to_first_token_ms,
            self.with.cached_tokens,
            self.with.prompt_tokens,
            self.without.time_to_first_token_ms,
            self.without.cached_tokens,
            self.without.time_to_first_token_ms / self.with.time_to_first_token_ms.max(1e-9),
            self.same_text
        )
    }
}
