//! Loads a model for the CPU backend from a byte stream: the file is read front to
//! back once, each matrix kept as the bytes the file stores (its quantized size), each
//! vector decoded to f32.

use super::matrix::QMatrix;
use super::team::Team;
use crate::adapters::recovery;
use crate::error::{Error, Result};
use crate::gguf::{read_streamed_header, ByteSource, Gguf, Progress, Window};
use crate::model::weights::{decodable, roles, Role, Tensor};
use crate::model::{Config, Reference, Weights};
use crate::quant;
use std::collections::HashMap;
use std::sync::Arc;

/// Reads the model from `src`; `check(header)` runs before any weight is read.
/// The context is capped at `max_context` tokens.
pub async fn load<S: ByteSource>(
    src: &mut S,
    max_context: usize,
    progress: Progress<'_>,
    check: &mut dyn FnMut(&Gguf) -> Result<()>,
) -> Result<(Reference<QMatrix>, Gguf)> {
    let (model, gguf, _) = load_shared(src, max_context, progress, check, None).await?;
    Ok((model, gguf))
}

/// As `load`, each large matrix's rows split across `team`'s threads as it is read,
/// and the bytes of the adapter the file carries (its recovery adapter), by name.
pub async fn load_shared<S: ByteSource>(
    src: &mut S,
    max_context: usize,
    progress: Progress<'_>,
    check: &mut dyn FnMut(&Gguf) -> Result<()>,
    team: Option<&Arc<dyn Team>>,
) -> Result<(Reference<QMatrix>, Gguf, recovery::Tensors)> {
    let total = src.total_len();
    let mut w = Window::new(src);
    let gguf = read_streamed_header(&mut w, progress).await?;
    let mut config = Config::from_gguf(&gguf)?;
    config.context_length = config.context_length.min(max_context.max(1));
    let mut reads = roles(&gguf, &config)?;
    recovery::add_reads(&gguf, &mut reads);
    let roles = &reads.roles;
    // Every plain tensor decodable before any weight is read.
    for t in &reads.tensors {
        if let Some(Role::Whole(_)) = roles.get(&t.name) {
            decodable(t)?;
        }
    }
    check(&gguf)?;
    let mut read: HashMap<String, Tensor<QMatrix>> = HashMap::new();
    let mut halves: HashMap<String, Vec<u8>> = HashMap::new();
    let mut adapter = recovery::Tensors::new();
    for (id, t) in (0u32..).zip(&reads.tensors) {
        let bytes = w.take(t.shard, gguf.start(t), t.n_bytes, &t.name).await?;
        match &roles[&t.name] {
            Role::Whole(s) if s.matrix => {
                let mut m = QMatrix::ggml(t.ty, s.rows, s.cols, bytes)?;
                if let Some(team) = team {
                    m = m.shard(id, team)?;
                }
                read.insert(s.name.clone(), Tensor::Matrix(m));
            }
            Role::Whole(s) => {
                let v = quant::dequantize(t.ty, &bytes, t.n_elements as usize)?;
                read.insert(s.name.clone(), Tensor::Vector(v));
            }
            Role::Adapter => {
                adapter.insert(t.name.clone(), (t.ty, bytes));
            }
            Role::Indices(s, ..) | Role::Tables(s) => {
                // A palettized weight is built once both of its tensors are in.
                let Some(other) = halves.remove(&s.name) else {
                    halves.insert(s.name.clone(), bytes);
                    continue;
                };
                let (idx, lut) = match &roles[&t.name] {
                    Role::Indices(..) => (bytes, other),
                    _ => (other, bytes),
                };
                let (bits, rows_per_lut) = palette_of(roles, &s.name);
                let m = QMatrix::palette(bits, (s.rows, s.cols), rows_per_lut, &idx, &lut)?;
                read.insert(s.name.clone(), Tensor::Matrix(m));
            }
        }
        progress(w.read(), total.unwrap_or(0));
    }
    let weights = Weights::assemble(&config, |s| {
        read.remove(&s.name)
            .ok_or_else(|| Error::gguf(format!("tensor {} was not read", s.name)))
    })?;
    Ok((Reference::new(config, weights), gguf, adapter))
}

/// The bits and rows per table of palettized weight `name`.
fn palette_of(roles: &HashMap<String, Role>, name: &str) -> (u32, usize) {
    roles
        .values()
        .find_map(|r| match r {
            Role::Indices(s, bits, rows) if s.name == name => Some((*bits, *rows)),
            _ => None,
        })
        .unwrap_or((4, 1))
}
