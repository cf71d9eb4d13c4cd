//! LoRA adapters in Hugging Face PEFT's format (`adapter_config.json` +
//! `adapter_model.safetensors`), read into the model's layers (`model::lora`, what the
//! forwards apply as y = W·x + s·B·(A·x)) and written back; the recovery adapter a
//! converted GGUF file carries (`recovery`).

#[cfg(any(test, feature = "dev"))]
pub mod fixture;
mod peft;
pub mod recovery;
pub mod write;

pub use crate::model::lora::{merge_into, stack, Adapter, Lora};
pub use peft::{parse, LoraConfig};
pub use write::{PeftLora, PeftSpec};

use crate::model::{Config, Proj, RopeStyle};

/// The seven linear layers of a block, in Hugging Face's names (`Proj::ALL` order).
pub const MODULES: [&str; 7] = Proj::HF_NAMES;

/// The row order of Q and K (and an adapter's B for q_proj/k_proj): GGUF llama files
/// store them permuted for adjacent-pair RoPE (as llama.cpp's converter does): row
/// (h, j, i) of Hugging Face's layout is row (h, i, j) there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOrder {
    Gguf,
    /// What a PEFT file stores.
    HuggingFace,
}

/// `b`'s rows (each `rank` elements) of `heads` heads of `head_dim`, moved into order
/// `to` from the other: row (h, j·half + i) ⇄ (h, 2i + j). Generic over the element so
/// raw tensor bytes move too (`rank` = bytes a row).
pub fn reorder_rows<T: Copy + Default>(
    b: &[T],
    rank: usize,
    heads: usize,
    head_dim: usize,
    to: RowOrder,
) -> Vec<T> {
    let half = head_dim / 2;
    let mut out = vec![T::default(); b.len()];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let gguf = h * head_dim + 2 * i + j;
                let hf = h * head_dim + j * half + i;
                let (dst, src) = match to {
                    RowOrder::Gguf => (gguf, hf),
                    RowOrder::HuggingFace => (hf, gguf),
                };
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
