//! A tour of crafted files through both loaders (the GPU's streaming
//! `GpuModel::load_from`, the CPU reference's seeking one): every broken or hostile
//! file is a clear error naming what and where — never a panic, a hang, or a file
//! read to the end before a header error.

use crate::common;

use common::synthetic::{with_dim0, with_type_id, Spec};
use pippin::engine::{ByteSource, GpuModel, ReadSource};
use pippin::gguf::{Array, Value};
use pippin::gpu::{Caps, Gpu};
use pippin::quant::GgmlType;
use pippin::Result;
use std::io::Cursor;

fn gpu_load(bytes: &[u8]) -> Result<GpuModel> {
    let gpu = pollster::block_on(Gpu::new(Caps::default())).expect("a GPU adapter");
    let mut src = ReadSource {
        reader: Cursor::new(bytes.to_vec()),
        len: Some(bytes.len() as u64),
    };
    pollster::block_on(GpuModel::load_from(gpu, &mut src, &mut |_, _| {})).map(|(m, _)| m)
}

fn cpu_load(bytes: &[u8], name: &str) -> Result<()> {
    let dir = common::root().join("target/test-crafted");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.gguf"));
    std::fs::write(&path, bytes).unwrap();
    pippin::model::load_reference(&path).map(|_| ())
}

/// Both loaders fail, each message containing every one of `words`.
fn refused(name: &str, bytes: &[u8], words: &[&str]) {
    for (loader, r) in [
        ("GPU", gpu_load(bytes).map(|_| ())),
        ("CPU", cpu_load(bytes, name)),
    ] {
        let e = match r {
            Ok(()) => panic!("{name}: the {loader} loader accepted it"),
            Err(e) => e.to_string(),
        };
        for w in words {
            assert!(
                e.contains(w),
                "{name} ({loader}): {e:?} should mention {w:?}"
            );
        }
    }
}

fn meta(k: &str, v: u32) -> (String, Value) {
    (k.to_string(), Value::U32(v))
}

/// `s` without the tensors `names`.
fn without(s: Spec, names: &[&str]) -> Spec {
    Spec {
        drop: names.iter().map(|n| n.to_string()).collect(),
        ..s
    }
}

/// `s` without tensor `name` is refused, naming it as missing.
fn missing(case: &str, s: Spec, name: &str) {
    refused(case, &without(s, &[name]).bytes(), &[name, "missing"]);
}

/// The Llama-shaped file as family `arch` (its own parts added by the caller).
fn llama_as(arch: &'static str) -> Spec {
    Spec {
        arch,
        ..Spec::llama()
    }
}

#[test]
fn valid_synthetic_models_load_on_both_loaders() {
    for (name, spec) in [("llama", Spec::llama()), ("gemma3", Spec::gemma3(8))] {
        let bytes = spec.bytes();
        gpu_load(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        cpu_load(&bytes, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // A one-token vocabulary: the embedding is a one-row matrix, still a matrix.
    let one = Spec {
        vocab: 1,
        ..Spec::llama()
    };
    gpu_load(&one.bytes()).expect("a one-row embedding loads");
    cpu_load(&one.bytes(), "vocab1").unwrap();
}

#[test]
fn widths_the_kernels_cannot_take_are_refused() {
    for hidden in [16, 48, 40] {
        let s = Spec {
            hidden,
            ..Spec::llama()
        };
        refused(
            &format!("hidden{hidden}"),
            &s.bytes(),
            &["embedding_length", "multiple of 32"],
        );
    }
    let s = Spec {
        ffn: 72,
        ..Spec::llama()
    };
    refused(
        "ffn72",
        &s.bytes(),
        &["feed_forward_length", "multiple of 32"],
    );
    let s = Spec {
        heads: 3,
        kv_heads: 2,
        ..Spec::llama()
    };
    refused("heads", &s.bytes(), &["3 attention heads", "2 KV heads"]);
    // Heads of 512: the CPU reference takes them, the GPU kernels say why not.
    let s = Spec {
        head_dim: 512,
        heads: 1,
        ..Spec::llama()
    };
    let e = gpu_load(&s.bytes()).err().expect("GPU refuses").to_string();
    assert!(e.contains("head dimension 512"), "{e}");
    cpu_load(&s.bytes(), "hd512").unwrap();
}

#[test]
fn sizes_out_of_range_are_refused_before_anything_is_sized_from_them() {
    for (k, v, word) in [
        ("llama.block_count", 1 << 30, "block_count"),
        ("llama.context_length", 0, "context_length"),
        ("llama.attention.head_count", 0, "head_count"),
        ("llama.embedding_length", u32::MAX, "embedding_length"),
    ] {
        let s = Spec {
            extra: vec![meta(k, v)],
            ..Spec::llama()
        };
        refused(k, &s.bytes(), &[word]);
    }
    // A row 2^32 + 64 long: on wasm32 `as usize` would wrap it to 64.
    let bytes = with_dim0(
        Spec::llama().bytes(),
        "blk.0.ffn_gate.weight",
        (1 << 32) + 64,
    );
    refused("dim0", &bytes, &["blk.0.ffn_gate.weight"]);
}

#[test]
fn tensor_types_named_in_errors() {
    // An id ggml does not have.
    let bytes = with_type_id(Spec::llama().bytes(), "blk.1.attn_k.weight", 99);
    refused(
        "type99",
        &bytes,
        &["blk.1.attn_k.weight", "unknown type id 99"],
    );
    // A real type Pippin does not decode (IQ2_XXS), on 256-wide rows.
    let s = Spec {
        hidden: 256,
        ffn: 256,
        ty: |n| {
            if n == "blk.0.ffn_down.weight" {
                GgmlType::Iq2Xxs
            } else {
                GgmlType::F32
            }
        },
        ..Spec::llama()
    };
    refused("iq2", &s.bytes(), &["blk.0.ffn_down.weight", "IQ2_XXS"]);
    // A block that does not divide the row: Q4_K (256) over rows of 64.
    let bytes = with_type_id(Spec::llama().bytes(), "blk.0.ffn_up.weight", 12);
    refused(
        "q4k-row64",
        &bytes,
        &["blk.0.ffn_up.weight", "Q4_K", "block"],
    );
}

#[test]
fn missing_pieces_are_named() {
    missing(
        "gemma-no-post-norm",
        Spec::gemma3(8),
        "blk.1.post_ffw_norm.weight",
    );
    let s = without(
        Spec::gemma3(8),
        &[
            "blk.0.post_attention_norm.weight",
            "blk.0.post_ffw_norm.weight",
        ],
    );
    refused(
        "gemma-no-post-norms",
        &s.bytes(),
        &["gemma3", "post_attention_norm"],
    );
    missing("no-attn-k", Spec::llama(), "blk.0.attn_k.weight");
    let s = Spec {
        arch: "bert",
        ..Spec::llama()
    };
    refused("bert", &s.bytes(), &["architecture \"bert\""]);
    let dup = Spec {
        duplicate: vec![("general.architecture".into(), Value::Str("llama".into()))],
        ..Spec::llama()
    };
    refused("dup-key", &dup.bytes(), &["general.architecture", "twice"]);
}

#[test]
fn truncated_files_are_refused() {
    let bytes = Spec::llama().bytes();
    refused("cut-tensor", &bytes[..bytes.len() - 100], &["truncated"]);
    refused("cut-header", &bytes[..200], &["truncated"]);
    refused("empty", &[], &["truncated"]);
    refused(
        "not-gguf",
        b"<!doctype html><html>404</html>",
        &["not a GGUF file"],
    );
}

/// A source that counts what the loader pulled.
struct Counting {
    inner: ReadSource<Cursor<Vec<u8>>>,
    pulled: u64,
}

impl ByteSource for Counting {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        let c = self.inner.next_chunk().await?;
        self.pulled += c.as_ref().map_or(0, |c| c.len() as u64);
        Ok(c)
    }
    fn total_len(&self) -> Option<u64> {
        self.inner.total_len()
    }
}

/// A header that declares more than the file holds fails at once: a damaged or
/// mislabelled multi-GB download is not buffered whole first.
#[test]
fn impossible_sizes_fail_without_reading_on() {
    let s = |t: &str| {
        let mut v = (t.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(t.as_bytes());
        v
    };
    let mut h = b"GGUF".to_vec();
    h.extend_from_slice(&3u32.to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes()); // tensors
    h.extend_from_slice(&1u64.to_le_bytes()); // metadata keys
    h.extend_from_slice(&s("general.architecture"));
    h.extend_from_slice(&8u32.to_le_bytes()); // a string...
    h.extend_from_slice(&(1u64 << 40).to_le_bytes()); // ...of 1 TiB
    h.resize(64 << 20, 0);
    let total = h.len() as u64;
    let mut src = Counting {
        inner: ReadSource {
            reader: Cursor::new(h),
            len: Some(total),
        },
        pulled: 0,
    };
    let gpu = pollster::block_on(Gpu::new(Caps::default())).unwrap();
    let e = pollster::block_on(GpuModel::load_from(gpu, &mut src, &mut |_, _| {}))
        .err()
        .expect("an error");
    assert!(e.to_string().contains("general.architecture"), "{e}");
    assert!(
        src.pulled <= 2 << 20,
        "read {} of {total} bytes before failing",
        src.pulled
    );
}

/// The tokenizer is checked from the header, before any weight is read.
#[test]
fn a_failing_header_check_stops_the_load() {
    let s = Spec {
        extra: vec![("tokenizer.ggml.model".into(), Value::Str("bert".into()))],
        ..Spec::llama()
    };
    let bytes = s.bytes();
    let gpu = pollster::block_on(Gpu::new(Caps::default())).unwrap();
    let mut src = ReadSource {
        reader: Cursor::new(bytes),
        len: None,
    };
    let mut check =
        |g: &pippin::gguf::Gguf| pippin::tokenizer::Tokenizer::from_gguf(&g.metadata).map(|_| ());
    let e = pollster::block_on(GpuModel::load_checked(
        gpu,
        &mut src,
        &mut |_, _| {},
        &mut check,
        None,
    ))
    .err()
    .expect("an error")
    .to_string();
    assert!(e.contains("tokenizer type \"bert\""), "{e}");
}

/// A family's own parts — Qwen2's biases, Granite's multipliers — missing, misshapen
/// or impossible: an error naming the tensor or key.
#[test]
fn family_parts_missing_or_wrong_are_named() {
    let qwen2 = || llama_as("qwen2");
    missing("qwen2-no-v-bias", qwen2(), "blk.1.attn_v.bias");
    let all: Vec<String> = (0..Spec::llama().layers)
        .flat_map(|l| ["q", "k", "v"].map(|p| format!("blk.{l}.attn_{p}.bias")))
        .collect();
    let s = Spec {
        drop: all,
        ..qwen2()
    };
    refused(
        "qwen2-no-biases",
        &s.bytes(),
        &["blk.0.attn_q.bias", "qwen2"],
    );
    let bytes = with_dim0(qwen2().bytes(), "blk.0.attn_k.bias", 7);
    refused("qwen2-short-bias", &bytes, &["blk.0.attn_k.bias", "shape"]);
    for (key, v) in [
        ("granite.residual_scale", 0.0),
        ("granite.logit_scale", f32::NAN),
        ("gemma2.attn_logit_softcapping", -50.0),
        ("phi3.rope.scaling.attn_factor", f32::INFINITY),
    ] {
        let base = match key.split('.').next().unwrap() {
            "gemma2" => Spec::gemma2(8),
            arch => Spec {
                arch,
                ..Spec::llama()
            },
        };
        let s = Spec {
            extra: vec![(key.into(), Value::F32(v))],
            ..base
        };
        refused(key, &s.bytes(), &[key, "positive"]);
    }
    // Phi-3's fused matrices: one missing, one of the wrong width.
    let phi3 = || llama_as("phi3");
    missing("phi3-no-qkv", phi3(), "blk.1.attn_qkv.weight");
    let bytes = with_dim0(phi3().bytes(), "blk.0.ffn_up.weight", 32);
    refused(
        "phi3-narrow-gate-up",
        &bytes,
        &["blk.0.ffn_up.weight", "shape"],
    );
    lfm2_parts_missing_or_wrong_are_named();
    let s = Spec {
        extra: vec![(
            "llama.attention.head_count_kv".into(),
            Value::Array(Array::U32(vec![1, 0])),
        )],
        ..Spec::llama()
    };
    let words = ["llama.attention.head_count_kv", "layer 1 no KV heads"];
    refused("llama-layer-without-kv-heads", &s.bytes(), &words);
}

/// LFM2: a convolution's taps or in_proj missing or misshapen, its per-layer KV head
/// counts or its taps count wrong.
fn lfm2_parts_missing_or_wrong_are_named() {
    let s = without(Spec::lfm2(), &["blk.2.shortconv.conv.weight"]);
    let taps = "blk.2.shortconv.conv.weight";
    refused("lfm2-no-taps", &s.bytes(), &[taps, "missing"]);
    let in_proj = "blk.0.shortconv.in_proj.weight";
    let bytes = with_dim0(Spec::lfm2().bytes(), in_proj, 32);
    refused("lfm2-narrow-in-proj", &bytes, &[in_proj, "shape"]);
    let kv = "lfm2.attention.head_count_kv";
    for (name, v, words) in [
        (
            "lfm2-kv-per-layer",
            Value::Array(Array::U32(vec![0, 1])),
            vec![kv, "3 integers"],
        ),
        (
            "lfm2-kv-heads",
            Value::Array(Array::I32(vec![0, -1, 0])),
            vec![kv, "-1"],
        ),
        (
            "lfm2-taps",
            Value::U32(9),
            vec!["short convolution of 9 taps"],
        ),
        (
            "lfm2-zero-taps",
            Value::U32(0),
            vec!["lfm2.shortconv.l_cache", "out of range"],
        ),
    ] {
        let key = match name {
            "lfm2-taps" | "lfm2-zero-taps" => "lfm2.shortconv.l_cache",
            _ => kv,
        };
        let s = Spec {
            extra: vec![(key.into(), v)],
            ..Spec::lfm2()
        };
        refused(name, &s.bytes(), &words);
    }
}
