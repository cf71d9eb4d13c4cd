//! Speculative decoding (prompt lookup) on the CPU backend: a check of several
//! positions in one pass gives one-token steps' logits bit for bit, on every weight
//! format; and replies — greedy, seeded sampling, stop strings, max tokens, guided —
//! are the same text with speculation on and off, while copying replies take fewer
//! forwards than tokens.

use crate::common;

use common::models_file;
use pippin::engine::{
    generate, generate_drafted, AnyBackend, Backend, CpuBackend, CpuState, GenerateOptions, Logits,
    Speculation, Usage, Want,
};
use pippin::gguf::Gguf;
use pippin::quant::kv::KvFormat;
use pippin::sampler::SamplerOptions;
use pippin::tokenizer::{Message, Tokenizer};
use std::path::PathBuf;

fn full(b: &mut impl Backend, tokens: &[u32]) -> Vec<f32> {
    match pollster::block_on(b.forward(tokens, Want::logits())).unwrap() {
        Logits::Full(l) => l,
        Logits::Top(_) => panic!("the CPU backend returns full logits"),
    }
}

/// At most `max_tokens` tokens at `temperature` (0: greedy) with `seed`, ending before
/// `stop`.
fn sampled(max_tokens: usize, temperature: f32, seed: u64, stop: Vec<String>) -> GenerateOptions {
    GenerateOptions {
        stop,
        sampler: SamplerOptions {
            temperature,
            seed,
            ..Default::default()
        },
        ..GenerateOptions::up_to(max_tokens)
    }
}

#[test]
fn a_verified_step_is_one_token_steps_bit_for_bit() {
    let files: Vec<PathBuf> = ["Q4_K_M", "Q6_K", "Q5_0", "IQ4_NL"]
        .iter()
        .map(|n| models_file(&format!("fixtures/SmolLM2-135M-Instruct.{n}.gguf")))
        .chain([common::model_path()])
        .collect();
    let prompt = [504u32, 3575, 282, 4649, 314];
    let more = [260u32, 3575, 282, 4649, 314, 2114, 30, 28];
    for path in files {
        let m = common::load_cpu(&path, None);
        for kv in [KvFormat::F32, KvFormat::Int8] {
            let (mut s1, mut s2) = (CpuState::new(kv), CpuState::new(kv));
            let mut one = CpuBackend::new(&m, &mut s1, None);
            let mut many = CpuBackend::new(&m, &mut s2, None);
            full(&mut one, &prompt);
            full(&mut many, &prompt);
            let rows = pollster::block_on(many.verify(&more)).unwrap();
            assert_eq!(rows.len(), more.len());
            for (i, row) in rows.iter().enumerate() {
                let want = full(&mut one, &more[i..i + 1]);
                assert!(
                    row == &want,
                    "{} {kv:?}: position {i} differs from a one-token step",
                    path.display()
                );
            }
            assert_eq!(many.tokens(), one.tokens());
        }
    }
}

/// A reply with speculation on (at every match), auto and off: (text, usage) each.
fn each(prompt: &[u32], tk: &Tokenizer, o: &GenerateOptions) -> [(String, Usage); 3] {
    let m = common::cpu_model();
    [Speculation::On, Speculation::Auto, Speculation::Off].map(|speculation| {
        let mut state = CpuState::new(KvFormat::Int8);
        let mut b = CpuBackend::new(m, &mut state, None);
        let o = GenerateOptions {
            speculation,
            ..o.clone()
        };
        let mut text = String::new();
        let (_, usage) = pollster::block_on(generate(&mut b, tk, prompt, &o, |t, _| {
            text.push_str(t);
            true
        }))
        .unwrap();
        (text, usage)
    })
}

fn tokenizer() -> Tokenizer {
    let (g, _) = Gguf::open(&common::model_path()).unwrap();
    Tokenizer::from_gguf(&g.metadata).unwrap()
}

const PASSAGE: &str = "The Debian Project is an association of individuals who have made common cause to create a free operating system. This operating system is called Debian. Debian systems currently use the Linux kernel or the FreeBSD kernel.";

#[test]
fn copying_replies_are_the_same_text_in_fewer_forwards() {
    let tk = tokenizer();
    let ask = format!("Repeat this passage word for word:\n\n{PASSAGE}");
    let prompt = tk.encode_chat(&[Message::new("user", &ask)], true).unwrap();
    for (temperature, stop) in [
        (0.0, vec![]),
        (0.7, vec![]),
        (0.0, vec!["common cause".into()]),
    ] {
        let o = sampled(48, temperature, 5, stop);
        let [(on, u_on), (auto, u_auto), (off, u_off)] = each(&prompt, &tk, &o);
        assert_eq!(on, off, "t {temperature}: speculation changed the text");
        assert_eq!(auto, off, "t {temperature}: speculation changed the text");
        let a = u_auto.speculation;
        assert_eq!(a.forwards + a.accepted, u_off.speculation.forwards, "{a:?}");
        assert_eq!(u_on.generated_tokens, u_off.generated_tokens);
        let s = u_on.speculation;
        eprintln!(
            "t {temperature}: {s:?}, {} tokens: {on:?}",
            u_on.generated_tokens
        );
        assert_eq!(u_off.speculation.proposed, 0);
        assert!(s.accepted > 0 && s.accepted <= s.proposed, "{s:?}");
        assert!(
            s.forwards + s.accepted == u_off.speculation.forwards,
            "each kept guess saves a forward: {s:?} vs {:?}",
            u_off.speculation
        );
    }
}

/// A reply with `draft` proposing (speculation on), and without speculation.
fn drafted(
    draft: &pippin::engine::CpuModel,
    prompt: &[u32],
    tk: &Tokenizer,
    o: &GenerateOptions,
) -> [(String, Usage); 2] {
    let m = common::cpu_model();
    [Speculation::On, Speculation::Off].map(|speculation| {
        let (mut s, mut ds) = (CpuState::new(KvFormat::Int8), CpuState::new(KvFormat::Int8));
        let mut b = CpuBackend::new(m, &mut s, None);
        let mut d: AnyBackend = Box::new(CpuBackend::new(draft, &mut ds, None));
        let o = GenerateOptions {
            speculation,
            ..o.clone()
        };
        let mut text = String::new();
        let r = generate_drafted(&mut b, Some(&mut d), tk, prompt, &o, None, |t, _| {
            text.push_str(t);
            true
        });
        let (_, usage, _) = pollster::block_on(r).unwrap();
        (text, usage)
    })
}

#[test]
fn a_draft_model_s_guesses_give_the_same_text_in_fewer_forwards() {
    // The Q2_K file of the same model drafts for the Q4_1 one: most guesses are kept,
    // some are not (each miss rewinds both caches).
    let draft = common::load_cpu(
        &models_file("fixtures/SmolLM2-135M-Instruct.Q2_K.gguf"),
        None,
    );
    let tk = tokenizer();
    let ask = "Write a short story about a lighthouse keeper.";
    let prompt = tk.encode_chat(&[Message::new("user", ask)], true).unwrap();
    for (temperature, stop) in [(0.0, vec![]), (0.8, vec![]), (0.0, vec!["stood as".into()])] {
        let o = sampled(40, temperature, 11, stop);
        let [(on, u_on), (off, u_off)] = drafted(&draft, &prompt, &tk, &o);
        assert_eq!(on, off, "t {temperature}: the draft changed the text");
        assert_eq!(u_on.generated_tokens, u_off.generated_tokens);
        let s = u_on.speculation;
        eprintln!(
            "t {temperature}: {s:?}, {} tokens: {on:?}",
            u_on.generated_tokens
        );
        assert!(s.accepted > 0 && s.accepted <= s.proposed, "{s:?}");
        assert!(
            s.forwards + s.accepted == u_off.speculation.forwards,
            "each kept guess saves a forward: {s:?} vs {:?}",
            u_off.speculation
        );
    }
}

#[test]
fn a_draft_of_another_vocabulary_is_refused() {
    let session = pippin::engine::SessionOptions::default();
    let load = |p: &std::path::Path| {
        pollster::block_on(pippin::engine::Engine::load_file_cpu(p, session.clone())).unwrap()
    };
    let mut e = load(&common::model_path());
    let err = e.set_draft(load(&common::gemma_path())).unwrap_err();
    assert_eq!(err.code(), "BadOptions", "{err}");
    assert!(err.to_string().contains("vocabulary"), "{err}");
    assert!(!e.has_draft());
    // The model stays usable, and takes a draft of its vocabulary.
    e.set_draft(load(&common::model_path())).unwrap();
    assert!(e.has_draft());
}
