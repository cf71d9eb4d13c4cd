//! The CPU reference model as a generation backend (`pippin generate --cpu`).

use super::Backend;
use crate::error::Result;
use crate::model::{KvCache, Reference};

pub struct CpuSession<'m> {
    model: &'m Reference,
    cache: KvCache,
}

impl<'m> CpuSession<'m> {
    pub fn new(model: &'m Reference) -> Self {
        CpuSession {
            model,
            cache: KvCache::new(&model.config),
        }
    }
}

impl Backend for CpuSession<'_> {
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.model.forward(&mut self.cache, tokens, false)
    }
    fn position(&self) -> usize {
        self.cache.len
    }
    fn context_length(&self) -> usize {
        self.model.config.context_length
    }
}
