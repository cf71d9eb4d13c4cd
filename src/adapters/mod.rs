//! LoRA adapters in Hugging Face PEFT's format (`adapter_config.json` +
//! `adapter_model.safetensors`), mapped onto the model's layers. The adapter is kept
//! apart from the quantized base weights and applied as y = W·x + s·B·(A·x), so
//! switching costs nothing; `merge_into` gives the CPU reference W + s·B·A.

pub mod fixture;
mod peft;
pub mod recovery;
pub mod write;

pub use peft::{parse, LoraConfig};
pub use write::{PeftLora, PeftSpec};

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

/// `task` on top of `base` as one adapter: where both update a projection, the update
/// is both at once (A's rows stacked, B's columns side by side: B·A = B₁·A₁ + B₂·A₂,
/// each B carrying its own scale), so a task adapter trained on a recovered model runs
/// with its recovery adapter under it, at the cost of the two ranks together.
pub fn stack(base: &Adapter, task: &Adapter) -> Adapter {
    let layers = base
        .layers
        .iter()
        .zip(&task.layers)
        .map(|(b, t)| {
            let mut out = PerProj::<Option<Lora>>::default();
            for p in Proj::ALL {
                out[p] = match (&b[p], &t[p]) {
                    (Some(x), Some(y)) => Some(concat(x, y)),
                    (x, y) => x.clone().or_else(|| y.clone()),
                };
            }
            out
        })
        .collect();
    Adapter {
        rank: base.rank + task.rank,
        scale: 1.0,
        layers,
    }
}

fn concat(x: &Lora, y: &Lora) -> Lora {
    let rank = x.rank + y.rank;
    let mut b = Vec::with_capacity(x.rows * rank);
    for r in 0..x.rows {
        b.extend_from_slice(&x.b[r * x.rank..][..x.rank]);
        b.extend_from_slice(&y.b[r * y.rank..][..y.rank]);
    }
    Lora {
        rank,
        rows: x.rows,
        cols: x.cols,
        a: [&x.a[..], &y.a[..]].concat(),
        b,
        half: x.half && y.half,
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
    reorder_rows(b, rank, heads, head_dim, true)
}

/// The inverse of `permute_rows`: GGUF's row order back to Hugging Face's (what a
/// PEFT file stores).
pub fn unpermute_rows<T: Copy + Default>(
    b: &[T],
    rank: usize,
    heads: usize,
    head_dim: usize,
) -> Vec<T> {
    reorder_rows(b, rank, heads, head_dim, false)
}

/// Moves row (h, j·half + i) to (h, 2i + j) (`to_gguf`) or back.
fn reorder_rows<T: Copy + Default>(
    b: &[T],
    rank: usize,
    heads: usize,
    head_dim: usize,
    to_gguf: bool,
) -> Vec<T> {
    let half = head_dim / 2;
    let mut out = vec![T::default(); b.len()];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let gguf = h * head_dim + 2 * i + j;
                let hf = h * head_dim + j * half + i;
                let (dst, src) = if to_gguf { (gguf, hf) } else { (hf, gguf) };
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
