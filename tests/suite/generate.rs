//! The generate loop on the CPU reference (the `pippin` CLI end to end:
//! `cli/tests/cli.rs`).

use crate::common;

use common::plain::{through_errors, Fail, Through};
use common::{model_path, reference};
use pippin::engine::{self, FinishReason, GenerateOptions, ReferenceSession};
use pippin::gguf::Gguf;
use pippin::tokenizer::Tokenizer;
use pollster::block_on;

fn tokenizer() -> Tokenizer {
    let (g, _) = Gguf::open(&model_path()).unwrap();
    Tokenizer::from_gguf(&g.metadata).unwrap()
}

fn run(
    prompt: &str,
    opts: &GenerateOptions,
    mut keep_going: impl FnMut(&str) -> bool,
) -> (String, FinishReason, usize) {
    let tk = tokenizer();
    let mut s = ReferenceSession::new(reference());
    let ids = tk.encode_prompt(prompt, false).unwrap();
    let mut out = String::new();
    let (finish, usage) = block_on(engine::generate(&mut s, &tk, &ids, opts, |t, _| {
        out.push_str(t);
        keep_going(&out)
    }))
    .unwrap();
    (out, finish, usage.generated_tokens)
}

#[test]
fn greedy_text_is_the_references() {
    let opts = GenerateOptions::up_to(4);
    let (text, finish, n) = run("The capital of France is", &opts, |_| true);
    assert_eq!(text, " Paris.\n\n");
    assert_eq!((finish, n), (FinishReason::Length, 4));
}

#[test]
fn stop_strings_abort_and_stop_tokens_end_generation() {
    let opts = GenerateOptions {
        max_tokens: 8,
        stop: vec![".".into()],
        ..Default::default()
    };
    let (text, finish, _) = run("The capital of France is", &opts, |_| true);
    assert_eq!((text.as_str(), finish), (" Paris", FinishReason::Stop));

    let opts = GenerateOptions::up_to(8);
    let (text, finish, n) = run("The capital of France is", &opts, |_| false);
    assert_eq!(
        (text.as_str(), finish, n),
        (" Paris", FinishReason::Abort, 1)
    );

    // The chat reference ends its answer with <|im_end|> (eos), which stops here.
    let tk = tokenizer();
    let ids = tk
        .encode_chat(
            &[pippin::tokenizer::Message::new(
                "user",
                "What is the capital of France?",
            )],
            true,
        )
        .unwrap();
    let mut s = ReferenceSession::new(reference());
    let opts = GenerateOptions::up_to(40);
    let (finish, usage) =
        block_on(engine::generate(&mut s, &tk, &ids, &opts, |_, _| true)).unwrap();
    assert_eq!(finish, FinishReason::Stop);
    assert!(usage.generated_tokens < 40);
    // The first text waits for the prompt's run, not for the reply's end.
    let first = usage.time_to_first_token_ms;
    assert!(first >= usage.prefill_ms, "{usage:?}");
    assert!(first < usage.prefill_ms + usage.decode_ms, "{usage:?}");
}

#[test]
fn bad_requests_are_errors_and_the_session_stays_usable() {
    let tk = tokenizer();
    let mut s = ReferenceSession::new(reference());
    let opts = GenerateOptions::default();
    assert!(
        block_on(engine::generate(&mut s, &tk, &[], &opts, |_, _| true))
            .unwrap_err()
            .to_string()
            .contains("empty")
    );
    let too_long = vec![198u32; 9000];
    let e = block_on(engine::generate(&mut s, &tk, &too_long, &opts, |_, _| true))
        .unwrap_err()
        .to_string();
    assert!(e.contains("context"), "{e}");
    let bad = GenerateOptions {
        sampler: pippin::sampler::SamplerOptions {
            top_p: 2.0,
            ..Default::default()
        },
        ..opts
    };
    assert!(block_on(engine::generate(&mut s, &tk, &[504], &bad, |_, _| true)).is_err());
    let ok = GenerateOptions::up_to(2);
    assert!(block_on(engine::generate(&mut s, &tk, &[504], &ok, |_, _| true)).is_ok());
}

/// A failed step is reported, and retrying goes on where it failed: the same text as
/// without the failure (before, the retry ended the reply with "length").
#[test]
fn a_failed_step_is_an_error_and_a_retry_goes_on() {
    let tk = tokenizer();
    let ids = tk.encode_prompt("The capital of France is", false).unwrap();
    let opts = GenerateOptions::up_to(4);
    let (want, _, _) = run("The capital of France is", &opts, |_| true);
    let inner = ReferenceSession::new(reference());
    let mut b = Through::failing(inner, Fail::Forward(3));
    let (text, errors, end) = through_errors(&mut b, &tk, &ids, &opts);
    assert_eq!(end, (FinishReason::Length, 4));
    assert_eq!(errors, 1);
    assert_eq!(text, want);
}
