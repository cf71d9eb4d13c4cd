//! Several conversations on one engine (`engine::prefix_cache`): a conversation left
//! for another continues from its kept keys and values, the same text as had it never
//! been left; a common system prompt is run once; a saved conversation restored in a
//! fresh engine writes what the original would; saves from elsewhere, damaged saves
//! and calls during a reply are refused with clear errors. On the CPU backend and on
//! the GPU, on the default model cut to its first layers (`common::small_model_path`).

use crate::common::small_model_path;
use pippin::engine::{
    AdapterChoice, Engine, Event, GenerateOptions, Prompt, SessionOptions, Usage,
};
use pippin::gpu::{Caps, Gpu};
use pippin::quant::kv::KvFormat;
use pippin::tokenizer::Message;
use pippin::Error;

const SYSTEM: &str =
    "You are a careful assistant for a small bakery. You answer questions about bread, \
pastries, opening hours and prices. Keep every answer short, friendly and precise; never invent a \
price; when unsure, say so and suggest calling the shop.";

fn cpu(kv: KvFormat) -> Engine {
    let o = SessionOptions {
        kv,
        max_context: 1024,
        ..Default::default()
    };
    pollster::block_on(Engine::load_file_cpu(&small_model_path(), o))
        .expect("the small model loads")
}

fn gpu(kv: KvFormat) -> Engine {
    let g = pollster::block_on(Gpu::new(Caps::default())).expect("a GPU adapter");
    let o = SessionOptions {
        kv,
        max_context: 1024,
        ..Default::default()
    };
    pollster::block_on(Engine::load_file(g, &small_model_path(), o)).expect("the small model loads")
}

fn msgs(turns: &[(&str, &str)]) -> Vec<Message> {
    let mut m = vec![Message::new("system", SYSTEM)];
    m.extend(turns.iter().map(|(r, c)| Message::new(r, c)));
    m
}

/// A greedy reply of 12 tokens to `m`: its text and usage.
fn reply(e: &mut Engine, m: &[Message]) -> (String, Usage) {
    let o = GenerateOptions::up_to(12);
    let id = pollster::block_on(e.start(&Prompt::Chat(m.to_vec()), &o, &AdapterChoice::Active))
        .expect("the reply starts");
    let mut s = String::new();
    loop {
        match pollster::block_on(e.next(id)).expect("a step") {
            Event::Text { text, .. } => s.push_str(&text),
            Event::Done { usage, .. } => return (s, usage),
        }
    }
}

/// Conversation A's second turn after its first, alone or with conversation B's
/// turn between (B's prompt shares only the system prompt with A's).
fn second_turn(e: &mut Engine, between: bool) -> (String, Usage) {
    let a1 = msgs(&[("user", "Do you sell rye bread?")]);
    let (r1, _) = reply(e, &a1);
    if between {
        reply(e, &msgs(&[("user", "When do you open on Sunday?")]));
    }
    let mut a2 = a1.clone();
    a2.extend([
        Message::new("assistant", &r1),
        Message::new("user", "How much is a loaf?"),
    ]);
    reply(e, &a2)
}

fn switching_back_continues_from_kept_state(make: fn(KvFormat) -> Engine) {
    let alone = second_turn(&mut make(KvFormat::Int8), false);
    let mut e = make(KvFormat::Int8);
    let (text, usage) = second_turn(&mut e, true);
    assert_eq!(
        text, alone.0,
        "the same text as without the other conversation"
    );
    assert_eq!(
        usage.cached_tokens, alone.1.cached_tokens,
        "A's keys and values came back: as many tokens cached as had it never been left"
    );
    let s = e.prefix_stats();
    assert!(s.restored_tokens >= usage.cached_tokens as u64, "{s:?}");
    assert!(
        s.entries >= 1 && s.bytes > 0 && s.bytes <= s.budget,
        "{s:?}"
    );

    // With no room for snapshots, only the common system prompt is found.
    let mut none = make(KvFormat::Int8);
    none.set_prefix_budget(0);
    let (_, u) = second_turn(&mut none, true);
    assert!(
        u.cached_tokens < usage.cached_tokens,
        "{} cached without the prefix cache, {} with it",
        u.cached_tokens,
        usage.cached_tokens
    );
    assert_eq!(none.prefix_stats().entries, 0);
}

#[test]
fn a_conversation_left_for_another_continues_from_its_kept_state_cpu() {
    switching_back_continues_from_kept_state(cpu);
}

#[test]
fn a_conversation_left_for_another_continues_from_its_kept_state_gpu() {
    switching_back_continues_from_kept_state(gpu);
}

fn system_prompt_is_computed_once(make: fn(KvFormat) -> Engine) {
    let question = msgs(&[("user", "Is the croissant vegan?")]);
    let fresh = reply(&mut make(KvFormat::Int8), &question);

    let mut e = make(KvFormat::Int8);
    let any = GenerateOptions::default();
    let ahead =
        pollster::block_on(e.prefill(&Prompt::Chat(msgs(&[])), &any, &AdapterChoice::Active))
            .expect("the system prompt prefills");
    assert_eq!(ahead.cached_tokens, 0);
    assert!(ahead.computed_tokens > 40, "{ahead:?}");
    // Another conversation, with another system prompt, in between.
    let other = vec![
        Message::new("system", "You are a pirate."),
        Message::new("user", "Hi"),
    ];
    reply(&mut e, &other);
    let (text, usage) = reply(&mut e, &question);
    assert!(
        usage.cached_tokens >= ahead.computed_tokens,
        "the system prompt's {} tokens were cached, not run again: {usage:?}",
        ahead.computed_tokens
    );
    assert_eq!(text, fresh.0, "the same text as without the cache");
}

#[test]
fn a_system_prompt_computed_ahead_is_found_by_a_later_conversation_cpu() {
    system_prompt_is_computed_once(cpu);
}

#[test]
fn a_system_prompt_computed_ahead_is_found_by_a_later_conversation_gpu() {
    system_prompt_is_computed_once(gpu);
}

fn saved_conversation_continues_after_a_restore(make: fn(KvFormat) -> Engine) {
    let mut e = make(KvFormat::Int8);
    let first = msgs(&[("user", "Do you bake on Mondays?")]);
    let (r1, _) = reply(&mut e, &first);
    let mut done = first.clone();
    done.push(Message::new("assistant", &r1));
    let any = GenerateOptions::default();
    let saved =
        pollster::block_on(e.save(&Prompt::Chat(done.clone()), &any, &AdapterChoice::Active))
            .expect("the conversation saves");
    let mut next = done.clone();
    next.push(Message::new("user", "And on Tuesdays?"));
    let (want, _) = reply(&mut e, &next);

    let mut back = make(KvFormat::Int8);
    let held = back.restore(&saved).expect("the save restores");
    assert!(held > 40);
    let (text, usage) = reply(&mut back, &next);
    assert_eq!(
        text, want,
        "the restored conversation writes what the original did"
    );
    assert!(
        usage.cached_tokens >= held - 2,
        "{usage:?} after restoring {held} tokens"
    );

    // Another KV format, a damaged save: refused, and the engine still answers.
    let mut other = make(KvFormat::F32);
    let refused = other.restore(&saved);
    assert!(
        matches!(&refused, Err(Error::Invalid(m)) if m.contains("another model")),
        "{refused:?}"
    );
    for cut in [0, 10, saved.len() / 2, saved.len() - 1] {
        let r = back.restore(&saved[..cut]);
        assert!(matches!(r, Err(Error::Invalid(_))), "{cut} bytes: {r:?}");
    }
    for at in [30, saved.len() / 2, saved.len() - 3] {
        let mut flipped = saved.clone();
        flipped[at] ^= 0x40;
        let r = back.restore(&flipped);
        assert!(
            matches!(&r, Err(Error::Invalid(m)) if m.contains("damaged")),
            "{r:?}"
        );
    }
    assert_eq!(
        reply(&mut back, &next).0,
        want,
        "what was loaded stays usable"
    );
}

#[test]
fn a_saved_conversation_continues_after_a_restore_cpu() {
    saved_conversation_continues_after_a_restore(cpu);
    // A CPU save is not a GPU one.
    let mut c = cpu(KvFormat::Int8);
    let any = GenerateOptions::default();
    let saved =
        pollster::block_on(c.save(&Prompt::Chat(msgs(&[])), &any, &AdapterChoice::Active)).unwrap();
    assert!(matches!(
        gpu(KvFormat::Int8).restore(&saved),
        Err(Error::Invalid(_))
    ));
}

#[test]
fn a_saved_conversation_continues_after_a_restore_gpu() {
    saved_conversation_continues_after_a_restore(gpu);
}

#[test]
fn prefill_save_and_restore_are_refused_during_a_reply() {
    let mut e = cpu(KvFormat::Int8);
    let any = GenerateOptions::default();
    let p = Prompt::Chat(msgs(&[("user", "Hello")]));
    let saved = pollster::block_on(e.save(&p, &any, &AdapterChoice::Active)).unwrap();
    let id = pollster::block_on(e.start(&p, &any, &AdapterChoice::Active)).unwrap();
    let busy = |r: Result<(), Error>| matches!(r, Err(Error::Busy(_)));
    assert!(busy(
        pollster::block_on(e.prefill(&p, &any, &AdapterChoice::Active)).map(drop)
    ));
    assert!(busy(
        pollster::block_on(e.save(&p, &any, &AdapterChoice::Active)).map(drop)
    ));
    assert!(busy(e.restore(&saved).map(drop)));
    e.abort(id);
    assert!(e.restore(&saved).is_ok());
}
