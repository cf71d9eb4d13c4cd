//! `pippin convert` on small synthetic models: GGUF and Hugging Face inputs give the
//! same palettized tensors, bad inputs are clear errors that leave no output file.
//! (The default model's conversion, GPU run and perplexity are in tests/suite/palettized.rs.)

use crate::common;

use common::gpu::values;
use pippin::convert::{self, Bits, Options};
use pippin::gguf::{Gguf, TensorInfo, Value, Writer};
use pippin::model::{load_reference, Config, Proj};
use pippin::quant::{encode, GgmlType};
use pippin::tokenizer::{tokenizer_json_for, Tokenizer};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const HIDDEN: usize = 64;
const FFN: usize = 128;
const HEADS: usize = 2;
const KV_HEADS: usize = 1;
const HEAD_DIM: usize = 32;
const LAYERS: usize = 2;

/// The real model's tokenizer metadata (the vocabulary sizes the embedding).
fn tokenizer_meta() -> (Vec<(String, Value)>, usize) {
    let (g, _) = Gguf::open(&common::model_path()).unwrap();
    let meta: Vec<_> = g
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    (meta, Config::from_gguf(&g).unwrap().vocab_size)
}

/// Tensors of a tiny llama, GGUF names and `[rows][cols]` values (q/k rows in GGUF's
/// permuted order).
fn tiny_tensors(vocab: usize) -> Vec<(String, usize, usize, Vec<f32>)> {
    let mut t = vec![("token_embd.weight".to_string(), vocab, HIDDEN)];
    t.push(("output_norm.weight".into(), 1, HIDDEN));
    for l in 0..LAYERS {
        let p = |s: &str| format!("blk.{l}.{s}.weight");
        t.extend([
            (p("attn_norm"), 1, HIDDEN),
            (p("attn_q"), HEADS * HEAD_DIM, HIDDEN),
            (p("attn_k"), KV_HEADS * HEAD_DIM, HIDDEN),
            (p("attn_v"), KV_HEADS * HEAD_DIM, HIDDEN),
            (p("attn_output"), HIDDEN, HEADS * HEAD_DIM),
            (p("ffn_norm"), 1, HIDDEN),
            (p("ffn_gate"), FFN, HIDDEN),
            (p("ffn_up"), FFN, HIDDEN),
            (p("ffn_down"), HIDDEN, FFN),
        ]);
    }
    t.into_iter()
        .enumerate()
        .map(|(i, (name, rows, cols))| {
            let mut v = values(rows * cols, i as u64 + 1);
            if rows == 1 {
                v.iter_mut().for_each(|x| *x = 1.0 + *x * 0.1);
            }
            (name, rows, cols, v)
        })
        .collect()
}

fn write_gguf(
    path: &Path,
    tensors: &[(String, usize, usize, Vec<f32>)],
    meta: &[(String, Value)],
    ty: impl Fn(&str) -> GgmlType,
) {
    let mut w = Writer::new();
    w.meta("general.architecture", Value::Str("llama".into()));
    for (k, v) in [
        ("block_count", LAYERS),
        ("context_length", 2048),
        ("embedding_length", HIDDEN),
        ("feed_forward_length", FFN),
        ("attention.head_count", HEADS),
        ("attention.head_count_kv", KV_HEADS),
    ] {
        w.meta(&format!("llama.{k}"), Value::U32(v as u32));
    }
    w.meta("llama.rope.freq_base", Value::F32(10_000.0));
    w.meta("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5));
    for (k, v) in meta {
        w.meta(k, v.clone());
    }
    for (name, rows, cols, v) in tensors {
        let dims: Vec<u64> = if *rows == 1 {
            vec![*cols as u64]
        } else {
            vec![*cols as u64, *rows as u64]
        };
        let (t, bytes) = match ty(name) {
            GgmlType::F32 => (GgmlType::F32, encode::f32s(v)),
            other => (
                other,
                vec![0u8; other.bytes_for(v.len() as u64).unwrap() as usize],
            ),
        };
        w.tensor(name, &dims, t, bytes).unwrap();
    }
    let mut f = std::fs::File::create(path).unwrap();
    w.write(&mut f).unwrap();
}

/// Hugging Face's row order for q/k: GGUF row (h, 2i + j) is HF row (h, j·half + i).
fn unpermute(w: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let half = HEAD_DIM / 2;
    let mut out = vec![0f32; w.len()];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let (hf, gg) = (h * HEAD_DIM + j * half + i, h * HEAD_DIM + 2 * i + j);
                out[hf * cols..][..cols].copy_from_slice(&w[gg * cols..][..cols]);
            }
        }
    }
    out
}

fn hf_name(gguf: &str) -> String {
    let map = [
        ("token_embd", "model.embed_tokens"),
        ("output_norm", "model.norm"),
    ];
    if let Some((_, h)) = map.iter().find(|(g, _)| gguf.starts_with(&format!("{g}."))) {
        return format!("{h}.weight");
    }
    let rest = gguf.strip_prefix("blk.").unwrap();
    let (l, m) = rest.split_once('.').unwrap();
    let m = m.strip_suffix(".weight").unwrap();
    let hf = match m {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        _ => "mlp.down_proj",
    };
    format!("model.layers.{l}.{hf}.weight")
}

fn write_hf(dir: &Path, tensors: &[(String, usize, usize, Vec<f32>)], md: &pippin::gguf::Metadata) {
    std::fs::create_dir_all(dir).unwrap();
    let config = serde_json::json!({
        "model_type": "llama",
        "num_hidden_layers": LAYERS,
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": true,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json_for(md).unwrap()).unwrap();
    let tc = serde_json::json!({
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "chat_template": md.str("tokenizer.chat_template").unwrap(),
    });
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, rows, cols, v)| {
            let v = match name.rsplit('.').nth(1) {
                Some("attn_q") => unpermute(v, HEADS, *cols),
                Some("attn_k") => unpermute(v, KV_HEADS, *cols),
                _ => v.clone(),
            };
            let shape = if *rows == 1 {
                vec![*cols]
            } else {
                vec![*rows, *cols]
            };
            (hf_name(name), shape, encode::f32s(&v))
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = data
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                    .unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

fn scratch(name: &str) -> PathBuf {
    let d = common::root().join("target/test-convert").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn four_bits() -> Options {
    Options {
        bits: Bits::Four,
        ..Options::default()
    }
}

fn tensors_of(path: &Path) -> HashMap<String, (TensorInfo, Vec<u8>)> {
    let (g, mut f) = Gguf::open(path).unwrap();
    g.tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                (t.clone(), g.read_tensor(&mut f, t).unwrap()),
            )
        })
        .collect()
}

#[test]
fn gguf_and_hugging_face_inputs_give_the_same_palettized_model() {
    let dir = scratch("hf");
    let (meta, vocab) = tokenizer_meta();
    let tensors = tiny_tensors(vocab);
    write_gguf(&dir.join("tiny.gguf"), &tensors, &meta, |_| GgmlType::F32);
    let (g, _) = Gguf::open(&dir.join("tiny.gguf")).unwrap();
    write_hf(&dir.join("hf"), &tensors, &g.metadata);

    let log = &mut |_: &str| {};
    let a = convert::convert(
        &dir.join("tiny.gguf"),
        &dir.join("a.gguf"),
        &four_bits(),
        log,
    )
    .unwrap();
    convert::convert(&dir.join("hf"), &dir.join("b.gguf"), &four_bits(), log).unwrap();
    // 4 bits plus 16 f16 entries per 16 rows of 64: 4.22.
    assert!(
        (a.palettized_bpw - 4.0 - 0.25 * 64.0 / 72.0).abs() < 0.01,
        "{}",
        a.palettized_bpw
    );

    let (ta, tb) = (
        tensors_of(&dir.join("a.gguf")),
        tensors_of(&dir.join("b.gguf")),
    );
    assert_eq!(
        ta.len(),
        2 + LAYERS * (2 + 7 * 2),
        "norms, embedding, pidx + plut per matrix"
    );
    for (name, (info, bytes)) in &ta {
        let (other, theirs) = tb
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing from the HF conversion"));
        assert_eq!((info.ty, &info.dims), (other.ty, &other.dims), "{name}");
        assert!(bytes == theirs, "{name}: the two conversions differ");
    }
    assert_eq!(ta["blk.0.attn_q.weight.pidx"].0.ty, GgmlType::I32);
    assert_eq!(ta["token_embd.weight"].0.ty, GgmlType::Q8_0);

    // Same model: configuration, tokenizer and chat template.
    let (ga, _) = Gguf::open(&dir.join("a.gguf")).unwrap();
    let (gb, _) = Gguf::open(&dir.join("b.gguf")).unwrap();
    assert_eq!(
        Config::from_gguf(&ga).unwrap(),
        Config::from_gguf(&gb).unwrap()
    );
    let (ka, kb) = (
        Tokenizer::from_gguf(&ga.metadata).unwrap(),
        Tokenizer::from_gguf(&gb.metadata).unwrap(),
    );
    let text = "Palettized weights, <|im_start|>user\nhi 123 ünïcode!";
    assert_eq!(
        ka.encode(text, true).unwrap(),
        kb.encode(text, true).unwrap()
    );
    assert_eq!(ka.stop_tokens(), kb.stop_tokens());
    let msgs = [pippin::tokenizer::Message::new("user", "Hello")];
    assert_eq!(
        ka.apply_chat_template(&msgs, true).unwrap(),
        kb.apply_chat_template(&msgs, true).unwrap()
    );

    // The palettized file loads on the CPU, with every weight one of its table's entries.
    let (_, r) = load_reference(&dir.join("a.gguf")).unwrap();
    let wq = &r.weights.layers[0].proj[Proj::Q];
    let (info, lut) = &ta["blk.0.attn_q.weight.plut"];
    let table = table_of(lut);
    assert_eq!(info.dims, vec![16, 4], "64 rows, 16 per table");
    for (i, w) in wq.iter().enumerate() {
        let g = i / HIDDEN / 16;
        assert!(
            table[g * 16..][..16].contains(w),
            "weight {i} is not in its table"
        );
    }
}

/// f16 table entries as f32.
fn table_of(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect()
}

#[test]
fn two_bit_matrices_get_a_table_per_row_and_files_without_that_key_still_load() {
    let dir = scratch("two-bit");
    let (meta, vocab) = tokenizer_meta();
    write_gguf(&dir.join("tiny.gguf"), &tiny_tensors(vocab), &meta, |_| {
        GgmlType::F32
    });
    let two = |rows_per_lut_2bit| Options {
        bits: Bits::Two,
        rows_per_lut_2bit,
        ..Options::default()
    };
    let log = &mut |_: &str| {};
    convert::convert(&dir.join("tiny.gguf"), &dir.join("r1.gguf"), &two(1), log).unwrap();
    let t = tensors_of(&dir.join("r1.gguf"));
    let (info, lut) = &t["blk.0.attn_q.weight.plut"];
    assert_eq!(
        info.dims,
        vec![4, 64],
        "a table of 4 entries for each of 64 rows"
    );
    let table = table_of(lut);
    let (_, r) = load_reference(&dir.join("r1.gguf")).unwrap();
    for (i, w) in r.weights.layers[0].proj[Proj::Q].iter().enumerate() {
        let row = i / HIDDEN;
        assert!(
            table[row * 4..][..4].contains(w),
            "weight {i} not in row {row}'s table"
        );
    }

    // Files written before the 2-bit key existed share one rows-per-table value.
    convert::convert(&dir.join("tiny.gguf"), &dir.join("r16.gguf"), &two(16), log).unwrap();
    let (g, mut f) = Gguf::open(&dir.join("r16.gguf")).unwrap();
    let mut w = Writer::new();
    for (k, v) in g.metadata.iter() {
        if k != "pippin.palette.rows_per_lut_2bit" {
            w.meta(k, v.clone());
        }
    }
    for ti in &g.tensors {
        w.tensor(
            &ti.name,
            &ti.dims,
            ti.ty,
            g.read_tensor(&mut f, ti).unwrap(),
        )
        .unwrap();
    }
    let old = dir.join("old.gguf");
    w.write(&mut std::fs::File::create(&old).unwrap()).unwrap();
    let (_, a) = load_reference(&dir.join("r16.gguf")).unwrap();
    let (_, b) = load_reference(&old).unwrap();
    assert_eq!(
        a.weights.layers[1].proj[Proj::Down],
        b.weights.layers[1].proj[Proj::Down]
    );
    assert_ne!(
        a.weights.layers[1].proj[Proj::Down],
        r.weights.layers[1].proj[Proj::Down]
    );
}

#[test]
fn unsupported_tensor_types_and_corrupt_inputs_are_clear_errors_without_output() {
    let dir = scratch("bad");
    let (meta, vocab) = tokenizer_meta();
    let tensors = tiny_tensors(vocab);
    let out = dir.join("out.gguf");
    let nothing_written = || {
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert!(
            !out.exists()
                && left
                    .iter()
                    .all(|n| !n.to_string_lossy().contains("out.gguf")),
            "{left:?}"
        );
    };
    let log = &mut |_: &str| {};

    // Q8_1 is a GGML type (ggml's activations) no model file stores weights in.
    write_gguf(&dir.join("q8_1.gguf"), &tensors, &meta, |n| {
        if n == "blk.1.ffn_up.weight" {
            GgmlType::Q8_1
        } else {
            GgmlType::F32
        }
    });
    let e = convert::convert(&dir.join("q8_1.gguf"), &out, &four_bits(), log)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("blk.1.ffn_up.weight") && e.contains("Q8_1"),
        "{e}"
    );
    nothing_written();

    write_gguf(&dir.join("ok.gguf"), &tensors, &meta, |_| GgmlType::F32);
    let bytes = std::fs::read(dir.join("ok.gguf")).unwrap();
    std::fs::write(dir.join("cut.gguf"), &bytes[..bytes.len() - 1000]).unwrap();
    let e = convert::convert(&dir.join("cut.gguf"), &out, &four_bits(), log)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("truncated") || e.contains("ends") || e.contains("expected"),
        "{e}"
    );
    nothing_written();

    // A family whose files fuse matrices (phi3: Q|K|V, gate|up) is refused by name.
    let phi3 = pippin::testing::synthetic::Spec {
        arch: "phi3",
        ..pippin::testing::synthetic::Spec::llama()
    };
    phi3.write(&dir.join("phi3.gguf")).unwrap();
    let e = convert::convert(&dir.join("phi3.gguf"), &out, &four_bits(), log).unwrap_err();
    assert_eq!(e.code(), "Unsupported", "{e}");
    assert!(e.to_string().contains("phi3"), "{e}");
    nothing_written();

    let mut flipped = bytes.clone();
    flipped[5] ^= 0x40; // the version
    std::fs::write(dir.join("flip.gguf"), &flipped).unwrap();
    assert!(convert::convert(&dir.join("flip.gguf"), &out, &four_bits(), log).is_err());
    nothing_written();

    // Mixed precision needs calibration text; a palettized file is not converted twice.
    let e = convert::convert(&dir.join("ok.gguf"), &out, &Options::default(), log).unwrap_err();
    assert!(e.to_string().contains("calibration"), "{e}");
    nothing_written();
    convert::convert(&dir.join("ok.gguf"), &dir.join("p.gguf"), &four_bits(), log).unwrap();
    let e = convert::convert(&dir.join("p.gguf"), &out, &four_bits(), log).unwrap_err();
    assert!(e.to_string().contains("already palettized"), "{e}");
    nothing_written();
}
