//! A Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json,
//! tokenizer_config.json) seen as a GGUF: llama.cpp's metadata keys and tensor names,
//! Q/K rows permuted for adjacent-pair RoPE as llama.cpp's converter does, and the
//! tokenizer carried whole as `tokenizer.huggingface.json`.

use crate::adapters::{reorder_rows, RowOrder};
use crate::error::{Error, Result};
use crate::gguf::{Gguf, Metadata, TensorInfo, Value};
use crate::quant::GgmlType;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::Path;

/// Where a GGUF-named tensor lives: file, name there, and the Q/K permutation.
struct Place {
    file: usize,
    name: String,
    /// `Some(heads)`: rows are permuted (llama q_proj/k_proj).
    permute: Option<usize>,
}

pub struct HfCheckpoint {
    files: Vec<Vec<u8>>,
    places: HashMap<String, Place>,
    /// Tensors made here rather than read (Llama 3's `rope_freqs.weight`).
    made: HashMap<String, Vec<u8>>,
    head_dim: usize,
}

fn read_json(dir: &Path, name: &str) -> Result<Option<Json>> {
    let path = dir.join(name);
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::invalid(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::invalid(format!("{} is not valid JSON: {e}", path.display())))
}

/// GGUF name of a Hugging Face tensor, for the tensors the model uses.
fn gguf_name(hf: &str) -> Option<String> {
    use crate::model::arch::{GlobalTensor as G, LayerTensor as L};
    let globals = [
        ("model.embed_tokens.weight", G::Embedding),
        ("model.norm.weight", G::OutputNorm),
        ("lm_head.weight", G::Output),
    ];
    if let Some((_, g)) = globals.iter().find(|(h, _)| *h == hf) {
        return Some(g.name().to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, module) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let t = match module {
        "input_layernorm.weight" => L::AttnNorm,
        "self_attn.q_proj.weight" => L::Q,
        "self_attn.k_proj.weight" => L::K,
        "self_attn.v_proj.weight" => L::V,
        "self_attn.o_proj.weight" => L::O,
        "self_attn.q_norm.weight" => L::QNorm,
        "self_attn.k_norm.weight" => L::KNorm,
        "post_attention_layernorm.weight" => L::FfnNorm,
        "mlp.gate_proj.weight" => L::Gate,
        "mlp.up_proj.weight" => L::Up,
        "mlp.down_proj.weight" => L::Down,
        _ => return None,
    };
    Some(t.name(layer))
}

fn ggml_type(d: Dtype, name: &str) -> Result<GgmlType> {
    match d {
        Dtype::F32 => Ok(GgmlType::F32),
        Dtype::F16 => Ok(GgmlType::F16),
        Dtype::BF16 => Ok(GgmlType::BF16),
        other => Err(Error::unsupported(format!(
            "tensor {name:?} is {other:?} (supported: F32, F16, BF16)"
        ))),
    }
}

impl HfCheckpoint {
    /// Reads the directory: its header becomes a GGUF view (offsets are meaningless;
    /// tensors are read by name with `read`).
    pub fn open(dir: &Path) -> Result<(Gguf, HfCheckpoint)> {
        let config = read_json(dir, "config.json")?
            .ok_or_else(|| Error::invalid(format!("{} has no config.json", dir.display())))?;
        let mut md = Metadata::default();
        let arch = model_metadata(&config, &mut md)?;
        tokenizer_metadata(dir, &mut md)?;
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string());
        md.insert("general.name".into(), Value::Str(name.unwrap_or_default()));
        let heads = |k: &str| config.get(k).and_then(Json::as_u64).unwrap_or(0) as usize;
        let (n_heads, hidden) = (heads("num_attention_heads"), heads("hidden_size"));
        let head_dim = match config.get("head_dim").and_then(Json::as_u64) {
            Some(d) => d as usize,
            None => hidden / n_heads.max(1),
        };
        let n_kv = match heads("num_key_value_heads") {
            0 => n_heads,
            n => n,
        };

        let mut paths: Vec<_> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        paths.sort();
        if paths.is_empty() {
            return Err(Error::invalid(format!(
                "{} has no .safetensors files",
                dir.display()
            )));
        }
        let (mut files, mut places, mut tensors) = (Vec::new(), HashMap::new(), Vec::new());
        for (fi, path) in paths.iter().enumerate() {
            let bytes = std::fs::read(path)?;
            let st = SafeTensors::deserialize(&bytes)
                .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
            let mut names = st.names();
            names.sort();
            for hf in names {
                let Some(g) = gguf_name(hf) else { continue };
                let view = st
                    .tensor(hf)
                    .map_err(|e| Error::invalid(format!("{hf}: {e}")))?;
                let ty = ggml_type(view.dtype(), hf)?;
                let dims: Vec<u64> = view.shape().iter().rev().map(|&d| d as u64).collect();
                let permute = match (arch, g.rsplit('.').nth(1)) {
                    ("llama", Some("attn_q")) => Some(n_heads),
                    ("llama", Some("attn_k")) => Some(n_kv),
                    _ => None,
                };
                tensors.push(TensorInfo::new(g.clone(), dims, ty, 0)?);
                places.insert(
                    g,
                    Place {
                        file: fi,
                        name: hf.to_string(),
                        permute,
                    },
                );
            }
            files.push(bytes);
        }
        let mut made = HashMap::new();
        if let Some(f) = llama3_rope_factors(&config, head_dim) {
            let name = "rope_freqs.weight".to_string();
            tensors.push(TensorInfo::new(
                name.clone(),
                vec![f.len() as u64],
                GgmlType::F32,
                0,
            )?);
            made.insert(name, f.iter().flat_map(|v| v.to_le_bytes()).collect());
        }
        let gguf = Gguf {
            version: 3,
            metadata: md,
            tensors,
            alignment: 32,
            header_len: 0,
            data_offset: 0,
            shard_data: vec![0],
            file_len: None,
        };
        Ok((
            gguf,
            HfCheckpoint {
                files,
                places,
                made,
                head_dim,
            },
        ))
    }

    /// A tensor's bytes by GGUF name, Q/K rows permuted for llama.
    pub fn read(&self, t: &TensorInfo) -> Result<Vec<u8>> {
        if let Some(b) = self.made.get(&t.name) {
            return Ok(b.clone());
        }
        let p = self
            .places
            .get(&t.name)
            .ok_or_else(|| Error::invalid(format!("tensor {} is not in the checkpoint", t.name)))?;
        let st = SafeTensors::deserialize(&self.files[p.file])
            .map_err(|e| Error::invalid(e.to_string()))?;
        let data = st
            .tensor(&p.name)
            .map_err(|e| Error::invalid(e.to_string()))?
            .data()
            .to_vec();
        Ok(match p.permute {
            Some(heads) => {
                let row_bytes = data.len() / (heads * self.head_dim).max(1);
                reorder_rows(&data, row_bytes, heads, self.head_dim, RowOrder::Gguf)
            }
            None => data,
        })
    }
}

/// llama.cpp's model keys from config.json; returns the architecture name.
fn model_metadata(c: &Json, md: &mut Metadata) -> Result<&'static str> {
    let arch = match c.get("model_type").and_then(Json::as_str) {
        Some("llama") => "llama",
        Some("qwen3") => "qwen3",
        other => {
            return Err(Error::unsupported(format!(
                "Hugging Face model_type {other:?} (supported: llama, qwen3)"
            )))
        }
    };
    md.insert("general.architecture".into(), Value::Str(arch.into()));
    let ints = [
        ("num_hidden_layers", "block_count"),
        ("max_position_embeddings", "context_length"),
        ("hidden_size", "embedding_length"),
        ("intermediate_size", "feed_forward_length"),
        ("num_attention_heads", "attention.head_count"),
        ("num_key_value_heads", "attention.head_count_kv"),
        ("head_dim", "attention.key_length"),
    ];
    for (hf, key) in ints {
        if let Some(v) = c.get(hf).and_then(Json::as_u64) {
            md.insert(format!("{arch}.{key}"), Value::U32(v as u32));
        } else if !matches!(hf, "num_key_value_heads" | "head_dim") {
            return Err(Error::invalid(format!("config.json has no integer {hf:?}")));
        }
    }
    let floats = [
        ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
        ("rope_theta", "rope.freq_base"),
    ];
    for (hf, key) in floats {
        if let Some(v) = c.get(hf).and_then(Json::as_f64) {
            md.insert(format!("{arch}.{key}"), Value::F32(v as f32));
        }
    }
    if let Some(s) = c.get("rope_scaling").filter(|s| !s.is_null()) {
        let kind = s.get("rope_type").or(s.get("type")).and_then(Json::as_str);
        if kind != Some("llama3") {
            return Err(Error::unsupported(format!(
                "rope_scaling {kind:?} (supported: llama3)"
            )));
        }
    }
    Ok(arch)
}

/// Llama 3's RoPE frequency divisors (llama.cpp's `rope_freqs.weight`), when
/// config.json asks for llama3 scaling.
pub fn llama3_rope_factors(c: &Json, head_dim: usize) -> Option<Vec<f32>> {
    let s = c.get("rope_scaling").filter(|s| !s.is_null())?;
    let f = |k: &str, d: f64| s.get(k).and_then(Json::as_f64).unwrap_or(d);
    let (factor, lo, hi) = (
        f("factor", 8.0),
        f("low_freq_factor", 1.0),
        f("high_freq_factor", 4.0),
    );
    let old_ctx = f("original_max_position_embeddings", 8192.0);
    let base = c
        .get("rope_theta")
        .and_then(Json::as_f64)
        .unwrap_or(10_000.0);
    let (lo_wavelen, hi_wavelen) = (old_ctx / lo, old_ctx / hi);
    Some(
        (0..head_dim / 2)
            .map(|i| {
                let freq = 1.0 / base.powf(2.0 * i as f64 / head_dim as f64);
                let wavelen = 2.0 * std::f64::consts::PI / freq;
                if wavelen < hi_wavelen {
                    1.0
                } else if wavelen > lo_wavelen {
                    factor as f32
                } else {
                    let smooth = (old_ctx / wavelen - lo) / (hi - lo);
                    (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
                }
            })
            .collect(),
    )
}

/// The tokenizer, whole, and its special tokens and chat template.
fn tokenizer_metadata(dir: &Path, md: &mut Metadata) -> Result<()> {
    let path = dir.join("tokenizer.json");
    let json = std::fs::read_to_string(&path)
        .map_err(|e| Error::invalid(format!("cannot read {}: {e}", path.display())))?;
    let tk = tokenizers::Tokenizer::from_bytes(json.as_bytes())
        .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
    let cfg = read_json(dir, "tokenizer_config.json")?.unwrap_or(Json::Null);
    let token = |k: &str| match cfg.get(k) {
        Some(Json::String(s)) => Some(s.clone()),
        Some(o) => o.get("content").and_then(Json::as_str).map(str::to_string),
        None => None,
    };
    for (k, key) in [("bos_token", "bos_token_id"), ("eos_token", "eos_token_id")] {
        if let Some(id) = token(k).and_then(|t| tk.token_to_id(&t)) {
            md.insert(format!("tokenizer.ggml.{key}"), Value::U32(id));
        }
    }
    let add_bos = cfg
        .get("add_bos_token")
        .and_then(Json::as_bool)
        .unwrap_or(false);
    md.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(add_bos));
    let template = match cfg.get("chat_template") {
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
            .and_then(|t| t.get("template").and_then(Json::as_str))
            .map(str::to_string),
        _ => None,
    };
    if let Some(t) = template {
        md.insert("tokenizer.chat_template".into(), Value::Str(t));
    }
    md.insert("tokenizer.huggingface.json".into(), Value::Str(json));
    Ok(())
}
