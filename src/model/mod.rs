//! The model: its families (`arch`), its configuration, the tensors it needs, and the CPU reference forward.

pub mod arch;
mod config;
pub mod linear;
pub mod lora;
mod proj;
pub mod reference;
pub mod short_conv;
pub mod weights;

pub use arch::Arch;
pub use config::{Activation, Config, RopeStyle};
pub use linear::Linear;
pub use proj::{PerProj, Proj};
pub use reference::{KvCache, Reference};
pub use weights::Weights;

use crate::error::Result;
use crate::gguf::Gguf;
use std::path::Path;

/// Loads a GGUF file into the CPU reference model.
pub fn load_reference(path: &Path) -> Result<(Gguf, Reference)> {
    let (gguf, mut files) = crate::gguf::split::open_model(path)?;
    let config = Config::from_gguf(&gguf)?;
    let weights = Weights::load(&gguf, &config, &mut files)?;
    Ok((gguf, Reference::new(config, weights)))
}
