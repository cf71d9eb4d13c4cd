//! Error feedback when assigning weights to table entries, after GPTQ (Frantar et al.,
//! 2022). Rounding one input column of a matrix changes the layer's output by an
//! amount the remaining columns can partly cancel: with H = XᵀX/n over calibration
//! inputs X, columns are assigned in order and each one's error is spread over the
//! columns not yet assigned through the upper Cholesky factor U of H⁻¹. The tables are
//! chosen first (k-means) and stay fixed; only the indices change.

use crate::error::{Error, Result};
use crate::model::reference::matmul;
use crate::quant::palette::{nearest, Palettized};
use rayon::prelude::*;

/// Relative damping added to H's diagonal (GPTQ's default): keeps H invertible when
/// the calibration text has fewer tokens than the matrix has inputs.
const DAMP: f64 = 0.01;

/// H = XᵀX / n for `x` = `[tokens][dim]`.
pub fn hessian(x: &[f32], dim: usize) -> Vec<f32> {
    let n = x.len() / dim;
    let mut xt = vec![0f32; x.len()];
    for (t, row) in x.chunks_exact(dim).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            xt[j * n + t] = v;
        }
    }
    let mut h = matmul(&xt, &xt, n);
    h.iter_mut().for_each(|v| *v /= n as f32);
    h
}

/// The upper factor U of (H + damping)⁻¹, `UᵀU = H⁻¹`, row-major `[dim][dim]`.
///
/// With J the reversal permutation and JHJ = L Lᵀ (Cholesky), H = R Rᵀ for the upper
/// triangular R = J L J, so U = R⁻¹ = J L⁻¹ J: one Cholesky and one triangular inverse.
pub fn inverse_factor(h: &[f32], dim: usize) -> Result<Vec<f32>> {
    let mean_diag = (0..dim).map(|i| h[i * dim + i] as f64).sum::<f64>() / dim as f64;
    let damp = DAMP * mean_diag.max(1e-12);
    let rev = |i: usize| dim - 1 - i;
    // L: Cholesky of JHJ, lower triangular, rows contiguous.
    let mut l = vec![0f64; dim * dim];
    for i in 0..dim {
        for j in 0..=i {
            let (li, lj) = (&l[i * dim..i * dim + j], &l[j * dim..j * dim + j]);
            let dot: f64 = li.iter().zip(lj).map(|(a, b)| a * b).sum();
            let hij = h[rev(i) * dim + rev(j)] as f64 + if i == j { damp } else { 0.0 };
            let v = hij - dot;
            l[i * dim + j] = if i == j {
                if v <= 0.0 {
                    return Err(Error::invalid(
                        "calibration Hessian is not positive definite",
                    ));
                }
                v.sqrt()
            } else {
                v / l[j * dim + j]
            };
        }
    }
    // M = L⁻¹, row by row: M[i] = (e_i − Σ_{k<i} L[i][k]·M[k]) / L[i][i].
    let mut m = vec![0f64; dim * dim];
    for i in 0..dim {
        let mut row = vec![0f64; i + 1];
        row[i] = 1.0;
        for k in 0..i {
            let c = l[i * dim + k];
            if c != 0.0 {
                let mk = &m[k * dim..k * dim + k + 1];
                row[..=k].iter_mut().zip(mk).for_each(|(r, v)| *r -= c * v);
            }
        }
        let d = l[i * dim + i];
        m[i * dim..i * dim + i + 1]
            .iter_mut()
            .zip(&row)
            .for_each(|(o, r)| *o = r / d);
    }
    Ok((0..dim * dim)
        .map(|ij| m[rev(ij / dim) * dim + rev(ij % dim)] as f32)
        .collect())
}

/// Re-assigns `p`'s indices for the weights `w` with error feedback through `u`
/// (`inverse_factor` of the matrix's input Hessian). Row groups run in parallel.
pub fn assign(p: &mut Palettized, w: &[f32], u: &[f32]) {
    let (cols, k, rows_per_lut) = (p.cols, p.entries(), p.rows_per_lut);
    let luts: Vec<Vec<f32>> = p
        .luts
        .chunks(k)
        .map(|t| t.iter().map(|h| h.to_f32()).collect())
        .collect();
    p.indices
        .par_chunks_mut(rows_per_lut * cols)
        .zip(w.par_chunks(rows_per_lut * cols))
        .zip(luts.par_iter())
        .for_each(|((idx, wg), lut)| {
            // Sorted centres for `nearest` (k-means tables are sorted; keep the order map).
            let mut order: Vec<usize> = (0..k).collect();
            order.sort_by(|&a, &b| lut[a].total_cmp(&lut[b]));
            let sorted: Vec<f32> = order.iter().map(|&i| lut[i]).collect();
            let mut work = wg.to_vec();
            for j in 0..cols {
                let uj = &u[j * cols..(j + 1) * cols];
                for (row, out) in work.chunks_exact_mut(cols).zip(idx.chunks_exact_mut(cols)) {
                    let q = order[nearest(&sorted, row[j])];
                    out[j] = q as u8;
                    let err = (row[j] - lut[q]) / uj[j];
                    row[j + 1..]
                        .iter_mut()
                        .zip(&uj[j + 1..])
                        .for_each(|(v, &c)| *v -= err * c);
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::palette::palettize;
    use crate::rng::Rng;

    fn randn(n: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed);
        (0..n).map(|_| r.next_f32() * 2.0 - 1.0).collect()
    }

    #[test]
    fn the_factor_is_the_upper_cholesky_of_the_inverse() {
        let dim = 7;
        let x = randn(20 * dim, 1);
        let h = hessian(&x, dim);
        let u = inverse_factor(&h, dim).unwrap();
        // Upper triangular, and Uᵀ U (H + damping) = I.
        let mean = (0..dim).map(|i| h[i * dim + i]).sum::<f32>() / dim as f32;
        for i in 0..dim {
            for j in 0..i {
                assert_eq!(u[i * dim + j], 0.0);
            }
        }
        for i in 0..dim {
            for j in 0..dim {
                let mut v = 0f64;
                for k in 0..dim {
                    let utu: f64 = (0..dim)
                        .map(|r| u[r * dim + i] as f64 * u[r * dim + k] as f64)
                        .sum();
                    let hk = h[k * dim + j] as f64 + if k == j { 0.01 * mean as f64 } else { 0.0 };
                    v += utu * hk;
                }
                assert!((v - (i == j) as u8 as f64).abs() < 1e-3, "({i},{j}) = {v}");
            }
        }
    }

    #[test]
    fn error_feedback_lowers_the_output_error_on_correlated_inputs() {
        let (rows, cols, n) = (32, 64, 256);
        // Correlated inputs: each column mixes 8 shared factors.
        let (f, mix) = (randn(n * 8, 2), randn(8 * cols, 3));
        let mix_t: Vec<f32> = (0..cols * 8).map(|i| mix[(i % 8) * cols + i / 8]).collect();
        let x = matmul(&f, &mix_t, 8);
        let w = randn(rows * cols, 4);
        let plain = palettize(&w, rows, cols, 2, 16, 1, None);
        let mut fed = plain.clone();
        assign(
            &mut fed,
            &w,
            &inverse_factor(&hessian(&x, cols), cols).unwrap(),
        );
        let out_err = |p: &Palettized| {
            let (a, b) = (matmul(&x, &w, cols), matmul(&x, &p.dequantize(), cols));
            a.iter()
                .zip(&b)
                .map(|(u, v)| ((u - v) as f64).powi(2))
                .sum::<f64>()
        };
        let (e_plain, e_fed) = (out_err(&plain), out_err(&fed));
        assert!(e_fed < 0.7 * e_plain, "GPTQ {e_fed} vs nearest {e_plain}");
        // Still a palette: every weight one of its table's entries.
        assert_eq!(fed.luts, plain.luts);
    }
}
