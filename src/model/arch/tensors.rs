//! The tensors of a model, in GGUF's (llama.cpp's) naming: the one place their names
//! are spelled. A layer's tensors are `LayerTensor`s, the rest `GlobalTensor`s; each
//! knows its name and its shape in a model.

use crate::model::config::Config;
use crate::model::Proj;

/// What a tensor is to a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerTensor {
    AttnNorm,
    Q,
    K,
    V,
    O,
    /// Per-head RMSNorm of queries and keys (Qwen3, Gemma 3).
    QNorm,
    KNorm,
    /// RMSNorm of the attention output before its residual add (Gemma).
    PostAttnNorm,
    FfnNorm,
    Gate,
    Up,
    Down,
    /// RMSNorm of the MLP output before its residual add (Gemma).
    PostFfnNorm,
    /// The bias added to a projection's output (Qwen2's Q, K and V).
    Bias(Proj),
    /// Q, K and V in one matrix, their rows in that order (Phi-3).
    Qkv,
    /// Gate and up in one matrix, gate's rows first (Phi-3).
    GateUp,
    /// A convolution layer's B, C and x projections in one matrix, in that order
    /// (LFM2); the forwards read them as Q, K and V.
    ConvInProj,
    /// Its taps, `[hidden][conv_taps]`, the last one for the current position.
    ConvTaps,
    /// Its output projection, read as O.
    ConvOutProj,
}

impl LayerTensor {
    /// The name within a block: `blk.N.<this>.weight`.
    pub fn gguf(self) -> &'static str {
        use LayerTensor::*;
        match self {
            AttnNorm => "attn_norm",
            Q => "attn_q",
            K => "attn_k",
            V => "attn_v",
            O => "attn_output",
            QNorm => "attn_q_norm",
            KNorm => "attn_k_norm",
            PostAttnNorm => "post_attention_norm",
            FfnNorm => "ffn_norm",
            Gate => "ffn_gate",
            Up => "ffn_up",
            Down => "ffn_down",
            PostFfnNorm => "post_ffw_norm",
            Bias(p) => LayerTensor::of(p).gguf(),
            Qkv => "attn_qkv",
            GateUp => "ffn_up",
            ConvInProj => "shortconv.in_proj",
            ConvTaps => "shortconv.conv",
            ConvOutProj => "shortconv.out_proj",
        }
    }

    /// The tensor's name in layer `l`: `blk.N.<gguf>.weight`, or `.bias`.
    pub fn name(self, l: usize) -> String {
        use LayerTensor::*;
        let kind = match self {
            Bias(_) => "bias",
            _ => "weight",
        };
        format!("blk.{l}.{}.{kind}", self.gguf())
    }

    /// The tensor a projection is.
    pub fn of(p: Proj) -> LayerTensor {
        use LayerTensor::*;
        match p {
            Proj::Q => Q,
            Proj::K => K,
            Proj::V => V,
            Proj::O => O,
            Proj::Gate => Gate,
            Proj::Up => Up,
            Proj::Down => Down,
        }
    }

    /// The projection it is, if a matrix.
    pub fn proj(self) -> Option<Proj> {
        Proj::ALL.into_iter().find(|&p| LayerTensor::of(p) == self)
    }

    /// Its name and shape in layer `l` of `c`.
    pub fn spec(self, c: &Config, l: usize) -> TensorSpec {
        use LayerTensor::*;
        let name = self.name(l);
        match self {
            QNorm | KNorm => TensorSpec::vector(name, c.head_dim),
            Bias(p) => TensorSpec::vector(name, p.shape(c).0),
            AttnNorm | PostAttnNorm | FfnNorm | PostFfnNorm => TensorSpec::vector(name, c.hidden),
            Q | K | V | O | Gate | Up | Down => {
                let p = self.proj().unwrap_or(Proj::Q);
                let (rows, cols) = p.shape(c);
                TensorSpec::matrix(name, rows, cols)
            }
            Qkv => TensorSpec::matrix(name, c.q_dim() + 2 * c.kv_dim(), c.hidden),
            GateUp => TensorSpec::matrix(name, 2 * c.ffn_dim, c.hidden),
            ConvInProj => TensorSpec::matrix(name, 3 * c.hidden, c.hidden),
            ConvOutProj => TensorSpec::matrix(name, c.hidden, c.hidden),
            ConvTaps => TensorSpec {
                rows: c.hidden,
                ..TensorSpec::vector(name, c.conv_taps)
            },
        }
    }

    /// Its spec in layer `l` as rows of `fused` (`Qkv`, `GateUp`), after `before`
    /// rows of the matrices that precede it there.
    pub fn in_fused(self, fused: LayerTensor, before: usize, c: &Config, l: usize) -> TensorSpec {
        let total = fused.spec(c, l).rows;
        self.spec(c, l).in_rows_of(fused.name(l), before, total)
    }
}

/// The layer of llama's graph with the parts `c` asks for: pre-norms, Q/K/V/O, the
/// gated MLP, the biases of whichever projections the file has them for, QK-norm and
/// post norms where the family has them.
pub fn standard_layer(c: &Config) -> Vec<LayerTensor> {
    use LayerTensor::*;
    let mut v = vec![AttnNorm, Q, K, V, O];
    v.extend(c.biases.iter().filter(|(_, &b)| b).map(|(p, _)| Bias(p)));
    if c.qk_norm {
        v.extend([QNorm, KNorm]);
    }
    if c.post_norms {
        v.extend([PostAttnNorm, PostFfnNorm]);
    }
    v.extend([FfnNorm, Gate, Up, Down]);
    v
}

/// LFM2's final norm: llama.cpp's converter names it as an embedding norm.
pub const LFM2_OUTPUT_NORM: &str = "token_embd_norm.weight";

/// What a tensor outside the layers is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GlobalTensor {
    Embedding,
    OutputNorm,
    /// The output head, when not tied to the embedding.
    Output,
    /// Llama 3's per-frequency RoPE divisors.
    RopeFreqs,
    /// LongRoPE's divisors for contexts within the original length (Phi-3), and
    /// beyond it.
    RopeFactorsShort,
    RopeFactorsLong,
}

impl GlobalTensor {
    pub fn name(self) -> &'static str {
        match self {
            GlobalTensor::Embedding => "token_embd.weight",
            GlobalTensor::OutputNorm => "output_norm.weight",
            GlobalTensor::Output => "output.weight",
            GlobalTensor::RopeFreqs => "rope_freqs.weight",
            GlobalTensor::RopeFactorsShort => "rope_factors_short.weight",
            GlobalTensor::RopeFactorsLong => "rope_factors_long.weight",
        }
    }

    pub fn spec(self, c: &Config) -> TensorSpec {
        let name = self.name().to_string();
        match self {
            GlobalTensor::Embedding | GlobalTensor::Output => {
                TensorSpec::matrix(name, c.vocab_size, c.hidden)
            }
            GlobalTensor::OutputNorm => TensorSpec::vector(name, c.hidden),
            GlobalTensor::RopeFreqs
            | GlobalTensor::RopeFactorsShort
            | GlobalTensor::RopeFactorsLong => TensorSpec::vector(name, c.rope_dim / 2),
        }
    }
}

/// The embedding, the final norm, the head unless tied, RoPE factors if the file has
/// them.
pub fn standard_globals(c: &Config) -> Vec<GlobalTensor> {
    let mut v = vec![GlobalTensor::Embedding, GlobalTensor::OutputNorm];
    if !c.tied_embeddings {
        v.push(GlobalTensor::Output);
    }
    if c.rope_freq_factors {
        v.push(GlobalTensor::RopeFreqs);
    }
    v
}

/// A weight matrix of `rows` outputs × `cols` inputs (GGUF dims `[cols, rows]`), or a
/// vector (a norm's weights, RoPE factors: `rows == 1`). Whether a tensor is a matrix
/// is the model's decision, never inferred from its size: a file can make a matrix
/// one row long.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    pub matrix: bool,
    /// Where the file fuses this matrix with others (Phi-3's Q|K|V): its rows in
    /// that tensor. Loaders read them as a tensor of their own, named `name`.
    pub rows_of: Option<RowsOf>,
}

/// Rows `[row0, row0 + rows)` of `tensor`, a matrix of `total` rows.
#[derive(Clone, Debug, PartialEq)]
pub struct RowsOf {
    pub tensor: String,
    pub row0: usize,
    pub total: usize,
}

impl TensorSpec {
    pub fn matrix(name: String, rows: usize, cols: usize) -> TensorSpec {
        TensorSpec {
            name,
            rows,
            cols,
            matrix: true,
            rows_of: None,
        }
    }

    pub fn vector(name: String, len: usize) -> TensorSpec {
        TensorSpec {
            name,
            rows: 1,
            cols: len,
            matrix: false,
            rows_of: None,
        }
    }

    /// This matrix as rows `row0..` of `tensor`, a matrix of `total` rows.
    pub fn in_rows_of(self, tensor: String, row0: usize, total: usize) -> TensorSpec {
        let rows_of = Some(RowsOf {
            tensor,
            row0,
            total,
        });
        TensorSpec { rows_of, ..self }
    }

    /// The file's tensor that holds it.
    pub fn stored_as(&self) -> &str {
        self.rows_of.as_ref().map_or(&self.name, |r| &r.tensor)
    }
}
