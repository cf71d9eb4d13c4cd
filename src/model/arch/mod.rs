//! Model families as code: each module under here is one architecture — the GGUF keys
//! it reads (with their defaults), the tensors a layer has, and how its block runs
//! (the `Config` the forwards read). Tensor names are spelled in `tensors` only. A new
//! family that reuses existing steps is a new module and a line in `Arch`.

pub mod block;
mod gemma2;
mod gemma3;
mod granite;
mod keys;
mod lfm2;
mod llama;
mod phi3;
mod qwen2;
mod qwen3;
mod smollm3;
pub mod tensors;

pub use block::{Block, LayerOps, Mixer, Norm, Projs, Rope};
pub use keys::Keys;
pub use tensors::{GlobalTensor, LayerTensor};

pub use super::config::Arch;
pub use tensors::TensorSpec;

use super::config::Config;
use crate::error::{Error, Result};
use crate::gguf::Gguf;

impl Arch {
    pub const ALL: [Arch; 9] = [
        Arch::Llama,
        Arch::Qwen3,
        Arch::Gemma3,
        Arch::Qwen2,
        Arch::Granite,
        Arch::Smollm3,
        Arch::Gemma2,
        Arch::Phi3,
        Arch::Lfm2,
    ];

    /// What the family reads and has.
    pub fn family(self) -> &'static dyn Family {
        match self {
            Arch::Llama => &llama::Llama,
            Arch::Qwen3 => &qwen3::Qwen3,
            Arch::Gemma3 => &gemma3::Gemma3,
            Arch::Qwen2 => &qwen2::Qwen2,
            Arch::Granite => &granite::Granite,
            Arch::Smollm3 => &smollm3::Smollm3,
            Arch::Gemma2 => &gemma2::Gemma2,
            Arch::Phi3 => &phi3::Phi3,
            Arch::Lfm2 => &lfm2::Lfm2,
        }
    }

    /// Its `general.architecture` name.
    pub fn name(self) -> &'static str {
        self.family().name()
    }

    pub fn from_name(name: &str) -> Result<Arch> {
        Arch::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| {
                let known: Vec<_> = Arch::ALL.iter().map(|a| a.name()).collect();
                Error::unsupported(format!(
                    "architecture {name:?} (supported: {})",
                    known.join(", ")
                ))
            })
    }
}

/// One architecture: its keys and its tensors.
pub trait Family: Sync {
    /// `general.architecture`, and the prefix of the family's keys.
    fn name(&self) -> &'static str;

    /// The source file that describes it (`pippin info` names it): each family's
    /// module is named as its architecture.
    fn module(&self) -> String {
        format!("src/model/arch/{}.rs", self.name())
    }

    /// The model's shape and block from the file's keys: `c` comes as `Keys::base`
    /// reads it (the keys every family shares, llama's block), and the family sets
    /// what differs. `Config::from_gguf` validates it after.
    fn config(&self, _k: &Keys, _c: &mut Config) -> Result<()> {
        Ok(())
    }

    /// The tensors of layer `l`: the projections and norms of the block `c` describes.
    fn layer_tensors(&self, c: &Config, _l: usize) -> Vec<LayerTensor> {
        tensors::standard_layer(c)
    }

    /// Layer `l`'s tensor `t` as the family's files store it: a tensor of its own
    /// (by default), or rows of a fused one (`TensorSpec::in_rows_of`).
    fn layer_spec(&self, t: LayerTensor, c: &Config, l: usize) -> TensorSpec {
        t.spec(c, l)
    }

    /// Tensor `t` outside the layers as the family's files store it.
    fn global_spec(&self, t: GlobalTensor, c: &Config) -> TensorSpec {
        t.spec(c)
    }

    /// How layer `l` runs (`Block`'s steps).
    fn block(&self, c: &Config, l: usize) -> Block {
        Block::standard(c, l)
    }

    /// The tensors outside the layers.
    fn global_tensors(&self, c: &Config) -> Vec<GlobalTensor> {
        tensors::standard_globals(c)
    }
}

impl Config {
    /// The config of a file, read by its family (`arch`), validated.
    pub fn from_gguf(g: &Gguf) -> Result<Config> {
        config_of(g)
    }

    /// How layer `l` runs, as its family says: what the forwards execute.
    pub fn block(&self, l: usize) -> Block {
        self.arch.family().block(self, l)
    }
}

/// Reads a file's config through its family (`general.architecture`), checks that the
/// tensors the family's layers have are there (by name, shapes are checked at load),
/// and validates every size.
pub fn config_of(g: &Gguf) -> Result<Config> {
    let name = g
        .metadata
        .str("general.architecture")
        .ok_or_else(|| Error::gguf("general.architecture is missing"))?;
    let arch = Arch::from_name(name)?;
    let family = arch.family();
    let keys = Keys::new(g, name);
    let mut cfg = keys.base(arch)?;
    family.config(&keys, &mut cfg)?;
    // A layer of 0 KV heads is a convolution to LFM2; to any other family, an error.
    let kv = keys.per_layer("attention.head_count_kv", cfg.n_layers)?;
    if let Some(l) = kv.and_then(|kv| kv.iter().position(|&n| n == 0)) {
        if !cfg.is_conv(l) {
            return Err(Error::gguf(format!(
                "{} gives layer {l} no KV heads (a {name} layer attends)",
                keys.key("attention.head_count_kv")
            )));
        }
    }
    cfg.validate()?;
    let mut used = std::collections::HashSet::new();
    for l in 0..cfg.n_layers {
        let specs: Vec<_> = family
            .layer_tensors(&cfg, l)
            .into_iter()
            .map(|t| family.layer_spec(t, &cfg, l))
            .collect();
        for s in &specs {
            let n = s.stored_as();
            if g.tensor(n).is_none() && g.tensor(&format!("{n}.pidx")).is_none() {
                let mut all: Vec<_> = specs.iter().map(|s| s.stored_as()).collect();
                all.dedup();
                return Err(Error::gguf(format!(
                    "tensor {n} is missing (a {name} layer has {})",
                    all.join(", ")
                )));
            }
            used.insert(n.to_string());
        }
    }
    // A bias changes every output: one the forwards would not add is an error, not
    // silently different text.
    if let Some(t) = g
        .tensors
        .iter()
        .find(|t| t.name.ends_with(".bias") && !used.contains(&t.name))
    {
        return Err(Error::unsupported(format!(
            "tensor {} (a {name} model in Pippin adds no such bias)",
            t.name
        )));
    }
    Ok(cfg)
}
