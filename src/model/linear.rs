//! What the forward pass needs of a weight matrix, so one forward serves the f32
//! reference (`Vec<f32>`) and the CPU backend's quantized matrices.

use super::reference::matmul;

/// A `[rows][cols]` weight matrix.
pub trait Linear: Send + Sync {
    /// `x` `[tokens][cols]` times this matrix transposed: `[tokens][rows]`.
    fn apply(&self, x: &[f32], cols: usize) -> Vec<f32>;
    /// Appends row `r` (`cols` values) to `out`: an embedding lookup.
    fn append_row(&self, r: usize, cols: usize, out: &mut Vec<f32>);
    /// Appends rows `rows` (each checked to be in range) to `out`.
    fn append_rows(&self, rows: &[u32], cols: usize, out: &mut Vec<f32>) {
        for &r in rows {
            self.append_row(r as usize, cols, out);
        }
    }
}

impl Linear for Vec<f32> {
    fn apply(&self, x: &[f32], cols: usize) -> Vec<f32> {
        matmul(x, self, cols)
    }
    fn append_row(&self, r: usize, cols: usize, out: &mut Vec<f32>) {
        out.extend_from_slice(&self[r * cols..][..cols]);
    }
}
