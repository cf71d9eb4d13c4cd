//! Tiny synthetic models written as GGUF files, for tests that need an architecture's
//! graph at a size where every path (windows shorter than a prompt, rings that wrap)
//! runs in milliseconds, and for crafted (broken) files — natively and in the browser
//! tests (wasm32, where sizes must not wrap).

use crate::gguf::{Value, Writer};
use crate::model::arch::GlobalTensor;
use crate::model::{Arch, Config, PerProj, Proj};
use crate::quant::{encode, GgmlType};
use crate::rng::Rng;
use std::path::{Path, PathBuf};

pub const HIDDEN: usize = 64;
pub const HEADS: usize = 2;
pub const HEAD_DIM: usize = 32;
pub const FFN: usize = 64;
pub const VOCAB: usize = 96;

/// What a synthetic model looks like; `Spec::llama()` and `Spec::gemma3(window)` are
/// valid models, tests break them field by field.
#[derive(Clone, Debug)]
pub struct Spec {
    pub arch: &'static str,
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    /// Sliding window (Gemma 3), on layers 0 and 1 of every 3.
    pub window: usize,
    /// Metadata that replaces what the spec would write (or adds to it).
    pub extra: Vec<(String, Value)>,
    /// Metadata written a second time (a file with duplicate keys).
    pub duplicate: Vec<(String, Value)>,
    /// Tensors left out, by name.
    pub drop: Vec<String>,
    /// The GGML type of a tensor (F32 when `None`); its bytes are random valid blocks.
    pub ty: fn(&str) -> GgmlType,
}

fn all_f32(_: &str) -> GgmlType {
    GgmlType::F32
}

const AFM_LAYERS: usize = 30;

/// Taps of a synthetic LFM2's convolutions (the real models' `l_cache`).
const LFM2_TAPS: usize = 3;

/// llama.cpp's `Q4_K_M` mix: Q4_K everywhere but the (tied) embedding and, on the
/// first and last eighth of the layers and every third between, `attn_v` and
/// `ffn_down`, which take Q6_K (its `use_more_bits`).
fn afm_q4_k_m(name: &str) -> GgmlType {
    let layer = name.strip_prefix("blk.").and_then(|r| r.split('.').next());
    let more_bits = |i: usize| {
        let n = AFM_LAYERS;
        i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
    };
    match layer.and_then(|l| l.parse::<usize>().ok()) {
        _ if name == "token_embd.weight" => GgmlType::Q6K,
        Some(i) if more_bits(i) && (name.contains("attn_v") || name.contains("ffn_down")) => {
            GgmlType::Q6K
        }
        _ => GgmlType::Q4K,
    }
}

impl Spec {
    pub fn llama() -> Spec {
        Spec {
            arch: "llama",
            layers: 2,
            hidden: HIDDEN,
            heads: HEADS,
            kv_heads: 1,
            head_dim: HEAD_DIM,
            ffn: FFN,
            vocab: VOCAB,
            window: 0,
            extra: Vec::new(),
            duplicate: Vec::new(),
            drop: Vec::new(),
            ty: all_f32,
        }
    }

    pub fn gemma3(window: usize) -> Spec {
        Spec {
            arch: "gemma3",
            layers: 3,
            window,
            ..Spec::llama()
        }
    }

    /// Gemma 2's layout (Gemma 3's without QK-norm), with its soft-caps set low
    /// enough to bend most scores and logits of these random weights.
    pub fn gemma2(window: usize) -> Spec {
        Spec {
            arch: "gemma2",
            ..Spec::gemma3(window)
        }
    }

    /// LFM2's layout: short-convolution layers 0 and 2 (3 taps), attention with
    /// QK-norm on layer 1.
    pub fn lfm2() -> Spec {
        Spec {
            arch: "lfm2",
            layers: 3,
            ..Spec::llama()
        }
    }

    /// The tiny file of `arch`'s family: its own layout where it has one (sliding
    /// windows of 8 for the Gemmas), Llama's tensors under its name otherwise.
    pub fn family(arch: Arch) -> Spec {
        match arch {
            Arch::Gemma3 => Spec::gemma3(8),
            Arch::Gemma2 => Spec::gemma2(8),
            Arch::Lfm2 => Spec::lfm2(),
            _ => Spec {
                arch: arch.name(),
                ..Spec::llama()
            },
        }
    }

    /// A ~500 MB model (a 100,000-token f32 embedding of 410 MB): memory tests load
    /// it to show the heap does not follow the file (natively and in the browser).
    pub fn large() -> Spec {
        Spec {
            hidden: 1024,
            heads: 8,
            kv_heads: 2,
            head_dim: 128,
            ffn: 2816,
            vocab: 100_000,
            ..Spec::llama()
        }
        .with_tokenizer()
    }

    /// AFM-on-device's shape (~3.2B parameters: hidden 3072, 24 query heads, 8 KV
    /// heads of 128, FFN 8192, 30 layers, a tied embedding) as a `Q4_K_M` mix of
    /// random valid blocks (`afm_q4_k_m`), with `tokenizer`'s vocabulary and keys (a
    /// real model's `tokenizer.*` metadata): ~1.9 GB, for benchmarks at that size.
    pub fn afm(tokenizer: &crate::gguf::Metadata) -> Spec {
        let keys = tokenizer
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."));
        let mut extra: Vec<(String, Value)> = keys.map(|(k, v)| (k.into(), v.clone())).collect();
        extra.push(("llama.context_length".into(), Value::U32(8192)));
        Spec {
            layers: AFM_LAYERS,
            hidden: 3072,
            heads: 24,
            kv_heads: 8,
            head_dim: 128,
            ffn: 8192,
            vocab: tokenizer
                .strings("tokenizer.ggml.tokens")
                .map_or(0, |t| t.len()),
            extra,
            ty: afm_q4_k_m,
            ..Spec::llama()
        }
    }

    /// With a byte-level BPE tokenizer of `vocab` tokens ("t0", "t1", ...; no
    /// merges), enough for the engine to load the model and run token ids.
    pub fn with_tokenizer(mut self) -> Spec {
        use crate::gguf::Array;
        let tokens = (0..self.vocab).map(|i| format!("t{i}")).collect();
        self.extra.extend([
            ("tokenizer.ggml.model".into(), Value::Str("gpt2".into())),
            (
                "tokenizer.ggml.tokens".into(),
                Value::Array(Array::Str(tokens)),
            ),
            (
                "tokenizer.ggml.merges".into(),
                Value::Array(Array::Str(Vec::new())),
            ),
            ("tokenizer.ggml.eos_token_id".into(), Value::U32(0)),
        ]);
        self
    }

    /// The shapes the spec writes, as its family (llama's if unknown) reads them.
    fn config(&self) -> Config {
        let arch = Arch::from_name(self.arch).unwrap_or(Arch::Llama);
        let gemma = matches!(arch, Arch::Gemma3 | Arch::Gemma2);
        Config {
            arch,
            n_layers: self.layers,
            n_heads: self.heads,
            n_kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            hidden: self.hidden,
            ffn_dim: self.ffn,
            vocab_size: self.vocab,
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Gemma3 | Arch::Lfm2),
            post_norms: gemma,
            biases: PerProj(
                Proj::ALL.map(|p| arch == Arch::Qwen2 && p.is_attention() && p != Proj::O),
            ),
            conv_layers: (0..self.layers)
                .filter(|&l| self.is_conv(l))
                .fold(0, |m, l| m | 1 << l),
            conv_taps: LFM2_TAPS,
            ..Config::default()
        }
    }

    /// Whether layer `l` is a short convolution (LFM2's: all but every third).
    fn is_conv(&self, l: usize) -> bool {
        self.arch == "lfm2" && l % 3 != 1
    }

    /// The file's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let a = self.arch;
        let overridden = |k: &str| self.extra.iter().any(|(e, _)| e == k);
        let put = |w: &mut Writer, k: &str, v: Value| {
            if !overridden(k) {
                w.meta(k, v);
            }
        };
        put(&mut w, "general.architecture", Value::Str(a.into()));
        let mut ints = vec![
            ("block_count", self.layers),
            ("context_length", 256),
            ("embedding_length", self.hidden),
            ("feed_forward_length", self.ffn),
            ("attention.head_count", self.heads),
            ("attention.head_count_kv", self.kv_heads),
            ("attention.key_length", self.head_dim),
            ("attention.value_length", self.head_dim),
        ];
        if a == "gemma3" || a == "gemma2" {
            ints.push(("attention.sliding_window", self.window));
            ints.push(("attention.sliding_window_pattern", 3));
        }
        for (k, v) in ints {
            if a == "lfm2" && k == "attention.head_count_kv" {
                continue;
            }
            put(&mut w, &format!("{a}.{k}"), Value::U32(v as u32));
        }
        if a == "lfm2" {
            let kv = (0..self.layers)
                .map(|l| {
                    if self.is_conv(l) {
                        0
                    } else {
                        self.kv_heads as u32
                    }
                })
                .collect();
            let key = format!("{a}.attention.head_count_kv");
            put(&mut w, &key, Value::Array(crate::gguf::Array::U32(kv)));
            let taps = Value::U32(LFM2_TAPS as u32);
            put(&mut w, &format!("{a}.shortconv.l_cache"), taps);
        }
        if a == "granite" {
            // Multipliers far from 1, so that a missed one shows.
            for (k, v) in [
                ("embedding_scale", 2.0),
                ("residual_scale", 0.5),
                ("attention.scale", 0.2),
                ("logit_scale", 3.0),
            ] {
                put(&mut w, &format!("{a}.{k}"), Value::F32(v));
            }
        }
        if a == "phi3" {
            // RoPE on three quarters of each head (Phi-4-mini's share), LongRoPE's
            // attention factor, and an original context the short factors cover.
            let rope_dim = (self.head_dim * 3 / 4) & !1;
            put(
                &mut w,
                &format!("{a}.rope.dimension_count"),
                Value::U32(rope_dim as u32),
            );
            put(
                &mut w,
                &format!("{a}.rope.scaling.attn_factor"),
                Value::F32(1.2),
            );
            let original = format!("{a}.rope.scaling.original_context_length");
            put(&mut w, &original, Value::U32(128));
        }
        if a == "gemma2" {
            for (k, v) in [
                ("attn_logit_softcapping", 0.5),
                ("final_logit_softcapping", 2.0),
            ] {
                put(&mut w, &format!("{a}.{k}"), Value::F32(v));
            }
        }
        put(
            &mut w,
            &format!("{a}.rope.freq_base"),
            Value::F32(1_000_000.0),
        );
        put(
            &mut w,
            &format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-6),
        );
        for (k, v) in self.extra.iter().chain(&self.duplicate) {
            w.meta(k, v.clone());
        }
        let mut seed = 1;
        let mut tensor = |w: &mut Writer, name: String, dims: &[usize], norm: bool| {
            seed += 1;
            if self.drop.contains(&name) {
                return;
            }
            let n: usize = dims.iter().product();
            let ty = if norm {
                GgmlType::F32
            } else {
                (self.ty)(&name)
            };
            let bytes = if ty == GgmlType::F32 {
                let mut rng = Rng::new(seed);
                let v: Vec<f32> = (0..n)
                    .map(|_| rng.next_f32() * 2.0 - 1.0)
                    .map(|x| {
                        if norm {
                            1.0 + 0.2 * x
                        } else {
                            x * 2.0 / (dims[0] as f32).sqrt()
                        }
                    })
                    .collect();
                encode::f32s(&v)
            } else {
                let per = ty.block().0 as usize;
                encode::random_blocks(ty, n.div_ceil(per) * per, seed)
            };
            let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
            w.tensor(&name, &dims, ty, bytes)
                .expect("a synthetic tensor's bytes match its type");
        };
        let h = self.hidden;
        let c = self.config();
        let family = c.arch.family();
        tensor(&mut w, "token_embd.weight".into(), &[h, self.vocab], false);
        let output_norm = family.global_spec(GlobalTensor::OutputNorm, &c).name;
        tensor(&mut w, output_norm, &[h], true);
        if a == "phi3" {
            // Divisors around 1 (written as norms are: 1 ± 0.2).
            let half = (self.head_dim * 3 / 4) / 2;
            tensor(&mut w, "rope_factors_short.weight".into(), &[half], true);
            tensor(&mut w, "rope_factors_long.weight".into(), &[half], true);
        }
        // The layers as the family has them (an unknown family: llama's).
        for l in 0..self.layers {
            for t in family.layer_tensors(&c, l) {
                let s = family.layer_spec(t, &c, l);
                let (name, dims) = match (&s.rows_of, s.matrix) {
                    // A fused tensor, written once, with its first part.
                    (Some(r), _) if r.row0 > 0 => continue,
                    (Some(r), _) => (r.tensor.clone(), vec![s.cols, r.total]),
                    (None, true) => (s.name, vec![s.cols, s.rows]),
                    (None, false) if s.rows > 1 => (s.name, vec![s.cols, s.rows]),
                    (None, false) => (s.name, vec![s.cols]),
                };
                tensor(&mut w, name, &dims, !s.matrix);
            }
        }
        w.to_bytes().expect("a synthetic model serializes")
    }

    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.bytes())
    }
}

/// The valid tiny Gemma 3 (sliding window `window` on layers 0 and 1, 2 global).
pub fn tiny_gemma3(dir: &Path, window: usize) -> std::io::Result<PathBuf> {
    let path = dir.join(format!("tiny-gemma3-w{window}.gguf"));
    Spec::gemma3(window).write(&path)?;
    Ok(path)
}

/// Offset of the type id of tensor `name` in a file's header (after its name and
/// dims), to craft files the writer refuses to write.
pub fn type_field(bytes: &[u8], name: &str) -> usize {
    let key = name.as_bytes();
    let at = bytes
        .windows(key.len())
        .rposition(|w| w == key)
        .expect("tensor name in the header");
    let n_dims = u32::from_le_bytes([
        bytes[at + key.len()],
        bytes[at + key.len() + 1],
        bytes[at + key.len() + 2],
        bytes[at + key.len() + 3],
    ]) as usize;
    at + key.len() + 4 + 8 * n_dims
}

/// `bytes` with tensor `name`'s type id replaced.
pub fn with_type_id(mut bytes: Vec<u8>, name: &str, id: u32) -> Vec<u8> {
    let at = type_field(&bytes, name);
    bytes[at..at + 4].copy_from_slice(&id.to_le_bytes());
    bytes
}

/// `bytes` with tensor `name`'s first dimension replaced.
pub fn with_dim0(mut bytes: Vec<u8>, name: &str, dim: u64) -> Vec<u8> {
    let key = name.as_bytes();
    let at = bytes
        .windows(key.len())
        .rposition(|w| w == key)
        .expect("tensor name in the header")
        + key.len()
        + 4;
    bytes[at..at + 8].copy_from_slice(&dim.to_le_bytes());
    bytes
}

/// The model at `src` cut to its first `layers` layers (real weights, tokenizer and
/// template; `<arch>.block_count` rewritten), written to `dst`: the engine's behaviour
/// (pipelining, sessions, masks, adapters) on a real file at a fraction of the work a
/// token, for the GPU tests on a software adapter. Written beside `dst` and renamed,
/// so test processes making it at once each see a whole file. Per-layer metadata
/// arrays (LFM2's `attention.head_count_kv`) are copied whole: for files without them.
pub fn truncated(src: &Path, dst: &Path, layers: usize) -> crate::error::Result<()> {
    let (g, mut file) = crate::gguf::Gguf::open(src)?;
    let arch = g.metadata.str("general.architecture").unwrap_or("llama");
    let count = format!("{arch}.block_count");
    let mut w = Writer::new();
    for (k, v) in g.metadata.iter() {
        let v = if k == count {
            Value::U32(layers as u32)
        } else {
            v.clone()
        };
        w.meta(k, v);
    }
    let kept = |name: &str| match name.strip_prefix("blk.") {
        Some(rest) => rest
            .split('.')
            .next()
            .and_then(|l| l.parse::<usize>().ok())
            .is_some_and(|l| l < layers),
        None => true,
    };
    for t in g.tensors.iter().filter(|t| kept(&t.name)) {
        let bytes = g.read_tensor(&mut file, t)?;
        w.tensor(&t.name, &t.dims, t.ty, bytes)?;
    }
    let tmp = dst.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, w.to_bytes()?)?;
    std::fs::rename(&tmp, dst)?;
    Ok(())
}
