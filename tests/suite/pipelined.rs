//! Pipelined decode on the GPU: the next token is picked on the GPU and the step
//! after is submitted before it is read back. The same generations one step at a
//! time (the GPU session seen through a backend that does not chain) write the same
//! tokens: greedy and seeded sampling with every filter and the repetition penalty;
//! max tokens, stop strings and a full context end the reply exactly, with the same
//! tokens left in the KV cache; a failed read is reported and a retry goes on. On the
//! default model cut to its first layers (`common::small_model_path`): the subject is
//! the engine, not the model's numbers.

use crate::common;

use common::small_model_path;
// A backend seen one step at a time (`chains` is false).
use common::plain::{through_errors, Fail, Through};
use pippin::engine::{
    self, Backend, FinishReason, GenerateOptions, GpuBackend, GpuModel, GpuSession, SessionOptions,
};
use pippin::gpu::{Caps, Gpu};
use pippin::quant::kv::KvFormat;
use pippin::sampler::SamplerOptions;
use pippin::tokenizer::Tokenizer;
use std::sync::OnceLock;

fn model() -> &'static (GpuModel, Tokenizer) {
    static M: OnceLock<(GpuModel, Tokenizer)> = OnceLock::new();
    M.get_or_init(|| {
        let gpu = pollster::block_on(Gpu::new(Caps::default())).expect("a GPU adapter");
        let (m, g) = pollster::block_on(GpuModel::load_file(
            gpu,
            &small_model_path(),
            &mut |_, _| {},
        ))
        .expect("model uploads");
        (m, Tokenizer::from_gguf(&g.metadata).unwrap())
    })
}

fn session(max_context: usize) -> GpuSession {
    let opts = SessionOptions {
        max_context,
        kv: KvFormat::Int8,
        chunk: 64,
        cpu_memory: None,
        session_memory: None,
    };
    GpuSession::new(&model().0, opts).unwrap()
}

/// What a generation wrote: its tokens, text, how it ended, the cache after.
#[derive(Debug, PartialEq)]
struct Run {
    tokens: Vec<u32>,
    text: String,
    finish: FinishReason,
    generated: usize,
    cached: Vec<u32>,
}

fn generate<B: Backend>(b: &mut B, prompt: &[u32], opts: &GenerateOptions) -> Run {
    let tk = &model().1;
    let (mut tokens, mut text) = (vec![], String::new());
    let (finish, usage) = pollster::block_on(engine::generate(b, tk, prompt, opts, |t, id| {
        text.push_str(t);
        tokens.push(id);
        true
    }))
    .unwrap();
    Run {
        tokens,
        text,
        finish,
        generated: usage.generated_tokens,
        cached: b.tokens().to_vec(),
    }
}

/// The same request pipelined and one step at a time, each on a fresh session.
fn both(prompt: &str, opts: &GenerateOptions, max_context: usize) -> (Run, Run) {
    let (m, tk) = model();
    let ids = tk.encode_prompt(prompt, false).unwrap();
    let mut s1 = session(max_context);
    let mut b1 = GpuBackend::new(m, &mut s1);
    assert!(b1.chains());
    let piped = generate(&mut b1, &ids, opts);
    let mut s2 = session(max_context);
    let mut b2 = Through::plain(GpuBackend::new(m, &mut s2));
    assert!(!b2.chains());
    let stepped = generate(&mut b2, &ids, opts);
    (piped, stepped)
}

#[test]
fn greedy_pipelined_writes_what_one_step_at_a_time_writes() {
    let opts = GenerateOptions::up_to(24);
    let (piped, stepped) = both("The capital of France is", &opts, 256);
    assert_eq!(piped, stepped);
    assert_eq!(piped.generated, 24);
    assert_eq!(piped.finish, FinishReason::Length);
}

#[test]
fn seeded_sampling_with_filters_and_penalty_is_the_same_pipelined() {
    for (seed, top_p, min_p, last_n) in [(7, 0.95, 0.02, 8), (11, 1.0, 0.0, 1), (3, 0.8, 0.1, 64)] {
        let opts = GenerateOptions {
            max_tokens: 12,
            sampler: SamplerOptions {
                temperature: 0.9,
                top_k: 40,
                top_p,
                min_p,
                repetition_penalty: 1.3,
                repeat_last_n: last_n,
                seed,
            },
            ..Default::default()
        };
        let (piped, stepped) = both("Once upon a time", &opts, 256);
        assert_eq!(piped, stepped, "seed {seed}");
    }
}

#[test]
fn max_tokens_stop_strings_and_a_full_context_end_exactly() {
    let prompt = "The capital of France is";
    // The greedy reply, to stop inside it.
    let long = GenerateOptions::up_to(16);
    let (full, _) = both(prompt, &long, 256);
    let words: Vec<&str> = full.text.split_whitespace().collect();
    assert!(words.len() > 4, "{:?}", full.text);
    let cases = [
        (GenerateOptions::up_to(5), 256),
        (
            GenerateOptions {
                max_tokens: 16,
                stop: vec![words[3].to_string()],
                ..Default::default()
            },
            256,
        ),
        // Room for the prompt and 6 more tokens.
        (long.clone(), 6 + 6),
    ];
    for (opts, ctx) in cases {
        let (piped, stepped) = both(prompt, &opts, ctx);
        assert_eq!(piped, stepped, "stop {:?}, context {ctx}", opts.stop);
        assert!(piped.generated < 16, "{piped:?}");
    }
}

/// A failed read mid-reply is an error; retrying goes on one step at a time from the
/// last token handled and writes the same greedy text.
#[test]
fn a_failed_read_is_an_error_and_a_retry_goes_on() {
    let (m, tk) = model();
    let opts = GenerateOptions::up_to(10);
    let (want, _) = both("The capital of France is", &opts, 256);
    let ids = tk.encode_prompt("The capital of France is", false).unwrap();
    let mut s = session(256);
    let mut b = Through::failing(GpuBackend::new(m, &mut s), Fail::Read(4));
    let (text, errors, end) = through_errors(&mut b, tk, &ids, &opts);
    assert_eq!(end, (FinishReason::Length, 10));
    assert_eq!(errors, 1);
    assert_eq!(text, want.text);
    assert_eq!(b.tokens(), &want.cached[..]);
}

/// Sessions sharing one model on several threads: each records its decode plan while
/// the others dispatch, and each writes what it writes alone (a plan recorded while
/// another thread dispatched once picked up that thread's dispatches).
#[test]
fn sessions_on_threads_record_only_their_own_dispatches() {
    let opts = GenerateOptions::up_to(6);
    let (m, tk) = model();
    let ids = tk.encode_prompt("The capital of France is", false).unwrap();
    let mut s = session(64);
    let alone = generate(&mut GpuBackend::new(m, &mut s), &ids, &opts);
    let runs: Vec<Run> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let mut s = session(64);
                    generate(&mut GpuBackend::new(m, &mut s), &ids, &opts)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in runs {
        assert_eq!(r, alone);
    }
}
