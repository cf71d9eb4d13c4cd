//! Guided generation on the default model: every reply under a JSON Schema parses and
//! validates (an independent validator, the `jsonschema` crate), greedy and sampled;
//! regular expressions and Lark grammars match; bad or unsatisfiable formats fail
//! before any token (these on the CPU backend); on the GPU, the mask computed during
//! the step and applied by top-k, the mask computed first, and the mask applied on the
//! CPU over full logits pick the same tokens.

use crate::common;

use common::{cpu_model, model_path};
// The mask computed before the step is submitted (the trait's `forward_masked`),
// against the GPU's split step (computed while the layers run).
use common::plain::Through;
use pippin::engine::{
    self, Backend, CpuBackend, CpuState, FinishReason, GenerateOptions, GpuBackend, GpuSession,
    Logits, Masked, SessionOptions, Want,
};
use pippin::gguf::Gguf;
use pippin::guided::ResponseFormat;
use pippin::sampler::SamplerOptions;
use pippin::tokenizer::{Message, Tokenizer};
use pippin::{Error, Result};
use serde_json::{json, Value};
use std::sync::OnceLock;

fn tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let (g, _) = Gguf::open(&model_path()).unwrap();
        Tokenizer::from_gguf(&g.metadata).unwrap()
    })
}

fn chat(tk: &Tokenizer, ask: &str) -> Vec<u32> {
    tk.encode_chat(&[Message::new("user", ask)], true).unwrap()
}

fn opts(format: ResponseFormat, temperature: f32, max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampler: SamplerOptions {
            temperature,
            top_p: 0.95,
            seed: 11,
            ..Default::default()
        },
        response_format: Some(format),
        ..Default::default()
    }
}

/// Runs a guided reply; (text, finish reason, tokens).
fn run<B: Backend>(
    b: &mut B,
    prompt: &[u32],
    o: &GenerateOptions,
) -> Result<(String, FinishReason, Vec<u32>)> {
    let mut text = String::new();
    let mut ids = Vec::new();
    let (finish, _) = pollster::block_on(engine::generate(b, tokenizer(), prompt, o, |t, id| {
        text.push_str(t);
        ids.push(id);
        true
    }))?;
    Ok((text, finish, ids))
}

/// A reply on the CPU backend (what is checked is the output's form, not the logits).
fn cpu(prompt: &[u32], o: &GenerateOptions) -> Result<(String, FinishReason, Vec<u32>)> {
    let mut state = CpuState::default();
    run(
        &mut CpuBackend::new(cpu_model(), &mut state, None),
        prompt,
        o,
    )
}

/// (what to ask, the schema): nested objects, arrays with bounds, enums, const,
/// bounded numbers, patterns, lengths, required and optional, anyOf, $ref, formats.
fn schemas() -> Vec<(&'static str, Value)> {
    let s = |max: u32| json!({"type": "string", "maxLength": max});
    vec![
        (
            "a person",
            json!({"type": "object", "properties": {"name": s(24), "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": false}),
        ),
        (
            "a city and its country",
            json!({"type": "object", "properties": {"city": s(20), "country": s(20)}, "required": ["city", "country"], "additionalProperties": false}),
        ),
        (
            "three colors",
            json!({"type": "array", "items": s(12), "minItems": 3, "maxItems": 3}),
        ),
        (
            "a yes or no answer: is the sky blue?",
            json!({"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"], "additionalProperties": false}),
        ),
        (
            "a version object",
            json!({"type": "object", "properties": {"version": {"const": 2}, "stable": {"type": "boolean"}}, "required": ["version", "stable"], "additionalProperties": false}),
        ),
        (
            "a temperature reading",
            json!({"type": "object", "properties": {"celsius": {"type": "number", "minimum": -50, "maximum": 60}}, "required": ["celsius"], "additionalProperties": false}),
        ),
        (
            "a US zip code",
            json!({"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["zip"], "additionalProperties": false}),
        ),
        (
            "a short title",
            json!({"type": "string", "minLength": 3, "maxLength": 16}),
        ),
        (
            "a book",
            json!({"type": "object", "properties": {"title": s(30), "author": {"type": "object", "properties": {"first": s(12), "last": s(12)}, "required": ["first", "last"], "additionalProperties": false}, "year": {"type": "integer", "minimum": 1400, "maximum": 2030}}, "required": ["title", "author", "year"], "additionalProperties": false}),
        ),
        (
            "a list of two numbers between 1 and 10",
            json!({"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 10}, "minItems": 2, "maxItems": 2}),
        ),
        (
            "a pet, which is a cat or a dog",
            json!({"anyOf": [
            {"type": "object", "properties": {"cat": s(12)}, "required": ["cat"], "additionalProperties": false},
            {"type": "object", "properties": {"dog": s(12)}, "required": ["dog"], "additionalProperties": false}]}),
        ),
        (
            "two points",
            json!({"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9}, "y": {"type": "integer", "minimum": -9, "maximum": 9}}, "required": ["x", "y"], "additionalProperties": false}},
            "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}}, "required": ["a", "b"], "additionalProperties": false}),
        ),
        (
            "a user with an optional nickname",
            json!({"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999}, "nickname": s(10)}, "required": ["id"], "additionalProperties": false}),
        ),
        (
            "a to-do list with up to two items",
            json!({"type": "object", "properties": {"todo": {"type": "array", "items": {"type": "object", "properties": {"task": s(20), "done": {"type": "boolean"}}, "required": ["task", "done"], "additionalProperties": false}, "minItems": 1, "maxItems": 2}}, "required": ["todo"], "additionalProperties": false}),
        ),
        (
            "a weekday",
            json!({"enum": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]}),
        ),
        (
            "a rating from 1 to 5 and a comment",
            json!({"type": "object", "properties": {"rating": {"type": "integer", "minimum": 1, "maximum": 5}, "comment": s(30)}, "required": ["rating", "comment"], "additionalProperties": false}),
        ),
        (
            "a probability",
            json!({"type": "number", "minimum": 0, "maximum": 1}),
        ),
        (
            "a null or a small number",
            json!({"type": ["integer", "null"], "minimum": 0, "maximum": 9}),
        ),
        (
            "an RGB color",
            json!({"type": "object", "properties": {"r": {"type": "integer", "minimum": 0, "maximum": 255}, "g": {"type": "integer", "minimum": 0, "maximum": 255}, "b": {"type": "integer", "minimum": 0, "maximum": 255}}, "required": ["r", "g", "b"], "additionalProperties": false}),
        ),
        (
            "an HTTP status",
            json!({"type": "object", "properties": {"code": {"type": "integer", "enum": [200, 404, 500]}, "ok": {"type": "boolean"}}, "required": ["code", "ok"], "additionalProperties": false}),
        ),
        (
            "a tag list of lowercase words",
            json!({"type": "array", "items": {"type": "string", "pattern": "^[a-z]{2,8}$"}, "minItems": 1, "maxItems": 3}),
        ),
        (
            "a price in dollars",
            json!({"type": "object", "properties": {"price": {"type": "number", "minimum": 0, "maximum": 100000}}, "required": ["price"], "additionalProperties": false}),
        ),
        ("any number", json!({"type": "number"})),
        (
            "a nested config",
            json!({"type": "object", "properties": {"server": {"type": "object", "properties": {"port": {"type": "integer", "minimum": 1024, "maximum": 65535}, "tls": {"type": "boolean"}}, "required": ["port", "tls"], "additionalProperties": false}}, "required": ["server"], "additionalProperties": false}),
        ),
    ]
}

/// Why `text` is not a valid, complete reply under `schema` (None: it is).
fn json_problem(schema: &Value, text: &str, finish: FinishReason) -> Option<String> {
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Some(format!("{text:?} is not JSON ({e}), finish {finish:?}")),
    };
    let validator = jsonschema::validator_for(schema).expect("the test's schema compiles");
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    if !errors.is_empty() {
        return Some(format!("{text} breaks its schema: {errors:?}"));
    }
    (finish != FinishReason::Stop).then(|| format!("{text}: finish {finish:?}"))
}

fn check_json(what: &str, schema: &Value, text: &str, finish: FinishReason) {
    if let Some(p) = json_problem(schema, text, finish) {
        panic!("{what}: {p}");
    }
}

#[test]
fn json_schemas_greedy_and_sampled_always_validate() {
    let tk = tokenizer();
    let list = schemas();
    assert!(list.len() >= 20);
    let mut problems = Vec::new();
    // Every schema once, greedy and sampled in turn (half the schemas each: both for
    // every schema made this the suite's slowest test on CI's two cores).
    for (i, (what, schema)) in list.iter().enumerate() {
        let prompt = chat(tk, &format!("Reply in JSON only: {what}."));
        let temperature = [0.0, 0.6][i % 2];
        let format = ResponseFormat::JsonSchema {
            schema: schema.clone(),
            strict: Some(true),
        };
        let (text, finish, _) = cpu(&prompt, &opts(format, temperature, 128)).unwrap();
        if let Some(p) = json_problem(schema, &text, finish) {
            problems.push(format!("{what} (t {temperature}): {p}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn any_json_object() {
    let tk = tokenizer();
    let prompt = chat(tk, "Reply with a JSON object with a name and an age.");
    for temperature in [0.0, 0.7] {
        let (text, finish, _) =
            cpu(&prompt, &opts(ResponseFormat::JsonObject, temperature, 96)).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(v.is_object(), "{text}");
        assert_eq!(finish, FinishReason::Stop, "{text}");
    }
}

#[test]
fn regular_expressions_and_grammars_match() {
    let tk = tokenizer();
    let cases = [
        (
            "What is the capital of France?",
            ResponseFormat::Regex {
                pattern: "(Paris|London|Berlin)\\.".into(),
            },
            "^(Paris|London|Berlin)\\.$",
        ),
        (
            "Give a date.",
            ResponseFormat::Regex {
                pattern: "[0-9]{4}-[0-9]{2}-[0-9]{2}".into(),
            },
            "^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
        ),
        (
            "Is water wet? Answer yes or no, then why.",
            ResponseFormat::Grammar {
                grammar: "start: answer \": \" reason\nanswer: \"yes\" | \"no\"\nreason: /[a-z ]{1,20}/\n"
                    .into(),
            },
            "^(yes|no): [a-z ]{1,20}$",
        ),
        (
            "Add two small numbers.",
            ResponseFormat::Grammar {
                grammar: "start: num \" + \" num \" = \" num\nnum: /[0-9]{1,2}/\n".into(),
            },
            "^[0-9]{1,2} \\+ [0-9]{1,2} = [0-9]{1,2}$",
        ),
    ];
    for (ask, format, check) in cases {
        let re = regex_lite(check);
        for temperature in [0.0, 0.9] {
            let (text, finish, _) =
                cpu(&chat(tk, ask), &opts(format.clone(), temperature, 48)).unwrap();
            assert!(re(&text), "{format:?} (t {temperature}): {text:?}");
            assert_eq!(finish, FinishReason::Stop, "{format:?}: {text:?}");
        }
    }
}

/// The independent check of a regex case: llguidance's own regex engine is what is
/// tested, so the check uses another one (the `regex` crate via jsonschema's `pattern`).
fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool {
    let v = jsonschema::validator_for(&json!({"type": "string", "pattern": pattern})).unwrap();
    move |s: &str| v.is_valid(&json!(s))
}

#[test]
fn bad_or_unsatisfiable_formats_fail_before_any_token() {
    let tk = tokenizer();
    let prompt = chat(tk, "Hello");
    let bad = [
        ResponseFormat::JsonSchema {
            schema: json!({"type": "string", "minLength": 5, "maxLength": 2}),
            strict: None,
        },
        ResponseFormat::JsonSchema {
            schema: json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}, "required": ["a"]}),
            strict: None,
        },
        ResponseFormat::JsonSchema {
            schema: json!("not a schema"),
            strict: None,
        },
        ResponseFormat::Regex {
            pattern: "([a-z]".into(),
        },
        ResponseFormat::Grammar {
            grammar: "start: missing_rule\n".into(),
        },
        ResponseFormat::Grammar {
            grammar: "  ".into(),
        },
    ];
    for format in bad {
        let mut texts = 0;
        let mut state = CpuState::default();
        let mut b = CpuBackend::new(cpu_model(), &mut state, None);
        let r = pollster::block_on(engine::generate(
            &mut b,
            tk,
            &prompt,
            &opts(format.clone(), 0.0, 8),
            |_, _| {
                texts += 1;
                true
            },
        ));
        match r {
            Err(e @ Error::Grammar(_)) => assert!(e.to_string().starts_with("response format:")),
            other => panic!("{format:?}: {other:?}"),
        }
        assert_eq!(texts, 0, "{format:?}");
        assert!(b.tokens().is_empty(), "{format:?}: nothing ran");
    }
}

/// A keyword the grammar cannot express is an error when strict (the default), and
/// ignored — the rest enforced — with `strict: false`.
#[test]
fn unsupported_keywords_strict_and_lenient() {
    let tk = tokenizer();
    let prompt = chat(tk, "Reply in JSON only: two colors.");
    let schema = json!({"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 2, "maxItems": 2, "uniqueItems": true});
    for strict in [None, Some(true)] {
        let format = ResponseFormat::JsonSchema {
            schema: schema.clone(),
            strict,
        };
        match cpu(&prompt, &opts(format, 0.0, 8)) {
            Err(e) => assert!(e.to_string().contains("uniqueItems"), "{e}"),
            Ok(r) => panic!("strict {strict:?}: {r:?}"),
        }
    }
    let format = ResponseFormat::JsonSchema {
        schema: schema.clone(),
        strict: Some(false),
    };
    let (text, finish, _) = cpu(&prompt, &opts(format, 0.0, 64)).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert_eq!(v.as_array().map(Vec::len), Some(2), "{text}");
    assert_eq!(finish, FinishReason::Stop);
}

use crate::common::small_gpu_model as gpu_model;

/// The three ways a guided GPU step can be masked pick the same tokens (greedy and
/// seeded sampling), and the reply is valid JSON: the mask computed while the device
/// runs the step's layers, applied by the top-k kernel (what runs); the mask computed
/// before the step is submitted (the trait's `forward_masked`); and the mask applied on
/// the CPU over the same GPU's full logits. On the default model cut to its first
/// layers (`common::small_gpu_model`): the subject is the mask, not the model.
#[test]
fn gpu_masks_pick_what_the_cpu_mask_picks() {
    let m = gpu_model();
    let tk = tokenizer();
    let session = || {
        let o = SessionOptions {
            max_context: 256,
            ..crate::common::f32_session()
        };
        GpuSession::new(m, o).unwrap()
    };
    let list = schemas();
    for (i, temperature) in [(3, 0.0), (10, 0.8)] {
        let (what, schema) = &list[i];
        let prompt = chat(tk, &format!("Reply in JSON only: {what}."));
        let format = ResponseFormat::JsonSchema {
            schema: schema.clone(),
            strict: None,
        };
        // Top-k is the sampler's 64 candidates either way: top_k 64 on the CPU too.
        let mut o = opts(format, temperature, 64);
        o.sampler.top_k = 64;
        let (mut s1, mut s2, mut s3) = (session(), session(), session());
        let on_gpu = run(&mut GpuBackend::new(m, &mut s1), &prompt, &o).unwrap();
        let first = run(
            &mut Through::plain(GpuBackend::new(m, &mut s2)),
            &prompt,
            &o,
        )
        .unwrap();
        let on_cpu = run(
            &mut Through::full_logits(GpuBackend::new(m, &mut s3)),
            &prompt,
            &o,
        )
        .unwrap();
        let t = temperature;
        assert_eq!(
            on_gpu.2, first.2,
            "{what} (t {t}): {} vs {}",
            on_gpu.0, first.0
        );
        assert_eq!(
            on_gpu.2, on_cpu.2,
            "{what} (t {t}): {} vs {}",
            on_gpu.0, on_cpu.0
        );
        check_json(what, schema, &on_gpu.0, on_gpu.1);
    }
}

/// The GPU backend computes a step's mask once, after submitting the layers.
#[test]
fn the_mask_is_computed_once_a_step() {
    let m = gpu_model();
    let tk = tokenizer();
    let mut s = GpuSession::new(m, SessionOptions::default()).unwrap();
    let mut b = GpuBackend::new(m, &mut s);
    let prompt = chat(tk, "Hi");
    pollster::block_on(b.forward(&prompt, Want::top(1))).unwrap();
    let mut calls = 0;
    let mut mask = || {
        calls += 1;
        Ok(vec![u32::MAX; tk.vocab_size().div_ceil(32)])
    };
    let (tokens, want, mask) = (&prompt[..1], Want::top(4), &mut mask);
    let l = pollster::block_on(b.forward_masked(Masked { tokens, want, mask })).unwrap();
    assert_eq!(calls, 1);
    assert!(matches!(l, Logits::Top(ref t) if t.len() == 4), "{l:?}");
}
