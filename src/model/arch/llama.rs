//! Llama (and SmolLM2, Llama 3.x, Mistral-style checkpoints): pre-norm blocks of GQA
//! attention and a SwiGLU MLP, RoPE on adjacent pairs (llama.cpp's converter permutes
//! Q/K rows so that this equals Hugging Face's half-split rotation).

use super::Family;

pub struct Llama;

impl Family for Llama {
    fn name(&self) -> &'static str {
        "llama"
    }
}
