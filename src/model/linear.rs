//! What the forward pass needs of a weight matrix, so one forward serves the f32
//! reference (`Vec<f32>`) and the CPU backend's quantized matrices.

use crate::par::*;

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

/// `x` `[tokens][k]` times `w` `[n][k]` transposed: `[tokens][n]`. Parallel over
/// blocks of output rows so each weight row is read once for all tokens.
pub fn matmul(x: &[f32], w: &[f32], k: usize) -> Vec<f32> {
    let t = x.len() / k;
    let n = w.len() / k;
    const BLOCK: usize = 64;
    let blocks: Vec<Vec<f32>> = w
        .par_chunks(BLOCK * k)
        .map(|wb| {
            let rows = wb.len() / k;
            let mut out = vec![0f32; rows * t];
            for (r, wr) in wb.chunks_exact(k).enumerate() {
                for (ti, xr) in x.chunks_exact(k).enumerate() {
                    out[r * t + ti] = dot(wr, xr);
                }
            }
            out
        })
        .collect();
    let mut y = vec![0f32; t * n];
    for (b, out) in blocks.iter().enumerate() {
        let rows = out.len() / t.max(1);
        for r in 0..rows {
            for ti in 0..t {
                y[ti * n + b * BLOCK + r] = out[r * t + ti];
            }
        }
    }
    y
}

/// `Σ a·b`: eight independent sums that LLVM vectorizes natively, SIMD128 in the
/// browser (`pippin_cpu_kernels::fastest`: the browser build is optimized for size and
/// LLVM does not vectorize there).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    pippin_cpu_kernels::fastest::dot_f32(a, b)
}
