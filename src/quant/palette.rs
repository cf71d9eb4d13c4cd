//! Palettization, after AFM: each weight becomes an index into a small lookup table
//! (16 entries for 4 bits, 4 for 2 bits) found by k-means over a group of output rows
//! that share the table. CPU only for now: the converter and the GPU kernels build on it.

use half::f16;
use rayon::prelude::*;

/// A palettized matrix: `indices[row * cols + col]` into the table of its row group.
#[derive(Clone, Debug, PartialEq)]
pub struct Palettized {
    pub bits: u32,
    pub rows: usize,
    pub cols: usize,
    pub rows_per_lut: usize,
    pub indices: Vec<u8>,
    /// `[group][1 << bits]`, stored as f16 (as in the GGUF `.plut` tensors).
    pub luts: Vec<f16>,
}

impl Palettized {
    pub fn entries(&self) -> usize {
        1 << self.bits
    }

    /// Every weight as its table entry.
    pub fn dequantize(&self) -> Vec<f32> {
        let k = self.entries();
        self.indices
            .iter()
            .enumerate()
            .map(|(i, &q)| {
                let group = i / self.cols / self.rows_per_lut;
                self.luts[group * k + q as usize].to_f32()
            })
            .collect()
    }

    pub fn mse(&self, w: &[f32]) -> f64 {
        mse(w, &self.dequantize())
    }
}

pub fn mse(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| ((x - y) as f64).powi(2))
        .sum::<f64>()
        / a.len().max(1) as f64
}

/// k-means with k-means++ seeding (deterministic for a seed) and Lloyd iterations.
/// Returns the centroids, sorted.
pub fn kmeans(values: &[f32], k: usize, iterations: usize, seed: u64) -> Vec<f32> {
    let mut rng = crate::sampler::Rng::new(seed);
    let mut centroids = vec![values[(rng.next_u64() % values.len() as u64) as usize]];
    let mut d2: Vec<f32> = values.iter().map(|v| (v - centroids[0]).powi(2)).collect();
    while centroids.len() < k {
        let total: f64 = d2.iter().map(|&d| d as f64).sum();
        if total == 0.0 {
            break; // fewer distinct values than entries
        }
        let mut r = rng.next_f32() as f64 * total;
        let mut pick = values.len() - 1;
        for (i, &d) in d2.iter().enumerate() {
            r -= d as f64;
            if r <= 0.0 {
                pick = i;
                break;
            }
        }
        let c = values[pick];
        centroids.push(c);
        d2.iter_mut()
            .zip(values)
            .for_each(|(d, v)| *d = d.min((v - c).powi(2)));
    }
    centroids.sort_by(f32::total_cmp);
    for _ in 0..iterations {
        let mut sum = vec![0f64; centroids.len()];
        let mut count = vec![0usize; centroids.len()];
        for &v in values {
            let j = nearest(&centroids, v);
            sum[j] += v as f64;
            count[j] += 1;
        }
        let mut moved = false;
        for j in 0..centroids.len() {
            if count[j] > 0 {
                let c = (sum[j] / count[j] as f64) as f32;
                moved |= c != centroids[j];
                centroids[j] = c;
            }
        }
        centroids.sort_by(f32::total_cmp);
        if !moved {
            break;
        }
    }
    centroids.resize(k, *centroids.last().unwrap_or(&0.0));
    centroids
}

/// Index of the centroid nearest to `v` (centroids sorted).
fn nearest(centroids: &[f32], v: f32) -> usize {
    let i = centroids.partition_point(|&c| c < v);
    match (i.checked_sub(1), centroids.get(i)) {
        (Some(lo), Some(&hi)) if (v - centroids[lo]).abs() <= (hi - v).abs() => lo,
        (Some(lo), None) => lo,
        _ => i,
    }
}

/// Palettizes a `rows × cols` matrix with one table per `rows_per_lut` rows, on all
/// cores. The tables are rounded to f16 before indices are chosen, so indices match
/// the stored tables exactly.
pub fn palettize(
    w: &[f32],
    rows: usize,
    cols: usize,
    bits: u32,
    rows_per_lut: usize,
    seed: u64,
) -> Palettized {
    assert!(bits == 2 || bits == 4, "palettes are 2- or 4-bit");
    let k = 1usize << bits;
    let rows_per_lut = rows_per_lut.clamp(1, rows.max(1));
    let groups: Vec<(Vec<f16>, Vec<u8>)> = w
        .par_chunks(rows_per_lut * cols)
        .enumerate()
        .map(|(g, chunk)| {
            let lut: Vec<f16> = kmeans(chunk, k, 25, seed ^ g as u64)
                .iter()
                .map(|&c| f16::from_f32(c))
                .collect();
            let centers: Vec<f32> = lut.iter().map(|h| h.to_f32()).collect();
            let idx = chunk.iter().map(|&v| nearest(&centers, v) as u8).collect();
            (lut, idx)
        })
        .collect();
    let mut p = Palettized {
        bits,
        rows,
        cols,
        rows_per_lut,
        indices: Vec::with_capacity(w.len()),
        luts: Vec::new(),
    };
    for (lut, idx) in groups {
        p.luts.extend(lut);
        p.indices.extend(idx);
    }
    p
}

/// The baseline palettization must beat: 2^bits evenly spaced levels over each group's
/// range (what a plain uniform quantizer would do).
pub fn uniform(w: &[f32], rows: usize, cols: usize, bits: u32, rows_per_lut: usize) -> Palettized {
    let k = 1usize << bits;
    let mut p = Palettized {
        bits,
        rows,
        cols,
        rows_per_lut,
        indices: Vec::with_capacity(w.len()),
        luts: Vec::new(),
    };
    for chunk in w.chunks(rows_per_lut * cols) {
        let lo = chunk.iter().cloned().fold(f32::INFINITY, f32::min);
        let hi = chunk.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let lut: Vec<f16> = (0..k)
            .map(|i| f16::from_f32(lo + (hi - lo) * i as f32 / (k - 1) as f32))
            .collect();
        let centers: Vec<f32> = lut.iter().map(|h| h.to_f32()).collect();
        p.indices
            .extend(chunk.iter().map(|&v| nearest(&centers, v) as u8));
        p.luts.extend(lut);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights shaped like a trained layer's: mostly small, a few large.
    fn weights(n: usize, seed: u64) -> Vec<f32> {
        let mut r = crate::sampler::Rng::new(seed);
        (0..n)
            .map(|_| {
                let u = r.next_f32() * 2.0 - 1.0;
                u * u * u * 0.5 + (r.next_f32() - 0.5) * 0.02
            })
            .collect()
    }

    #[test]
    fn every_weight_is_its_table_entry() {
        for bits in [2, 4] {
            let (rows, cols) = (37, 96);
            let w = weights(rows * cols, bits as u64);
            let p = palettize(&w, rows, cols, bits, 16, 7);
            assert_eq!(p.luts.len(), 3 * (1 << bits), "3 groups of 16, 16, 5 rows");
            let deq = p.dequantize();
            for (i, (&q, &d)) in p.indices.iter().zip(&deq).enumerate() {
                assert!((q as usize) < p.entries());
                let group = i / cols / 16;
                assert_eq!(d, p.luts[group * p.entries() + q as usize].to_f32());
                // The chosen entry is the nearest one of its table.
                let lut = &p.luts[group * p.entries()..][..p.entries()];
                let best = lut
                    .iter()
                    .map(|c| (c.to_f32() - w[i]).abs())
                    .fold(f32::INFINITY, f32::min);
                assert!(((d - w[i]).abs() - best).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn kmeans_is_never_worse_than_uniform_levels() {
        for (bits, seed) in [(2, 1), (4, 2), (4, 3)] {
            let (rows, cols) = (64, 128);
            let w = weights(rows * cols, seed);
            let km = palettize(&w, rows, cols, bits, 16, seed).mse(&w);
            let un = uniform(&w, rows, cols, bits, 16).mse(&w);
            assert!(km <= un, "{bits}-bit: k-means MSE {km} vs uniform {un}");
            assert!(
                km < un * 0.8,
                "{bits}-bit: k-means should clearly win on peaked weights"
            );
        }
    }

    #[test]
    fn deterministic_for_a_seed_and_few_distinct_values_are_exact() {
        let w = weights(32 * 64, 9);
        assert_eq!(
            palettize(&w, 32, 64, 4, 16, 5),
            palettize(&w, 32, 64, 4, 16, 5)
        );
        let three = [0.5f32, -1.0, 2.0].repeat(64);
        let p = palettize(&three, 3, 64, 2, 16, 1);
        assert_eq!(p.dequantize(), three);
    }
}
