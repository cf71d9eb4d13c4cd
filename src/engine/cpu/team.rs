//! The CPU backend on several threads that share no memory (the browser's Web Workers,
//! each its own wasm instance): tensor parallelism over the rows of every large matrix.
//! This thread (the lead) keeps the first slice of a matrix's rows and runs everything
//! else of the forward pass; each helper holds one other slice, given at load and never
//! copied back. A matmul is one round: the lead posts the activations, every thread
//! multiplies them by its rows, the lead gathers the outputs. The weights are held
//! once across the threads, so a model larger than one wasm32 instance can address
//! fits. Natively the backend keeps rayon; `pippin::testing::ThreadTeam` runs this
//! protocol on std threads so that it is tested without a browser.

use super::QMatrix;
use crate::error::{Error, Result};
use crate::quant::GgmlType;
use std::collections::HashMap;
use std::sync::Arc;

/// A helper's slice of a matrix: rows `first..first + rows` of matrix `id`, their
/// bytes as the file stores them. `slot` is where its outputs go in a round's
/// gathered block (rows held by the helpers before it).
pub struct Slice<'a> {
    pub id: u32,
    pub ty: GgmlType,
    pub first: usize,
    pub slot: usize,
    pub rows: usize,
    pub cols: usize,
    pub bytes: &'a [u8],
}

/// What a round asks of every helper.
#[derive(Clone, Copy, Debug)]
pub enum Job<'a> {
    /// `x` (`[t][cols]`) times the helper's rows of matrix `id`: it writes `[t][rows]`
    /// at `t · slot` of the gathered block.
    Matmul { id: u32, t: usize, x: &'a [f32] },
    /// Rows `rows` (indices into the whole matrix) of matrix `id`, decoded to f32: the
    /// helper holding row `rows[i]` writes it at `i · cols` of the gathered block (an
    /// embedding lookup in a tied, sharded table).
    Rows { id: u32, rows: &'a [u32] },
}

/// The helpers of the lead thread. One round runs at a time: `start`, the lead's own
/// share, then `finish`.
pub trait Team: Send + Sync {
    /// Threads besides the lead.
    fn helpers(&self) -> usize;
    /// f32 values a round may carry (its input and its gathered output together).
    fn capacity(&self) -> usize;
    /// Gives helper `k` (0-based) its slice of a matrix, at load.
    fn give(&self, k: usize, s: Slice<'_>) -> Result<()>;
    /// Starts a round: the helpers begin while the lead computes its share.
    fn start(&self, job: Job<'_>);
    /// Waits for the round's helpers and copies their outputs into `out` (the
    /// gathered block). An error when a helper failed or stopped answering; the team
    /// is then broken for good.
    fn finish(&self, out: &mut [f32]) -> Result<()>;
    /// Why the team is broken, once it is: every later call of the model fails with it.
    fn failure(&self) -> Option<Error>;
}

/// How a matrix's rows are split between the lead (first) and the helpers.
pub fn split(rows: usize, threads: usize) -> Vec<usize> {
    (0..threads)
        .map(|k| rows * (k + 1) / threads - rows * k / threads)
        .collect()
}

/// Matrices with fewer rows than this per thread stay whole on the lead: a round costs
/// a cross-thread wake-up, more than such a slice's work.
pub const MIN_ROWS_PER_THREAD: usize = 32;

/// A matrix's remote part: its id and its rows per thread (the lead's first).
#[derive(Clone)]
pub struct Remote {
    pub id: u32,
    pub team: Arc<dyn Team>,
    pub split: Vec<usize>,
    /// Bytes the helpers hold.
    pub bytes: u64,
}

impl Remote {
    /// Rows the helpers hold.
    pub fn rows(&self) -> usize {
        self.split[1..].iter().sum()
    }
}

/// The error a round's failure reaches the caller as: the threads are gone, the model
/// must be loaded again.
pub fn lost(why: impl std::fmt::Display) -> Error {
    Error::DeviceLost(format!(
        "a CPU worker thread failed ({why}); load the model again"
    ))
}

/// What a helper holds: its slice of each matrix, with the slice's first row and slot.
#[derive(Default)]
pub struct Slices {
    parts: HashMap<u32, (QMatrix, usize, usize)>,
}

impl Slices {
    /// Keeps a slice (a copy of `s.bytes`).
    pub fn add(&mut self, s: Slice<'_>) -> Result<()> {
        let m = QMatrix::ggml(s.ty, s.rows, s.cols, s.bytes.to_vec())?;
        self.parts.insert(s.id, (m, s.first, s.slot));
        Ok(())
    }

    fn part(&self, id: u32) -> Result<&(QMatrix, usize, usize)> {
        self.parts
            .get(&id)
            .ok_or_else(|| Error::invalid(format!("this thread holds no slice of matrix {id}")))
    }

    /// `x` (`[t][cols]`) times this slice: `[t][rows]`, to go at `t · slot`.
    pub fn matmul(&self, id: u32, x: &[f32]) -> Result<(usize, Vec<f32>)> {
        let (m, _, slot) = self.part(id)?;
        if !x.len().is_multiple_of(m.cols) {
            return Err(Error::invalid("activations of a partial row"));
        }
        Ok((x.len() / m.cols * slot, m.apply_held(x)))
    }

    /// The rows of `rows` this slice holds, decoded: `(index in rows, values)`.
    pub fn rows(&self, id: u32, rows: &[u32]) -> Result<Vec<(usize, Vec<f32>)>> {
        let (m, first, _) = self.part(id)?;
        let held = *first..first + m.held();
        let mine = rows.iter().enumerate();
        Ok(mine
            .filter(|(_, &r)| held.contains(&(r as usize)))
            .map(|(i, &r)| {
                let mut row = vec![0f32; m.cols];
                m.decode_row(r as usize - first, &mut row);
                (i * m.cols, row)
            })
            .collect())
    }
}
