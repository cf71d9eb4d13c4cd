//! Qwen2 / Qwen2.5: llama's block with biases on the query, key and value projections
//! (read wherever a file has them, as for every family) and RoPE over the halves of a
//! head (GPT-NeoX style).

use super::{Family, Keys, LayerTensor};
use crate::error::{Error, Result};
use crate::model::config::{Config, RopeStyle};
use crate::model::Proj;

pub struct Qwen2;

impl Family for Qwen2 {
    fn name(&self) -> &'static str {
        "qwen2"
    }

    fn config(&self, _k: &Keys, c: &mut Config) -> Result<()> {
        c.rope_style = RopeStyle::HalfSplit;
        // Every Qwen2 checkpoint has them; without, this would be another family.
        let missing = [Proj::Q, Proj::K, Proj::V]
            .into_iter()
            .find(|&p| !c.biases[p]);
        if let Some(p) = missing {
            let name = LayerTensor::Bias(p).name(0);
            return Err(Error::gguf(format!(
                "tensor {name} is missing (a qwen2 layer has Q, K and V biases)"
            )));
        }
        Ok(())
    }
}
