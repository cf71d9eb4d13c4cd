//! Writing PEFT's two files (`adapter_config.json`, `adapter_model.safetensors`) as
//! PEFT saves them: Hugging Face module names, `lora_A` `[rank][in]`, `lora_B`
//! `[out][rank]` in Hugging Face's row order, unscaled (the config's `lora_alpha`
//! says the scale). Recovery adapters (`recover`) and the test fixtures use it.

use crate::error::{Error, Result};
use crate::model::{Config, Proj};
use safetensors::{serialize, Dtype, View};
use std::borrow::Cow;

/// One projection's update as PEFT stores it.
pub struct PeftLora {
    pub layer: usize,
    pub proj: Proj,
    /// `[rank][cols]`.
    pub a: Vec<f32>,
    /// `[rows][rank]`, Hugging Face's row order, not multiplied by the scale.
    pub b: Vec<f32>,
}

/// What the config says besides the tensors.
pub struct PeftSpec<'a> {
    pub rank: usize,
    pub alpha: f32,
    /// Store f16 instead of f32.
    pub half: bool,
    pub base_model: &'a str,
}

/// A tensor's bytes for `safetensors::serialize` (f32 or f16).
pub(crate) struct T {
    shape: Vec<usize>,
    data: Vec<u8>,
    half: bool,
}

impl View for &T {
    fn dtype(&self) -> Dtype {
        if self.half {
            Dtype::F16
        } else {
            Dtype::F32
        }
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

pub(crate) fn tensor(v: &[f32], rows: usize, cols: usize, half: bool) -> T {
    let data = if half {
        v.iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect()
    } else {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    };
    T {
        shape: vec![rows, cols],
        data,
        half,
    }
}

/// (adapter_config.json, adapter_model.safetensors) for model `c`.
pub fn write(c: &Config, spec: &PeftSpec, loras: &[PeftLora]) -> Result<(String, Vec<u8>)> {
    let mut tensors: Vec<(String, T)> = Vec::with_capacity(2 * loras.len());
    let mut modules: Vec<&str> = Vec::new();
    for l in loras {
        let (rows, cols) = l.proj.shape(c);
        if l.layer >= c.n_layers || l.a.len() != spec.rank * cols || l.b.len() != rows * spec.rank {
            return Err(Error::Internal(format!(
                "PEFT writer: layer {} {} is not a rank-{} update of the model",
                l.layer,
                l.proj.hf_name(),
                spec.rank
            )));
        }
        let name = l.proj.hf_name();
        if !modules.contains(&name) {
            modules.push(name);
        }
        let block = if l.proj.is_attention() {
            "self_attn"
        } else {
            "mlp"
        };
        let base = format!("base_model.model.model.layers.{}.{block}.{name}", l.layer);
        tensors.push((
            format!("{base}.lora_A.weight"),
            tensor(&l.a, spec.rank, cols, spec.half),
        ));
        tensors.push((
            format!("{base}.lora_B.weight"),
            tensor(&l.b, rows, spec.rank, spec.half),
        ));
    }
    let views: Vec<(String, &T)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
    let bytes = serialize(views, None)
        .map_err(|e| Error::Internal(format!("PEFT writer: safetensors: {e}")))?;
    let config = serde_json::json!({
        "peft_type": "LORA",
        "r": spec.rank,
        "lora_alpha": spec.alpha,
        "lora_dropout": 0.0,
        "target_modules": modules,
        "bias": "none",
        "fan_in_fan_out": false,
        "use_rslora": false,
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": spec.base_model,
    });
    let json = serde_json::to_string_pretty(&config)
        .map_err(|e| Error::Internal(format!("PEFT writer: {e}")))?;
    Ok((json, bytes))
}
