//! LoRA adapters in Hugging Face PEFT's format (`adapter_config.json` +
//! `adapter_model.safetensors`), mapped onto the model's layers. The adapter is kept
//! apart from the quantized base weights and applied as y = W·x + s·B·(A·x), so
//! switching costs nothing; `merge_into` gives the CPU reference W + s·B·A.

pub mod fixture;
mod peft;

pub use peft::{parse, LoraConfig};

use crate::model::{Config, PerProj, Proj, RopeStyle, Weights};

/// The seven linear layers of a block, in Hugging Face's names (`Proj::ALL` order).
pub const MODULES: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// One projection's low-rank update, ready to apply: `a` is `[rank][cols]`, `b` is
/// `[rows][rank]` already multiplied by the scale and in the GGUF row order.
#[derive(Clone, Debug)]
pub struct Lora {
    pub rank: usize,
    pub rows: usize,
    pub cols: usize,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    /// The file stored 16-bit values (kept 16-bit on the GPU).
    pub half: bool,
}

/// An adapter: per layer, per projection, an optional update.
#[derive(Clone, Debug)]
pub struct Adapter {
    pub rank: usize,
    pub scale: f32,
    pub layers: Vec<PerProj<Option<Lora>>>,
}

impl Adapter {
    /// Bytes of adapter weights (f32 on the CPU).
    pub fn bytes(&self) -> u64 {
        self.loras()
            .map(|l| 4 * (l.a.len() + l.b.len()) as u64)
            .sum()
    }

    pub fn loras(&self) -> impl Iterator<Item = &Lora> {
        self.layers
            .iter()
            .flat_map(|l| l.iter().filter_map(|(_, lora)| lora.as_ref()))
    }
}

/// GGUF llama files store Q and K rows permuted for adjacent-pair RoPE (as llama.cpp's
/// converter does): row (h, j, i) of Hugging Face's layout is row (h, i, j) here.
/// An adapter's B for q_proj/k_proj needs the same permutation.
/// Generic over the element so raw tensor bytes permute too (`rank` = bytes a row).
pub fn permute_rows<T: Copy + Default>(
    b: &[T],
    rank: usize,
    heads: usize,
    head_dim: usize,
) -> Vec<T> {
    let half = head_dim / 2;
    let mut out = vec![T::default(); b.len()];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let dst = h * head_dim + 2 * i + j;
                let src = h * head_dim + j * half + i;
                out[dst * rank..][..rank].copy_from_slice(&b[src * rank..][..rank]);
            }
        }
    }
    out
}

/// Whether projection `p`'s B rows must be permuted for this model (how many heads):
/// llama.cpp's converters permute Q/K rows exactly for the families whose RoPE pairs
/// adjacent dimensions.
pub fn needs_permutation(c: &Config, p: Proj) -> Option<usize> {
    match (c.rope_style, p) {
        (RopeStyle::Adjacent, Proj::Q) => Some(c.n_heads),
        (RopeStyle::Adjacent, Proj::K) => Some(c.n_kv_heads),
        _ => None,
    }
}

/// W += B·A for every update (the CPU reference of an adapted model).
pub fn merge_into(w: &mut Weights, adapter: &Adapter) {
    for (layer, loras) in w.layers.iter_mut().zip(&adapter.layers) {
        for (p, lora) in loras.iter() {
            let target = p.of_mut(layer);
            if let Some(l) = lora {
                for r in 0..l.rows {
                    let row = &mut target[r * l.cols..][..l.cols];
                    for k in 0..l.rank {
                        let bk = l.b[r * l.rank + k];
                        row.iter_mut()
                            .zip(&l.a[k * l.cols..][..l.cols])
                            .for_each(|(w, a)| *w += bk * a);
                    }
                }
            }
        }
    }
}
