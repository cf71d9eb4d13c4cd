//! `engine::Engine`: a reply owns the engine until it ends. Another reply, an adapter
//! change or a reset meanwhile is refused with the "already generating" error and the
//! running reply goes on exactly as it would alone; ids keep a stale reply from
//! stopping or reading a newer one; a reply let go of frees the engine.

use crate::common;

use common::model_path;
use pippin::adapters::fixture::{self, FixtureSpec};
use pippin::engine::{AdapterChoice, Engine, Event, FinishReason, GenerateOptions, Prompt};
use pippin::gpu::{Caps, Gpu};
use pippin::Error;

/// A PEFT adapter's two files (random weights, rank `rank`, the given modules).
fn adapter_files(e: &Engine, rank: usize, modules: &[&str], seed: u64) -> (Vec<u8>, Vec<u8>) {
    let spec = FixtureSpec::new(rank, modules, seed);
    let (config, weights) = fixture::write(e.config(), &spec);
    (config.into_bytes(), weights)
}

fn engine() -> Engine {
    let gpu = pollster::block_on(Gpu::new(Caps::default())).expect("a GPU adapter");
    pollster::block_on(Engine::load_file(gpu, &model_path(), Default::default()))
        .expect("the default model loads")
}

fn opts(n: usize) -> GenerateOptions {
    GenerateOptions::up_to(n)
}

fn text(p: &str) -> Prompt {
    Prompt::Text(p.into())
}

/// Reads reply `id` to its end: (text, finish).
fn drain(e: &mut Engine, id: u64) -> (String, FinishReason) {
    let mut s = String::new();
    loop {
        match pollster::block_on(e.next(id)).unwrap() {
            Event::Text { text, .. } => s.push_str(&text),
            Event::Done { finish, .. } => return (s, finish),
        }
    }
}

fn is_busy(r: pippin::Result<impl std::fmt::Debug>) -> bool {
    matches!(r, Err(Error::Busy(m)) if m.contains("already generating"))
}

#[test]
fn a_reply_owns_the_engine_until_it_ends() {
    let mut e = engine();
    let prompt = text("The capital of France is");
    let start = |e: &mut Engine, p: &Prompt| {
        pollster::block_on(e.start(p, &opts(6), &AdapterChoice::Active))
    };
    let alone = {
        let id = start(&mut e, &prompt).unwrap();
        drain(&mut e, id)
    };
    e.reset().unwrap();
    let a = start(&mut e, &prompt).unwrap();
    let mut got = match pollster::block_on(e.next(a)).unwrap() {
        Event::Text { text, .. } => text,
        other => panic!("{other:?}"),
    };
    // Everything that would change what the reply reads is refused...
    assert!(is_busy(start(&mut e, &text("Hello"))));
    assert!(is_busy(e.reset()));
    assert!(is_busy(e.use_adapter(None)));
    assert!(is_busy(e.unload_adapter("x")));
    let (cfg, w) = adapter_files(&e, 4, &["q_proj"], 1);
    assert!(is_busy(e.load_adapter("x", &cfg, &w)));
    assert!(is_busy(e.backend().map(|_| ())));
    // ...a stale id stops nothing and reads nothing...
    assert!(e.abort(a + 100).is_none());
    assert!(pollster::block_on(e.next(a + 100)).is_err());
    // ...and the reply goes on exactly as alone.
    let (rest, finish) = drain(&mut e, a);
    got.push_str(&rest);
    assert_eq!((got, finish), alone);
    // Ended: the engine is free, and the ended reply answers with its end again.
    assert!(matches!(
        pollster::block_on(e.next(a)),
        Ok(Event::Done { .. })
    ));
    e.load_adapter("x", &cfg, &w).unwrap();
    e.use_adapter(Some("x")).unwrap();
    e.reset().unwrap();
}

#[test]
fn aborting_or_releasing_ends_the_reply_and_frees_the_engine() {
    let mut e = engine();
    let id =
        pollster::block_on(e.start(&text("Once upon a time"), &opts(50), &AdapterChoice::Active))
            .unwrap();
    pollster::block_on(e.next(id)).unwrap();
    match e.abort(id) {
        Some(Event::Done { finish, .. }) => assert_eq!(finish, FinishReason::Abort),
        other => panic!("{other:?}"),
    }
    assert!(!e.is_busy());
    let b = pollster::block_on(e.start(&text("Hello"), &opts(50), &AdapterChoice::None)).unwrap();
    // The first reply's late abort does not touch the second.
    assert!(e.abort(id).is_none());
    assert!(e.is_busy());
    e.release(b);
    assert!(!e.is_busy());
    assert!(pollster::block_on(e.start(&text("Hi"), &opts(2), &AdapterChoice::Active)).is_ok());
}

#[test]
fn an_adapter_is_kept_for_the_reply_that_started_with_it() {
    let mut e = engine();
    let (cfg, w) = adapter_files(&e, 8, &pippin::adapters::MODULES, 3);
    e.load_adapter("story", &cfg, &w).unwrap();
    let p = text("Once upon a time");
    let run = |e: &mut Engine, a: AdapterChoice| {
        e.reset().unwrap();
        let id = pollster::block_on(e.start(&p, &opts(8), &a)).unwrap();
        drain(e, id).0
    };
    let base = run(&mut e, AdapterChoice::None);
    let with = run(&mut e, AdapterChoice::Named("story".into()));
    assert_ne!(base, with, "the adapter changes the text");
    e.use_adapter(Some("story")).unwrap();
    assert_eq!(run(&mut e, AdapterChoice::Active), with);
    let e2 = pollster::block_on(e.start(&p, &opts(8), &AdapterChoice::Named("nope".into())));
    assert!(matches!(e2, Err(Error::Invalid(m)) if m.contains("no adapter named")));
    assert!(!e.is_busy(), "a refused start leaves the engine free");
}
