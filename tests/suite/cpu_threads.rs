//! The CPU backend split across threads that share no memory (in the browser: Web
//! Workers, each its own wasm instance), run here on std threads by
//! `pippin::testing::ThreadTeam` over the same protocol: every format gives the same
//! logits, bit for bit, as one thread (each row's dot product is computed the same
//! way, wherever it runs), through several rounds per matmul and a tied embedding
//! looked up across threads; an adapter gives the same replies; a helper that dies
//! fails the call with DeviceLost, without a hang.

use crate::common;

use common::{gemma_path, load_cpu, model_path, models_file, reference};
use pippin::engine::cpu::team::Team;
use pippin::engine::{AdapterChoice, Engine, Event, GenerateOptions, Prompt, SessionOptions};
use pippin::model::{KvCache, Proj};
use pippin::sampler::argmax;
use pippin::testing::{max_abs_diff, ThreadTeam};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROMPT: [u32; 5] = [504, 3575, 282, 4649, 314];

/// Logits of every prompt position, then of 3 greedy steps.
fn run(m: &pippin::engine::CpuModel) -> Vec<Vec<f32>> {
    let mut cache = KvCache::new(&m.config);
    let mut out = vec![m.forward(&mut cache, &PROMPT, true).unwrap()];
    for _ in 0..3 {
        let last = &out[out.len() - 1];
        let next = argmax(&last[last.len() - m.config.vocab_size..]) as u32;
        out.push(m.forward(&mut cache, &[next], false).unwrap());
    }
    out
}

#[test]
fn threads_give_the_same_logits_as_one_thread_on_every_format() {
    let mut files = vec![model_path(), gemma_path()];
    for ty in [
        "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q5_0", "Q5_1", "IQ4_NL",
    ] {
        files.push(models_file(&format!(
            "fixtures/SmolLM2-135M-Instruct.{ty}.gguf"
        )));
    }
    for path in files {
        let want = run(&load_cpu(&path, None));
        // Two threads with room for whole prompts; three with rounds of 2-3 tokens
        // (the head of a large vocabulary then stays on the lead). Rounds of one token
        // would take the K-quants' integer path where one thread takes the f32 one for
        // the whole prompt: within tolerance, not bit for bit; the browser's rounds
        // carry a hundred tokens and more.
        for (helpers, capacity) in [(1, 1 << 22), (2, 8_000)] {
            let team: Arc<dyn Team> = ThreadTeam::new(helpers, capacity);
            let m = load_cpu(&path, Some(&team));
            let wq = &m.weights.layers[0].proj[Proj::Q];
            assert!(wq.remote.is_some() && wq.held() < wq.rows, "split");
            let what = format!("{} on {} threads", path.display(), helpers + 1);
            for (step, (g, w)) in run(&m).iter().zip(&want).enumerate() {
                assert_eq!(max_abs_diff(g, w), 0.0, "{what}, step {step}");
            }
        }
    }
}

/// A tied embedding split across threads: prompt rows come from every thread.
#[test]
fn a_split_tied_embedding_is_looked_up_across_threads() {
    let team: Arc<dyn Team> = ThreadTeam::new(2, 1 << 22);
    let m = load_cpu(&model_path(), Some(&team));
    let e = &m.weights.token_embd;
    assert!(e.remote.is_some(), "the embedding is split");
    let tokens = [0, 1, e.rows as u32 / 2, e.rows as u32 - 1, 7];
    let (got, want) = (
        m.embed(&tokens).unwrap(),
        reference().embed(&tokens).unwrap(),
    );
    // Rows decoded from the file's blocks, as the reference decodes them.
    assert_eq!(max_abs_diff(&got, &want), 0.0);
}

fn engine(team: Option<Arc<dyn Team>>) -> Engine {
    let file = std::fs::File::open(model_path()).unwrap();
    let len = file.metadata().unwrap().len();
    let mut src = pippin::gguf::ReadSource {
        reader: std::io::BufReader::new(file),
        len: Some(len),
    };
    let so = SessionOptions {
        max_context: 512,
        ..Default::default()
    };
    let mut progress = |_, _| {};
    let load = Engine::load_cpu_shared(&mut src, so, &mut progress, "test", team);
    pollster::block_on(load).unwrap()
}

/// The engine's greedy reply, or the first error.
fn greedy(e: &mut Engine, n: usize, adapter: AdapterChoice) -> pippin::error::Result<String> {
    let opts = GenerateOptions::up_to(n);
    let id =
        pollster::block_on(e.start(&Prompt::Text("Once upon a time".into()), &opts, &adapter))?;
    let mut text = String::new();
    loop {
        match pollster::block_on(e.next(id))? {
            Event::Text { text: t, .. } => text.push_str(&t),
            Event::Done { .. } => return Ok(text),
        }
    }
}

#[test]
fn an_adapter_gives_the_same_replies_on_threads() {
    let (config, weights) = common::rank8_adapter();
    let team: Arc<dyn Team> = ThreadTeam::new(1, 1 << 22);
    let (mut one, mut two) = (engine(None), engine(Some(team)));
    assert_eq!(two.threads(), 2);
    for e in [&mut one, &mut two] {
        e.load_adapter("a", config.as_bytes(), &weights).unwrap();
    }
    let named = || AdapterChoice::Named("a".into());
    let with = greedy(&mut one, 8, named()).unwrap();
    assert_eq!(greedy(&mut two, 8, named()).unwrap(), with);
    let base = greedy(&mut one, 8, AdapterChoice::None).unwrap();
    assert_ne!(base, with, "the adapter changes the reply");
    assert_eq!(greedy(&mut two, 8, AdapterChoice::None).unwrap(), base);
}

#[test]
fn a_helper_that_dies_fails_the_call_with_device_lost_not_a_hang() {
    let threads = ThreadTeam::new(2, 1 << 22);
    let team: Arc<dyn Team> = threads.clone();
    let mut e = engine(Some(team));
    greedy(&mut e, 2, AdapterChoice::None).unwrap();
    threads.kill(1);
    let began = Instant::now();
    let err = greedy(&mut e, 2, AdapterChoice::None).unwrap_err();
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(err.code(), "DeviceLost");
    assert!(err.to_string().contains("CPU worker thread"), "{err}");
    // Every later call says the same at once.
    let err = greedy(&mut e, 2, AdapterChoice::None).unwrap_err();
    assert_eq!(err.code(), "DeviceLost");
}
