//! The GPU under a smaller storage binding limit than lavapipe's 128 MiB (as many
//! phones' and integrated GPUs' `maxStorageBufferBindingSize`, forced with
//! `Gpu::with_max_binding`): every larger tensor is split across bindings and prefill
//! chunks shrink to fit, with the logits of the unsplit model; a model whose KV cache
//! or RoPE table cannot fit one binding at the asked context is refused from its
//! header, naming the context that fits; and the header's estimate of a session's
//! buffers is what the session then holds.

use crate::common;

use pippin::engine::{
    AdapterChoice, Backend, Engine, Event, GenerateOptions, GpuBackend, GpuFootprint, GpuModel,
    GpuSession, Logits, Prompt, SessionOptions, Want,
};
use pippin::gguf::Gguf;
use pippin::gpu::{Caps, Gpu};
use pippin::model::Config;
use pippin::testing::assert_close;

fn load(cap: Option<u64>) -> (GpuModel, Gguf) {
    let gpu = pollster::block_on(Gpu::with_max_binding(Caps::default(), cap)).expect("a GPU");
    pollster::block_on(GpuModel::load_file(
        gpu,
        &common::model_path(),
        &mut |_, _| {},
    ))
    .expect("the default model loads")
}

fn opts(max_context: usize) -> SessionOptions {
    SessionOptions {
        max_context,
        ..Default::default()
    }
}

fn logits(m: &GpuModel, s: &mut GpuSession, tokens: &[u32]) -> Vec<f32> {
    match pollster::block_on(GpuBackend::new(m, s).forward(tokens, Want::logits())).unwrap() {
        Logits::Full(l) => l,
        Logits::Top(_) => unreachable!("full logits were asked for"),
    }
}

/// A prompt of 7 tokens, then two greedy steps: every step's logits.
fn run(m: &GpuModel, max_context: usize) -> Vec<Vec<f32>> {
    let mut s = GpuSession::new(m, opts(max_context)).unwrap();
    let prompt: Vec<u32> = (0..7).map(|i| 100 + 37 * i).collect();
    let mut all = vec![logits(m, &mut s, &prompt)];
    for _ in 0..2 {
        let t = pippin::sampler::argmax(all.last().unwrap()) as u32;
        all.push(logits(m, &mut s, &[t]));
    }
    all
}

#[test]
fn a_smaller_binding_limit_splits_the_tensors_and_keeps_the_logits() {
    let (full, gguf) = load(None);
    let want = run(&full, 256);
    // The header's estimate is what a session then holds.
    let c = Config::from_gguf(&gguf).unwrap();
    let s = GpuSession::new(&full, opts(256)).unwrap();
    let f = GpuFootprint::check(&gguf, &c, &opts(256), full.gpu.max_binding()).unwrap();
    assert_eq!(f.kv, s.kv_bytes(), "KV cache bytes");
    assert_eq!(f.scratch, s.scratch_bytes(), "scratch bytes");
    drop((s, full));
    // 256 KiB: every matrix in parts (the embedding, also the head, in 109), the
    // logits (192 KiB) just within one binding. The logits are the same to the bit:
    // a row is computed alike in any part.
    {
        let cap = 256u64 << 10;
        let (m, _) = load(Some(cap));
        let rows: usize = m.embed.parts.iter().map(|p| p.rows).sum();
        assert_eq!(rows, m.embed.rows, "the parts cover the embedding");
        assert!(
            m.embed.parts.len() > 1,
            "the embedding is split under {cap}"
        );
        let matrices = m.layers.iter().flat_map(|l| [&l.wo, &l.down]);
        for p in matrices.chain([&m.embed]).flat_map(|m| &m.parts) {
            assert!(
                p.qs.size() <= cap && p.scales.size() <= cap,
                "a part over {cap}"
            );
        }
        let got = run(&m, 256);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("{cap} bytes, step {i}"), g, w, 0.0);
        }
    }
}

#[test]
fn a_context_over_the_binding_limit_is_refused_before_the_weights() {
    let path = common::model_path();
    let len = std::fs::metadata(&path).unwrap().len();
    let load = |max_context: usize| {
        let gpu = pollster::block_on(Gpu::with_max_binding(Caps::default(), Some(1 << 20)))
            .expect("a GPU");
        let read = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut src = pippin::gguf::ReadSource {
            reader: common::Counting(std::fs::File::open(&path).unwrap(), read.clone()),
            len: Some(len),
        };
        let e = pollster::block_on(Engine::load(
            gpu,
            &mut src,
            opts(max_context),
            &mut |_, _| {},
        ));
        (e, read.get())
    };
    // A RoPE table holds 64 floats a position (256 bytes): 4096 positions in 1 MiB;
    // a layer's int8 K cache 192 bytes a position (5461).
    let (e, read) = load(8192);
    let err = e.err().expect("refused");
    assert_eq!(err.code(), "DeviceLimits", "{err}");
    let msg = err.to_string();
    for part in [
        "a RoPE table",
        "2.0 MiB",
        "1.0 MiB",
        "maxContext 8192",
        "at most 4096 fits",
    ] {
        assert!(msg.contains(part), "{part:?} in {msg:?}");
    }
    assert!(
        read < 8 << 20,
        "{read} bytes of {len} read before the refusal"
    );
    // The context it names loads and runs.
    let (e, _) = load(4096);
    let mut e = e.expect("maxContext 4096 fits 1 MiB bindings");
    let prompt = Prompt::Text("Once upon a time".into());
    let o = GenerateOptions::up_to(2);
    let id = pollster::block_on(e.start(&prompt, &o, &AdapterChoice::Active)).unwrap();
    let mut tokens = 0;
    while let Event::Text { .. } = pollster::block_on(e.next(id)).unwrap() {
        tokens += 1;
    }
    assert!(tokens > 0, "no text");
}
