//! Writes adapters in the exact file layout PEFT saves (`adapter_config.json` and
//! `adapter_model.safetensors`, Hugging Face module names and row order), with random
//! A and B: the test fixtures for the default model. `pippin make-adapter` writes one.

use crate::model::Config;
use crate::model::Proj;
use crate::rng::Rng;
use safetensors::{serialize, Dtype, View};
use std::borrow::Cow;

pub struct FixtureSpec<'a> {
    pub rank: usize,
    pub alpha: f32,
    /// Hugging Face module names, e.g. ["q_proj", "v_proj"].
    pub modules: &'a [&'a str],
    pub seed: u64,
    /// B = 0: the adapter changes nothing (PEFT's initial state).
    pub zero_b: bool,
    /// Store f16 instead of f32.
    pub half: bool,
}

struct T {
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

fn tensor(rows: usize, cols: usize, rng: &mut Rng, amp: f32, half: bool) -> T {
    let vals = (0..rows * cols).map(|_| (rng.next_f32() * 2.0 - 1.0) * amp);
    let data = if half {
        vals.flat_map(|v| half::f16::from_f32(v).to_le_bytes())
            .collect()
    } else {
        vals.flat_map(|v| v.to_le_bytes()).collect()
    };
    T {
        shape: vec![rows, cols],
        data,
        half,
    }
}

/// (adapter_config.json, adapter_model.safetensors) for model `c`.
pub fn write(c: &Config, spec: &FixtureSpec) -> (String, Vec<u8>) {
    let mut rng = Rng::new(spec.seed);
    let mut tensors: Vec<(String, T)> = Vec::new();
    for layer in 0..c.n_layers {
        for &name in spec.modules {
            let Some(m) = Proj::ALL.into_iter().find(|p| p.hf_name() == name) else {
                continue;
            };
            let (rows, cols) = m.shape(c);
            let block = if m.is_attention() { "self_attn" } else { "mlp" };
            let base = format!("base_model.model.model.layers.{layer}.{block}.{name}");
            let a = tensor(
                spec.rank,
                cols,
                &mut rng,
                1.0 / (cols as f32).sqrt(),
                spec.half,
            );
            let b = tensor(
                rows,
                spec.rank,
                &mut rng,
                if spec.zero_b { 0.0 } else { 0.05 },
                spec.half,
            );
            tensors.push((format!("{base}.lora_A.weight"), a));
            tensors.push((format!("{base}.lora_B.weight"), b));
        }
    }
    let views: Vec<(String, &T)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
    let bytes = serialize(views, None).expect("safetensors serialization");
    let config = serde_json::json!({
        "peft_type": "LORA",
        "r": spec.rank,
        "lora_alpha": spec.alpha,
        "lora_dropout": 0.0,
        "target_modules": spec.modules,
        "bias": "none",
        "fan_in_fan_out": false,
        "use_rslora": false,
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
    });
    (
        serde_json::to_string_pretty(&config).unwrap_or_default(),
        bytes,
    )
}
