//! The CPU backend's worker threads, translated: `Threads` is the engine's `Team` over
//! js/team.js (the lead's side: a SharedArrayBuffer and the workers), `Helper` what
//! each worker's own wasm instance runs (js/thread.js).

use super::{js_err, JsResult};
use crate::engine::cpu::team::{lost, Job, Slice, Slices, Team};
use crate::error::{Error, Result};
use crate::quant::GgmlType;
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// js/team.js's `Team`.
    pub type JsTeam;
    #[wasm_bindgen(method)]
    fn helpers(this: &JsTeam) -> u32;
    #[wasm_bindgen(method)]
    fn capacity(this: &JsTeam) -> u32;
    #[wasm_bindgen(method, catch)]
    #[allow(clippy::too_many_arguments)]
    fn give(
        this: &JsTeam,
        k: u32,
        id: u32,
        ty: u32,
        first: u32,
        slot: u32,
        cols: u32,
        b: &[u8],
    ) -> Result<(), JsValue>;
    #[wasm_bindgen(method)]
    fn start(this: &JsTeam, id: u32, x: &[f32], cols: u32);
    #[wasm_bindgen(method, js_name = startRows)]
    fn start_rows(this: &JsTeam, id: u32, rows: &[u32]);
    #[wasm_bindgen(method)]
    fn finish(this: &JsTeam, out: &mut [f32]) -> Option<String>;
    #[wasm_bindgen(method)]
    fn failure(this: &JsTeam) -> Option<String>;
}

/// The workers as the engine sees them.
pub struct Threads(pub JsTeam);

// SAFETY: the browser build (wasm32 without atomics) has one thread per instance; the
// engine's `Team: Send + Sync` is for native teams. Nothing here crosses a thread.
unsafe impl Send for Threads {}
unsafe impl Sync for Threads {}

impl Team for Threads {
    fn helpers(&self) -> usize {
        self.0.helpers() as usize
    }
    fn capacity(&self) -> usize {
        self.0.capacity() as usize
    }
    fn give(&self, k: usize, s: Slice<'_>) -> Result<()> {
        let (first, slot) = (s.first as u32, s.slot as u32);
        let ty = s.ty.id();
        // Copying a slice for its worker can fail (out of memory): a clear error, not
        // an exception through the loader's frames.
        let (id, cols) = (s.id, s.cols as u32);
        self.0
            .give(k as u32, id, ty, first, slot, cols, s.bytes)
            .map_err(|e| {
                let why = js_sys::Error::from(e).message();
                Error::device_limits(format!(
                    "a CPU worker thread could not take its share of the model: {why}"
                ))
            })
    }
    fn start(&self, job: Job<'_>) {
        match job {
            Job::Matmul { id, t, x } => self.0.start(id, x, (x.len() / t.max(1)) as u32),
            Job::Rows { id, rows } => self.0.start_rows(id, rows),
        }
    }
    fn finish(&self, out: &mut [f32]) -> Result<()> {
        self.0.finish(out).map_or(Ok(()), |why| Err(lost(why)))
    }
    fn failure(&self) -> Option<Error> {
        self.0.failure().map(lost)
    }
}

/// One worker's slices of the model's matrices.
#[wasm_bindgen]
#[derive(Default)]
pub struct Helper(Slices);

#[wasm_bindgen]
impl Helper {
    #[wasm_bindgen(constructor)]
    pub fn new() -> Helper {
        Helper::default()
    }

    /// Keeps rows `first..` of matrix `id` (`bytes` as the file stores them);
    /// returns how many rows that is.
    pub fn add(
        &mut self,
        id: u32,
        ty: u32,
        first: u32,
        slot: u32,
        cols: u32,
        bytes: &[u8],
    ) -> JsResult<u32> {
        let ty = GgmlType::from_id(ty).ok_or_else(|| js_err(Error::invalid("a bad type")))?;
        let row = ty.bytes_for(cols as u64).unwrap_or(0).max(1) as usize;
        let rows = bytes.len() / row;
        let s = Slice {
            id,
            ty,
            first: first as usize,
            slot: slot as usize,
            rows,
            cols: cols as usize,
            bytes,
        };
        self.0.add(s).map_err(js_err)?;
        Ok(rows as u32)
    }

    /// `x` times this worker's rows of matrix `id`: `[t][rows]`.
    pub fn matmul(&self, id: u32, x: &[f32]) -> JsResult<Vec<f32>> {
        Ok(self.0.matmul(id, x).map_err(js_err)?.1)
    }

    /// The rows of `rows` this worker holds, decoded, in order.
    pub fn rows(&self, id: u32, rows: &[u32]) -> JsResult<Vec<f32>> {
        let rows = self.0.rows(id, rows).map_err(js_err)?;
        Ok(rows.into_iter().flat_map(|(_, v)| v).collect())
    }
}
