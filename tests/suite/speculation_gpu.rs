//! Speculative decoding on the GPU: a check of several positions in one pass (GEMVs
//! that decode each weight once for all of them, one-pass attention token after
//! token) gives one-token steps' logits bit for bit — on Gemma 3's layers (K-quants),
//! an adapter, two KV formats, and after guesses are cut back; and pipelined replies
//! that leave their chain for checks (greedy, seeded sampling with top-p and the
//! repetition penalty, a stop string, guided) write plain decoding's text in fewer
//! forwards.

use crate::common;

use pippin::engine::{
    self, Backend, FinishReason, GenerateOptions, GpuBackend, GpuLoraAdapter, GpuModel, GpuSession,
    Logits, SessionOptions, Speculation, Usage, Want,
};
use pippin::gpu::{Caps, Gpu};
use pippin::guided::ResponseFormat;
use pippin::quant::kv::KvFormat;
use pippin::sampler::SamplerOptions;
use pippin::tokenizer::{Message, Tokenizer};
use std::path::Path;
use std::sync::OnceLock;

fn load(path: &Path) -> (GpuModel, Tokenizer) {
    let gpu = pollster::block_on(Gpu::new(Caps::default())).expect("a GPU adapter");
    let (m, g) =
        pollster::block_on(GpuModel::load_file(gpu, path, &mut |_, _| {})).expect("model uploads");
    (m, Tokenizer::from_gguf(&g.metadata).unwrap())
}

fn default_model() -> &'static (GpuModel, Tokenizer) {
    static M: OnceLock<(GpuModel, Tokenizer)> = OnceLock::new();
    M.get_or_init(|| load(&common::model_path()))
}

fn session(m: &GpuModel, kv: KvFormat) -> GpuSession {
    let opts = SessionOptions {
        max_context: 512,
        kv,
        chunk: 64,
        cpu_memory: None,
        session_memory: None,
    };
    GpuSession::new(m, opts).unwrap()
}

fn full(b: &mut impl Backend, tokens: &[u32]) -> Vec<f32> {
    match pollster::block_on(b.forward(tokens, Want::logits())).unwrap() {
        Logits::Full(l) => l,
        Logits::Top(_) => panic!("full logits were asked"),
    }
}

/// A check of `more` and one-token steps agree bit for bit, and again after the
/// cache is cut back into the checked positions (guesses that were not kept).
fn check_against_steps(what: &str, m: &GpuModel, adapter: Option<&GpuLoraAdapter>, kv: KvFormat) {
    let prompt = [504u32, 3575, 282, 4649, 314];
    let more = [260u32, 3575, 282, 4649, 314, 2114, 30, 28];
    let (mut s1, mut s2) = (session(m, kv), session(m, kv));
    let mut one = GpuBackend::with_adapter(m, &mut s1, adapter);
    let mut many = GpuBackend::with_adapter(m, &mut s2, adapter);
    assert_eq!(many.verifies(), more.len(), "{what}");
    full(&mut one, &prompt);
    full(&mut many, &prompt);
    let check = |many: &mut GpuBackend, one: &mut GpuBackend, tokens: &[u32]| {
        let rows = pollster::block_on(many.verify(tokens)).unwrap();
        assert_eq!(rows.len(), tokens.len());
        for (i, row) in rows.iter().enumerate() {
            let want = full(one, &tokens[i..i + 1]);
            let differ = row.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert!(
                differ == 0,
                "{what} {kv:?}: position {i} of {}: {differ} logits differ from a one-token step",
                tokens.len()
            );
        }
        assert_eq!(many.tokens(), one.tokens(), "{what}");
    };
    check(&mut many, &mut one, &more);
    // Three guesses kept: the cache is cut after them, and the next check goes on.
    let keep = prompt.len() + 4;
    many.truncate(keep);
    one.truncate(keep);
    check(&mut many, &mut one, &[30, 28, 260]);
    // Checks and decode steps alternate without creating anything once recorded
    // (an adapter's check plan does not evict its decode plan).
    let round = |many: &mut GpuBackend| {
        let at = many.tokens().len();
        pollster::block_on(many.verify(&more)).unwrap();
        many.truncate(at + 2);
        pollster::block_on(many.forward(&[42], Want::top(1))).unwrap();
    };
    round(&mut many);
    let before = m.gpu.objects_created();
    round(&mut many);
    round(&mut many);
    assert_eq!(
        m.gpu.objects_created(),
        before,
        "{what}: objects created by checks"
    );
}

#[test]
fn a_gpu_check_is_one_token_steps_bit_for_bit() {
    // Models of this test alone: it counts the GPU objects their device creates.
    // The default model cut to its first layers: the check's kernels, not its numbers.
    let (m, _) = load(&common::small_model_path());
    check_against_steps("small model", &m, None, KvFormat::Int8);
    let (config, weights) = common::rank8_adapter_for(&m.config);
    let a = pippin::adapters::parse(config.as_bytes(), &weights, &m.config).unwrap();
    let ga = GpuLoraAdapter::upload(&m.gpu, &a).unwrap();
    let what = "small model + rank-8 adapter";
    check_against_steps(what, &m, Some(&ga), KvFormat::F32);
    // QK-norm, sliding-window rings, post-norms, GeGLU, K-quants, a 262K-token head.
    let gemma = load(&common::gemma_path()).0;
    check_against_steps("Gemma 3", &gemma, None, KvFormat::Int8);
}

/// A reply on the GPU with speculation on (at every match), auto and off.
fn each(prompt: &[u32], o: &GenerateOptions) -> [(String, Usage); 3] {
    let (m, tk) = default_model();
    [Speculation::On, Speculation::Auto, Speculation::Off].map(|speculation| {
        let mut s = session(m, KvFormat::Int8);
        let mut b = GpuBackend::new(m, &mut s);
        let o = GenerateOptions {
            speculation,
            ..o.clone()
        };
        let mut text = String::new();
        let (_, usage) = pollster::block_on(engine::generate(&mut b, tk, prompt, &o, |t, _| {
            text.push_str(t);
            true
        }))
        .unwrap();
        (text, usage)
    })
}

const PASSAGE: &str = "The Debian Project is an association of individuals who have made common cause to create a free operating system.";

#[test]
fn pipelined_gpu_replies_are_the_same_text_in_fewer_forwards() {
    let tk = &default_model().1;
    let ask = format!("Repeat this passage word for word:\n\n{PASSAGE}");
    let prompt = tk.encode_chat(&[Message::new("user", &ask)], true).unwrap();
    // Two cases of few tokens (each is three replies of the full model, whose checks
    // lavapipe runs slowest of all: ~8 minutes for three cases of 24–40 tokens):
    // greedy with guesses kept and cut back and a stop string inside a kept guess,
    // and sampling.
    for (max_tokens, stop, temperature) in [
        (24, vec!["common cause".to_string()], 0.0),
        (12, vec![], 0.7),
    ] {
        let o = GenerateOptions {
            max_tokens,
            stop,
            sampler: SamplerOptions {
                temperature,
                top_p: 0.9,
                repetition_penalty: 1.1,
                seed: 5,
                ..Default::default()
            },
            ..Default::default()
        };
        let [(on, u_on), (auto, u_auto), (off, u_off)] = each(&prompt, &o);
        eprintln!("{:?} / {:?}: {on:?}", u_on.speculation, u_auto.speculation);
        assert_eq!(on, off, "t {temperature}: speculation changed the text");
        assert_eq!(auto, off, "t {temperature}: speculation changed the text");
        assert_eq!(u_on.generated_tokens, u_off.generated_tokens);
        let (s, plain) = (u_on.speculation, u_off.speculation);
        assert_eq!(plain.proposed, 0);
        assert!(s.accepted > 0 && s.accepted <= s.proposed, "{s:?}");
        assert!(
            s.forwards < plain.forwards,
            "each kept guess saves a forward: {s:?} vs {plain:?}"
        );
    }
}

/// A guided reply (not pipelined: each mask follows the token before) checks guesses
/// under the grammar's mask at every position: the same text, still in the format.
#[test]
fn guided_gpu_replies_check_guesses_under_the_mask() {
    let (m, tk) = default_model();
    let ask = format!("Repeat this passage word for word:\n\n{PASSAGE}");
    let prompt = tk.encode_chat(&[Message::new("user", &ask)], true).unwrap();
    let pattern = "The Debian Project is [a-z ]+";
    let run = |speculation| {
        let mut s = session(m, KvFormat::Int8);
        let mut b = GpuBackend::new(m, &mut s);
        let o = GenerateOptions {
            max_tokens: 14,
            speculation,
            response_format: Some(ResponseFormat::Regex {
                pattern: pattern.into(),
            }),
            ..Default::default()
        };
        let mut text = String::new();
        let (finish, usage) =
            pollster::block_on(engine::generate(&mut b, tk, &prompt, &o, |t, _| {
                text.push_str(t);
                true
            }))
            .unwrap();
        (text, finish, usage)
    };
    let (on, finish, u) = run(Speculation::On);
    let (off, _, plain) = run(Speculation::Off);
    eprintln!("{:?}: {on:?} ({finish:?})", u.speculation);
    assert_eq!(on, off, "speculation changed the guided text");
    assert!(on.starts_with("The Debian Project is "), "{on:?}");
    assert!(
        on[22..].chars().all(|c| c.is_ascii_lowercase() || c == ' '),
        "{on:?}"
    );
    assert!(matches!(finish, FinishReason::Length | FinishReason::Stop));
    assert!(u.speculation.accepted > 0, "{:?}", u.speculation);
    assert!(u.speculation.forwards < plain.speculation.forwards);
}
