//! What the CPU backend will hold for a model, from its GGUF header alone, so that a
//! model over the memory it may use is refused before any weight is read (in the
//! browser: before the rest of the download), with `DeviceLimits` naming the sizes.

use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::model::Config;
use crate::quant::kv::KvFormat;

/// Bytes the CPU backend holds for a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Matrices as the file stores them, vectors (norms) decoded to f32.
    pub weights: u64,
    /// The KV cache at its full context.
    pub kv: u64,
    /// Activations, attention scores and logits of one prefill chunk.
    pub scratch: u64,
}

/// Tokens the generate loop runs per prefill chunk on the CPU (`SessionOptions::chunk`'s
/// default), for the scratch estimate.
const CHUNK: u64 = 64;

impl Footprint {
    /// The footprint of `gguf` (whose configuration is `c`) at a context of `context`
    /// tokens with keys and values in `kv` (the CPU backend keeps int8 or f32).
    pub fn of(gguf: &Gguf, c: &Config, context: usize, kv: KvFormat) -> Footprint {
        let weights = gguf
            .tensors
            .iter()
            .map(|t| match t.dims.len() {
                1 => t.n_elements.saturating_mul(4),
                _ => t.n_bytes,
            })
            .fold(0u64, u64::saturating_add);
        let (layers, kv_width) = (c.n_layers as u64, (c.n_kv_heads * c.head_dim) as u64);
        // Keys and values of a position in a layer: int8 with an f32 scale per head, or
        // f32.
        let per_position = match kv {
            KvFormat::F32 => 2 * kv_width * 4,
            _ => 2 * (kv_width + 4 * c.n_kv_heads as u64),
        };
        let kv = layers * per_position * context as u64;
        let (h, q, f) = (
            c.hidden as u64,
            (c.n_heads * c.head_dim) as u64,
            c.ffn_dim as u64,
        );
        let activations = CHUNK * (3 * h + 2 * q + 2 * kv_width + 3 * f) * 4;
        let scores = CHUNK * c.n_heads as u64 * context as u64 * 4;
        let logits = 2 * c.vocab_size as u64 * 4;
        Footprint {
            weights,
            kv,
            scratch: activations + scores + logits,
        }
    }

    /// What the lead thread holds when the matrices are split across `threads`:
    /// its share of the weights (about 1/threads), the whole KV cache and scratch.
    pub fn shared_by(self, threads: usize) -> Footprint {
        Footprint {
            weights: self.weights.div_ceil(threads.max(1) as u64),
            ..self
        }
    }

    pub fn total(&self) -> u64 {
        self.weights + self.kv + self.scratch
    }

    /// `DeviceLimits` when the footprint is over `limit` bytes.
    pub fn check(&self, limit: u64) -> Result<()> {
        if self.total() <= limit {
            return Ok(());
        }
        Err(Error::device_limits(format!(
            "this model needs {} on the CPU backend ({} of weights, {} of KV cache at its context, {} of scratch): more than the {} the CPU backend may use here",
            mb(self.total()),
            mb(self.weights),
            mb(self.kv),
            mb(self.scratch),
            mb(limit)
        )))
    }
}

fn mb(bytes: u64) -> String {
    format!("{} MB", bytes.div_ceil(1_000_000))
}
