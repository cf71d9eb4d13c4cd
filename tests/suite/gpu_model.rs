//! The whole default model on the GPU (lavapipe on CPU-only machines) against the CPU
//! reference: teacher-forced logits, greedy tokens, quantized KV, KV reuse across
//! chat turns (on the model cut to its first layers), prefill chunking (likewise),
//! context overflow.

use crate::common;

use common::{model_path, reference};
use pippin::engine::{
    generate, Backend, GenerateOptions, GpuBackend, GpuModel, GpuSession, Logits, ReferenceSession,
    SessionOptions, Want,
};
use pippin::gguf::Gguf;
use pippin::gpu::{Caps, Gpu};
use pippin::kernels::{Kernels, Tuning};
use pippin::model::KvCache;
use pippin::quant::kv::KvFormat;
use pippin::sampler::argmax;
use pippin::tokenizer::{Message, Tokenizer};

use crate::common::gpu_model as model;

fn be(s: &mut GpuSession) -> GpuBackend<'_> {
    GpuBackend::new(model(), s)
}

fn session(kv: KvFormat, chunk: usize) -> GpuSession {
    session_on(model(), kv, chunk)
}

/// Tests of what the session does with its cache (chunks, turns), not of the model's
/// numbers, run the default model cut to its first layers (`common::small_gpu_model`).
fn small() -> &'static GpuModel {
    common::small_gpu_model()
}

fn session_on(m: &GpuModel, kv: KvFormat, chunk: usize) -> GpuSession {
    GpuSession::new(
        m,
        SessionOptions {
            max_context: 256,
            kv,
            chunk,
            cpu_memory: None,
            session_memory: None,
        },
    )
    .unwrap()
}

fn logits(s: &mut GpuSession, tokens: &[u32]) -> Vec<f32> {
    logits_on(model(), s, tokens)
}

fn logits_on(m: &GpuModel, s: &mut GpuSession, tokens: &[u32]) -> Vec<f32> {
    let mut b = GpuBackend::new(m, s);
    match pollster::block_on(b.forward(tokens, Want::logits())).unwrap() {
        Logits::Full(l) => l,
        Logits::Top(_) => unreachable!(),
    }
}

use pippin::testing::max_abs_diff as max_diff;

const PROMPT: [u32; 5] = [504, 3575, 282, 4649, 314]; // "The capital of France is"

/// Eight greedy steps of `m` (f32 KV; decode steps `fused` or not) against the CPU
/// reference: logits within 1e-2, the same tokens.
fn teacher_forced_like_the_cpu(m: &GpuModel, fused: bool) {
    let cpu = reference();
    let mut cache = KvCache::new(&cpu.config);
    let opts = crate::common::f32_session();
    let mut gpu = GpuSession::new(m, opts).unwrap();
    gpu.set_fused(fused);
    let mut run = |tokens: &[u32]| match pollster::block_on(
        GpuBackend::new(m, &mut gpu).forward(tokens, Want::logits()),
    ) {
        Ok(Logits::Full(l)) => l,
        other => panic!("full logits were asked for: {:?}", other.err()),
    };
    let mut want = cpu.forward(&mut cache, &PROMPT, false).unwrap();
    let mut got = run(&PROMPT);
    for step in 0..8 {
        let d = max_diff(&got, &want);
        assert!(d < 1e-2, "step {step}: logits differ by {d}");
        let (g, c) = (argmax(&got), argmax(&want));
        assert_eq!(g, c, "step {step}: greedy token");
        want = cpu.forward(&mut cache, &[c as u32], false).unwrap();
        got = run(&[c as u32]);
    }
}

#[test]
fn f32_kv_teacher_forced_logits_and_greedy_tokens_match_the_cpu() {
    teacher_forced_like_the_cpu(model(), true);
}

/// The bench's "before": a decode step with its kernels apart.
#[test]
fn unfused_decode_steps_match_the_cpu_too() {
    teacher_forced_like_the_cpu(model(), false);
}

/// The kernels real GPUs get (16 threads per GEMV row, tiled GEMMs), forced on this
/// software adapter: the same model, the same answers.
#[test]
fn gpu_tuned_kernels_forced_here_match_the_cpu() {
    let gpu = pollster::block_on(Gpu::new(Caps::default())).unwrap();
    let mut m = pollster::block_on(GpuModel::load_file(gpu, &model_path(), &mut |_, _| {}))
        .unwrap()
        .0;
    m.kernels = Kernels::with_tuning(&m.gpu, Tuning::gpu(0)).into();
    teacher_forced_like_the_cpu(&m, true);
}

#[test]
fn int8_kv_first_step_top5_agrees() {
    let cpu = reference();
    let want = cpu
        .forward(&mut KvCache::new(&cpu.config), &PROMPT, false)
        .unwrap();
    let got = logits(&mut session(KvFormat::Int8, 64), &PROMPT);
    let top5 = |l: &[f32]| {
        let mut i: Vec<usize> = (0..l.len()).collect();
        i.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
        i.truncate(5);
        i
    };
    assert_eq!(top5(&got), top5(&want));
}

#[test]
fn chunked_prefill_equals_one_chunk() {
    let prompt: Vec<u32> = (0..23).map(|i| 300 + i * 17).collect();
    let a = logits_on(
        small(),
        &mut session_on(small(), KvFormat::F32, 64),
        &prompt,
    );
    let b = logits_on(small(), &mut session_on(small(), KvFormat::F32, 8), &prompt);
    assert!(max_diff(&a, &b) < 1e-3);
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_gguf(&Gguf::open(&model_path()).unwrap().0.metadata).unwrap()
}

/// Turn 2 reuses turn 1's KV cache and runs only the new tokens; its logits equal a
/// fresh session that prefills the whole conversation.
#[test]
fn second_chat_turn_reuses_the_kv_cache() {
    let tk = tokenizer();
    let opts = GenerateOptions::up_to(6);
    let mut msgs = vec![Message::new("user", "Hi!")];
    let p1 = tk.encode_chat(&msgs, true).unwrap();
    let m = small();
    let mut s = session_on(m, KvFormat::F32, 64);
    let mut reply = String::new();
    pollster::block_on(generate(
        &mut GpuBackend::new(m, &mut s),
        &tk,
        &p1,
        &opts,
        |t, _| {
            reply.push_str(t);
            true
        },
    ))
    .unwrap();
    msgs.push(Message::new("assistant", &reply));
    msgs.push(Message::new("user", "And what is 2+2?"));
    let p2 = tk.encode_chat(&msgs, true).unwrap();
    let cached = pippin::engine::common_prefix(GpuBackend::new(m, &mut s).tokens(), &p2);
    assert!(
        cached > p1.len(),
        "turn 1's prompt and reply are reused ({cached} tokens)"
    );
    GpuBackend::new(m, &mut s).truncate(cached);
    let reused = logits_on(m, &mut s, &p2[cached..]);
    let fresh = logits_on(m, &mut session_on(m, KvFormat::F32, 64), &p2);
    let d = max_diff(&reused, &fresh);
    assert!(d < 1e-3, "reused vs fresh logits differ by {d}");
}

#[test]
fn gpu_writes_the_same_text_as_the_cpu() {
    let tk = tokenizer();
    let opts = GenerateOptions::up_to(10);
    let run = |b: &mut dyn FnMut(&mut String)| {
        let mut out = String::new();
        b(&mut out);
        out
    };
    let gpu_text = run(&mut |out| {
        let mut s = session(KvFormat::Int8, 64);
        pollster::block_on(generate(&mut be(&mut s), &tk, &PROMPT, &opts, |t, _| {
            out.push_str(t);
            true
        }))
        .unwrap();
    });
    let cpu_text = run(&mut |out| {
        let mut s = ReferenceSession::new(reference());
        pollster::block_on(generate(&mut s, &tk, &PROMPT, &opts, |t, _| {
            out.push_str(t);
            true
        }))
        .unwrap();
    });
    assert_eq!(gpu_text, cpu_text);
    assert!(gpu_text.starts_with(" Paris."));
}

#[test]
fn context_overflow_is_an_error_and_the_session_stays_usable() {
    let mut s = GpuSession::new(
        model(),
        SessionOptions {
            max_context: 8,
            kv: KvFormat::Int8,
            chunk: 64,
            cpu_memory: None,
            session_memory: None,
        },
    )
    .unwrap();
    logits(&mut s, &PROMPT);
    let e = pollster::block_on(be(&mut s).forward(&PROMPT, Want::logits()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("context"), "{e}");
    assert_eq!(be(&mut s).tokens().len(), 5);
    let e = pollster::block_on(be(&mut s).forward(&[60_000], Want::logits()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("vocabulary"), "{e}");
    logits(&mut s, &[7042]);
    assert_eq!(be(&mut s).tokens().len(), 6);
}

/// A download: chunks of an awkward size, total length unknown.
struct Chunks {
    data: Vec<u8>,
    pos: usize,
    size: usize,
}

impl pippin::engine::ByteSource for Chunks {
    async fn next_chunk(&mut self) -> pippin::Result<Option<Vec<u8>>> {
        let end = (self.pos + self.size).min(self.data.len());
        let c = self.data[self.pos..end].to_vec();
        self.pos = end;
        Ok((!c.is_empty()).then_some(c))
    }
    fn total_len(&self) -> Option<u64> {
        None
    }
}

fn load_chunks(data: Vec<u8>, size: usize) -> pippin::Result<GpuModel> {
    let gpu = pollster::block_on(Gpu::new(Caps::default())).unwrap();
    let mut seen = 0;
    let mut progress = |read: u64, _total: u64| {
        assert!(read >= seen, "progress goes forward");
        seen = read;
    };
    let mut src = Chunks { data, pos: 0, size };
    pollster::block_on(GpuModel::load_from(gpu, &mut src, &mut progress)).map(|(m, _)| m)
}

#[test]
fn streamed_upload_in_odd_chunks_gives_the_same_model() {
    let data = std::fs::read(model_path()).unwrap();
    let streamed = load_chunks(data, 7919).unwrap();
    let mut s = GpuSession::new(
        &streamed,
        SessionOptions {
            max_context: 64,
            ..crate::common::f32_session()
        },
    )
    .unwrap();
    let got = match pollster::block_on(
        GpuBackend::new(&streamed, &mut s).forward(&PROMPT, Want::logits()),
    ) {
        Ok(Logits::Full(l)) => l,
        other => panic!("{other:?}"),
    };
    let want = logits(&mut session(KvFormat::F32, 64), &PROMPT);
    assert_eq!(got, want);
}

#[test]
fn truncated_streams_are_clear_errors() {
    let data = std::fs::read(model_path()).unwrap();
    let e = load_chunks(data[..50_000_000].to_vec(), 1 << 20)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("ends inside tensor"), "{e}");
    let e = load_chunks(data[..100_000].to_vec(), 4096)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("truncated"), "{e}");
    let e = load_chunks(b"not a model at all".to_vec(), 4096)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not a GGUF file"), "{e}");
}

/// A lost device is reported as such, and a model loads again on a new device.
#[test]
fn a_lost_device_is_reported_and_the_model_loads_again() {
    let load = || crate::common::load_gpu(&model_path());
    let opts = SessionOptions {
        max_context: 32,
        kv: KvFormat::Int8,
        ..Default::default()
    };
    let m = load();
    let mut s = GpuSession::new(&m, opts.clone()).unwrap();
    m.gpu.device.destroy();
    let e = pollster::block_on(GpuBackend::new(&m, &mut s).forward(&PROMPT, Want::logits()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lost") && e.contains("load the model again"),
        "{e}"
    );
    let m2 = load();
    let mut s2 = GpuSession::new(&m2, opts).unwrap();
    assert!(
        pollster::block_on(GpuBackend::new(&m2, &mut s2).forward(&PROMPT, Want::logits())).is_ok()
    );
}

/// A steady-state decode step creates no GPU object (no buffer, bind group or
/// pipeline: it replays a recorded plan into reused buffers), with top-k and a
/// repetition penalty as uniforms; and what it selects equals the immediate path's
/// logits.
#[test]
fn decode_steps_create_nothing_and_equal_the_immediate_path() {
    // A model of its own: the shared one's counter counts the other tests' objects.
    let own = crate::common::load_gpu(&model_path());
    let m = &own;
    let opts = crate::common::f32_session();
    let mut s = GpuSession::new(m, opts).unwrap();
    s.warm(m).unwrap();
    let ids = [1u32, 7, 42];
    let want = |k: usize, p: f32| Want {
        penalty: p,
        penalty_ids: &ids,
        ..Want::top(k)
    };
    let mut b = GpuBackend::new(m, &mut s);
    pollster::block_on(b.forward(&PROMPT, want(1, 1.0))).unwrap();
    let before = m.gpu.objects_created();
    let mut last = None;
    for (i, (k, p)) in [(1, 1.0), (64, 1.3), (5, 1.0), (40, 0.8)]
        .iter()
        .enumerate()
    {
        last = Some(pollster::block_on(b.forward(&[300 + i as u32], want(*k, *p))).unwrap());
    }
    assert_eq!(
        m.gpu.objects_created(),
        before,
        "objects created by 4 decode steps"
    );
    // The same conversation through the immediate path: full logits, penalty on the CPU.
    let mut fresh = session(KvFormat::F32, 64);
    let mut tokens = PROMPT.to_vec();
    tokens.extend([300, 301, 302, 303]);
    let mut full = logits(&mut fresh, &tokens);
    let sampler = pippin::sampler::Sampler::new(pippin::sampler::SamplerOptions {
        repetition_penalty: 0.8,
        repeat_last_n: 64,
        ..Default::default()
    });
    sampler.penalize(&mut full, &ids);
    let Some(Logits::Top(top)) = last else {
        panic!("candidates were asked for")
    };
    assert_eq!(top.len(), 40);
    for (id, l) in top {
        assert!(
            (full[id as usize] - l).abs() < 1e-3,
            "token {id}: {l} vs {}",
            full[id as usize]
        );
    }
}

/// A load given the session's options compiles, from the header and before any weight
/// is read, every pipeline warming that session would (`shadow::precompile`): warming
/// after it compiles nothing, and warming on fresh kernels compiles as many; for the
/// default model and Gemma 3 (sliding-window caches, QK-norm, post-norms, K-quants
/// stacked and apart). The model then picks the shared model's greedy tokens: the
/// shadow's plans were dropped, not replayed over the real weights.
#[test]
fn a_load_compiles_every_pipeline_from_the_header() {
    let opts = SessionOptions {
        max_context: 256,
        kv: KvFormat::Int8,
        chunk: 16,
        cpu_memory: None,
        session_memory: None,
    };
    let m = common::precompiled_load(&model_path(), &opts);
    let greedy = |m: &GpuModel| {
        let mut s = GpuSession::new(m, opts.clone()).unwrap();
        let mut b = GpuBackend::new(m, &mut s);
        let mut tokens = vec![];
        let mut next = PROMPT.to_vec();
        for _ in 0..3 {
            let l = match pollster::block_on(b.forward(&next, Want::logits())).unwrap() {
                Logits::Full(l) => l,
                Logits::Top(_) => unreachable!(),
            };
            next = vec![argmax(&l) as u32];
            tokens.push(next[0]);
        }
        tokens
    };
    assert_eq!(greedy(&m), greedy(model()));
    common::precompiled_load(&common::gemma_path(), &opts);
}
