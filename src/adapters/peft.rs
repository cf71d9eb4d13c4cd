//! Reading PEFT's files: the JSON config and the safetensors weights, bounded and
//! checked against the model with errors that name the first mismatch.

use super::{needs_permutation, reorder_rows, Adapter, Lora, RowOrder};
use crate::error::{Error, Result};
use crate::model::Config;
use crate::model::{PerProj, Proj};
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

const MAX_RANK: usize = 256;

#[derive(Clone, Debug, Deserialize)]
pub struct LoraConfig {
    pub r: usize,
    pub lora_alpha: f32,
    #[serde(default)]
    pub target_modules: Targets,
    #[serde(default)]
    pub use_rslora: bool,
    #[serde(default)]
    pub fan_in_fan_out: bool,
    #[serde(default)]
    pub base_model_name_or_path: Option<String>,
    #[serde(default)]
    pub peft_type: Option<String>,
}

/// PEFT writes a list of names, or one string (a regex, or "all-linear").
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(untagged)]
pub enum Targets {
    List(Vec<String>),
    One(String),
    #[default]
    None,
}

fn err(msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("LoRA adapter: {msg}"))
}

/// Reads an adapter for the model `c` from PEFT's two files.
pub fn parse(config_json: &[u8], weights: &[u8], c: &Config) -> Result<Adapter> {
    let cfg: LoraConfig = serde_json::from_slice(config_json)
        .map_err(|e| err(format!("adapter_config.json is not valid: {e}")))?;
    if let Some(t) = &cfg.peft_type {
        if t != "LORA" {
            return Err(err(format!("peft_type is {t:?}, only LORA is supported")));
        }
    }
    if cfg.r == 0 || cfg.r > MAX_RANK {
        return Err(err(format!(
            "rank r = {} (1 to {MAX_RANK} supported)",
            cfg.r
        )));
    }
    if !cfg.lora_alpha.is_finite() {
        return Err(err("lora_alpha is not a number"));
    }
    let scale = if cfg.use_rslora {
        cfg.lora_alpha / (cfg.r as f32).sqrt()
    } else {
        cfg.lora_alpha / cfg.r as f32
    };
    let st = SafeTensors::deserialize(weights)
        .map_err(|e| err(format!("adapter_model.safetensors: {e}")))?;
    let mut layers: Vec<PerProj<Option<Lora>>> =
        (0..c.n_layers).map(|_| Default::default()).collect();
    let mut found = 0;
    // In layer and module order, so the first mismatch reported is the first one.
    let mut names = st.names();
    names.sort_by_key(|n| (parse_name(n).map(|(l, p, _)| (l, p.index())), n.to_string()));
    for name in names {
        let Some((layer, module, is_a)) = parse_name(name) else {
            return Err(err(format!(
                "tensor {name:?} is not a LoRA weight of a known layer"
            )));
        };
        if !is_a {
            continue; // B is read with its A below
        }
        if layer >= c.n_layers {
            return Err(err(format!(
                "tensor {name:?} is for layer {layer}, the model has {}",
                c.n_layers
            )));
        }
        let b_name = name.replace("lora_A", "lora_B");
        let a = read(&st, name, cfg.fan_in_fan_out)?;
        let b = read(&st, &b_name, cfg.fan_in_fan_out)?;
        layers[layer][module] = Some(lora(c, &cfg, module, layer, a, b, scale)?);
        found += 1;
    }
    if let Some(name) = st
        .names()
        .into_iter()
        .find(|n| n.contains("lora_B") && !st.names().contains(&&*n.replace("lora_B", "lora_A")))
    {
        return Err(err(format!("tensor {name:?} has no matching lora_A")));
    }
    if found == 0 {
        return Err(err("adapter_model.safetensors holds no LoRA weights"));
    }
    Ok(Adapter {
        rank: cfg.r,
        scale,
        layers,
    })
}

/// `base_model.model.model.layers.{i}.{self_attn|mlp}.{module}.lora_{A|B}.weight`
fn parse_name(name: &str) -> Option<(usize, Proj, bool)> {
    let rest = &name[name.find("layers.")? + "layers.".len()..];
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let parts: Vec<&str> = rest.split('.').collect();
    let is_a = match *parts.iter().rev().find(|p| p.starts_with("lora_"))? {
        "lora_A" => true,
        "lora_B" => false,
        _ => return None,
    };
    let module = Proj::ALL
        .into_iter()
        .find(|p| parts.contains(&p.hf_name()))?;
    Some((layer, module, is_a))
}

struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
    half: bool,
}

fn read(st: &SafeTensors, name: &str, transposed: bool) -> Result<Matrix> {
    let t = st
        .tensor(name)
        .map_err(|_| err(format!("tensor {name:?} is missing")))?;
    let shape = t.shape();
    if shape.len() != 2 {
        return Err(err(format!(
            "tensor {name:?} has shape {shape:?}, expected 2 dimensions"
        )));
    }
    let bytes = t.data();
    let (data, half): (Vec<f32>, bool) = match t.dtype() {
        Dtype::F32 => (
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            false,
        ),
        Dtype::F16 => (
            bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            true,
        ),
        Dtype::BF16 => (
            bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            false,
        ),
        other => {
            return Err(err(format!(
                "tensor {name:?} is {other:?} (F32, F16 and BF16 are supported)"
            )))
        }
    };
    let (rows, cols) = (shape[0], shape[1]);
    if transposed {
        let mut t = vec![0f32; data.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = data[r * cols + c];
            }
        }
        return Ok(Matrix {
            rows: cols,
            cols: rows,
            data: t,
            half,
        });
    }
    Ok(Matrix {
        rows,
        cols,
        data,
        half,
    })
}

fn lora(
    c: &Config,
    cfg: &LoraConfig,
    m: Proj,
    layer: usize,
    a: Matrix,
    b: Matrix,
    scale: f32,
) -> Result<Lora> {
    let (rows, cols) = m.shape(c);
    let what = format!("layer {layer} {}", m.hf_name());
    if a.rows != cfg.r || b.cols != cfg.r {
        return Err(err(format!(
            "{what}: lora_A is {}×{} and lora_B {}×{}, but the config says rank {}",
            a.rows, a.cols, b.rows, b.cols, cfg.r
        )));
    }
    if a.cols != cols || b.rows != rows {
        return Err(err(format!(
            "{what}: lora_A is {}×{} and lora_B {}×{}, the model needs {}×{cols} and {rows}×{}",
            a.rows, a.cols, b.rows, b.cols, cfg.r, cfg.r
        )));
    }
    let mut bs: Vec<f32> = b.data.iter().map(|v| v * scale).collect();
    if let Some(heads) = needs_permutation(c, m) {
        bs = reorder_rows(&bs, cfg.r, heads, c.head_dim, RowOrder::Gguf);
    }
    Ok(Lora {
        rank: cfg.r,
        rows,
        cols,
        a: a.data,
        b: bs,
        half: a.half && b.half,
    })
}
