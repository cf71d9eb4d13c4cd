//! Reading a family's `<arch>.*` keys: checked integers and positive floats with
//! defaults, and the keys (and optional tensors) every family shares (`base`).

use super::{Arch, GlobalTensor};
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::model::config::{Config, MAX_DIM};
use crate::model::{PerProj, Proj};

/// A file's keys under its architecture's prefix.
pub struct Keys<'a> {
    pub gguf: &'a Gguf,
    prefix: &'a str,
}

impl<'a> Keys<'a> {
    pub fn new(gguf: &'a Gguf, prefix: &'a str) -> Self {
        Keys { gguf, prefix }
    }

    /// The full name of key `k` (`<arch>.k`).
    pub fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.prefix)
    }

    /// A count or width: present, an integer, positive and within bounds.
    pub fn int(&self, k: &str) -> Result<usize> {
        let key = self.key(k);
        let v = self
            .gguf
            .metadata
            .u64(&key)
            .ok_or_else(|| Error::gguf(format!("{key} is missing or not an integer")))?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0 && (v as u64) < MAX_DIM)
            .ok_or_else(|| Error::gguf(format!("{key} = {v} is out of range")))
    }

    /// As `int`, when the key is there.
    pub fn opt_int(&self, k: &str) -> Result<Option<usize>> {
        match self.gguf.metadata.get(&self.key(k)) {
            Some(_) => self.int(k).map(Some),
            None => Ok(None),
        }
    }

    /// A count per layer: an array of `layers` integers (0 allowed: LFM2's KV heads
    /// of a convolution layer), or one integer for every layer; `None` when absent.
    pub fn per_layer(&self, k: &str, layers: usize) -> Result<Option<Vec<usize>>> {
        let key = self.key(k);
        let Some(v) = self.gguf.metadata.get(&key) else {
            return Ok(None);
        };
        let Some(array) = v.as_array() else {
            return self.int(k).map(|n| Some(vec![n; layers]));
        };
        let values = array
            .to_i64s()
            .filter(|a| a.len() == layers)
            .ok_or_else(|| Error::gguf(format!("{key} is not {layers} integers, one a layer")))?;
        values
            .into_iter()
            .map(|n| {
                usize::try_from(n)
                    .ok()
                    .filter(|&n| (n as u64) < MAX_DIM)
                    .ok_or_else(|| Error::gguf(format!("{key} holds {n}, out of range")))
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// KV heads of the attention layers (`head_count_kv`, per layer or one for all;
    /// layers of 0 have none), which must agree; `n_heads` when the key is absent.
    fn kv_heads(&self, layers: usize, n_heads: usize) -> Result<usize> {
        let Some(counts) = self.per_layer("attention.head_count_kv", layers)? else {
            return Ok(n_heads);
        };
        let mut attending = counts.iter().copied().filter(|&n| n > 0);
        let first = attending.next().unwrap_or(n_heads);
        match attending.find(|&n| n != first) {
            Some(other) => Err(Error::unsupported(format!(
                "{} differs between layers ({first} and {other} KV heads)",
                self.key("attention.head_count_kv")
            ))),
            None => Ok(first),
        }
    }

    /// A positive finite number, `default` when the key is absent.
    pub fn float(&self, k: &str, default: f64) -> Result<f32> {
        let key = self.key(k);
        match self.gguf.metadata.get(&key) {
            None => Ok(default as f32),
            Some(v) => v
                .as_f64()
                .map(|f| f as f32)
                .filter(|f| f.is_finite() && *f > 0.0)
                .ok_or_else(|| {
                    Error::gguf(format!("{key} = {} is not a positive number", v.summary()))
                }),
        }
    }

    /// An error naming key `k` when the file lacks it.
    pub fn require(&self, k: &str) -> Result<()> {
        match self.gguf.metadata.get(&self.key(k)) {
            Some(_) => Ok(()),
            None => Err(Error::gguf(format!("{} is missing", self.key(k)))),
        }
    }

    pub fn str(&self, k: &str) -> Option<&'a str> {
        self.gguf.metadata.str(&self.key(k))
    }

    pub fn has_tensor(&self, t: GlobalTensor) -> bool {
        self.gguf.tensor(t.name()).is_some()
    }

    /// The keys of llama's graph, which every family starts from: sizes, RMSNorm
    /// epsilon, RoPE (base, rotated dimensions, linear scaling or Llama 3's factor
    /// tensor), context, a tied head. Adjacent-pair RoPE, SiLU, no extra norms.
    pub fn base(&self, arch: Arch) -> Result<Config> {
        let n_heads = self.int("attention.head_count")?;
        let hidden = self.int("embedding_length")?;
        let head_dim = match self.opt_int("attention.key_length")? {
            Some(d) => d,
            None => hidden / n_heads,
        };
        if let Some(v) = self.opt_int("attention.value_length")? {
            if v != head_dim {
                return Err(Error::unsupported(format!(
                    "value heads of {v} dimensions with key heads of {head_dim}"
                )));
            }
        }
        let n_layers = self.int("block_count")?;
        Ok(Config {
            arch,
            n_layers,
            n_heads,
            n_kv_heads: self.kv_heads(n_layers, n_heads)?,
            head_dim,
            hidden,
            ffn_dim: self.int("feed_forward_length")?,
            vocab_size: self.vocab_size()?,
            rms_eps: self.float("attention.layer_norm_rms_epsilon", 1e-5)?,
            rope_theta: self.float("rope.freq_base", 10_000.0)?,
            rope_dim: self.opt_int("rope.dimension_count")?.unwrap_or(head_dim),
            rope_freq_factors: self.has_tensor(GlobalTensor::RopeFreqs),
            rope_scale: self.rope_scale()?,
            context_length: self.int("context_length")?,
            tied_embeddings: !self.has_tensor(GlobalTensor::Output),
            attn_scale: (head_dim as f32).powf(-0.5),
            biases: self.biases(),
            // The steps llama's block does not take (adjacent RoPE, SiLU, no extra norms,
            // windows or multipliers), as `Config::default` has them.
            ..Config::default()
        })
    }

    /// The projections the first layer has biases for (then every layer must have
    /// them: the loaders say which one is missing).
    fn biases(&self) -> PerProj<bool> {
        let has = |p| {
            self.gguf
                .tensor(&super::LayerTensor::Bias(p).name(0))
                .is_some()
        };
        PerProj(Proj::ALL.map(has))
    }

    /// Rows of the embedding (0 when it is not 2-D: `validate` names that).
    fn vocab_size(&self) -> Result<usize> {
        let name = GlobalTensor::Embedding.name();
        let embd = self
            .gguf
            .tensor(name)
            .ok_or_else(|| Error::gguf(format!("tensor {name} is missing")))?;
        Ok(match embd.dims.as_slice() {
            [_, v] => usize::try_from(*v)
                .ok()
                .filter(|&v| (v as u64) < MAX_DIM)
                .ok_or_else(|| {
                    Error::gguf(format!("a vocabulary of {v} tokens is out of range"))
                })?,
            _ => 0,
        })
    }

    /// Linear RoPE scaling's factor (1 without scaling).
    fn rope_scale(&self) -> Result<f32> {
        match self.str("rope.scaling.type").unwrap_or("none") {
            "none" => Ok(1.0),
            "linear" => self.float("rope.scaling.factor", 1.0),
            other => Err(Error::unsupported(format!(
                "RoPE scaling {other:?} in {} (supported: none, linear, and Llama 3's rope_freqs)",
                self.key("rope.scaling.type")
            ))),
        }
    }
}
