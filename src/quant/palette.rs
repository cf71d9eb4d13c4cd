//! Palettization, after AFM: each weight becomes an index into a small lookup table
//! (16 entries for 4 bits, 4 for 2 bits) found by k-means over a group of output rows
//! that share the table. The converter (`crate::convert`) writes palettized matrices as
//! two GGUF tensors, `<name>.pidx` (indices packed into u32 words, the layout the GPU
//! kernels read) and `<name>.plut` (the f16 tables); `weights.wgsl` decodes them.

use crate::error::{Error, Result};
use crate::par::*;
use half::f16;

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

    /// Tables: one per `rows_per_lut` rows, the last one possibly for fewer rows.
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(self.rows_per_lut)
    }

    /// Indices packed into words, row by row (`row_words(bits, cols)` words a row):
    /// word i of a row holds values i·(32/bits) on, value j at bits j·bits.
    pub fn pack_indices(&self) -> Vec<u32> {
        let per_word = 32 / self.bits as usize;
        self.indices
            .chunks(per_word)
            .map(|vals| {
                vals.iter()
                    .enumerate()
                    .fold(0u32, |w, (j, &q)| w | (q as u32) << (j as u32 * self.bits))
            })
            .collect()
    }

    /// The packed indices and the f16 tables as a palettized file stores them (little
    /// endian).
    pub fn stored(&self) -> (Vec<u8>, Vec<u8>) {
        let idx = self.pack_indices().into_iter().flat_map(u32::to_le_bytes);
        let lut = self.luts.iter().flat_map(|h| h.to_le_bytes());
        (idx.collect(), lut.collect())
    }

    /// The tables as f16 pairs, two entries a word (the GPU's `w_scales`).
    pub fn lut_words(&self) -> Vec<u32> {
        self.luts
            .chunks(2)
            .map(|p| p[0].to_bits() as u32 | (p[1].to_bits() as u32) << 16)
            .collect()
    }

    /// Rebuilds a matrix from its GGUF tensors: packed index words and f16 tables.
    pub fn from_gguf(
        bits: u32,
        (rows, cols): (usize, usize),
        rows_per_lut: usize,
        idx: &[u8],
        lut: &[u8],
    ) -> Result<Palettized> {
        check_gguf((rows, cols), bits, rows_per_lut, idx, lut)?;
        let per_word = 32 / bits as usize;
        let mask = (1u32 << bits) - 1;
        let indices = idx
            .chunks_exact(4)
            .flat_map(|b| {
                let w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                (0..per_word).map(move |j| ((w >> (j as u32 * bits)) & mask) as u8)
            })
            .collect();
        let luts = lut
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]))
            .collect();
        Ok(Palettized {
            bits,
            rows,
            cols,
            rows_per_lut,
            indices,
            luts,
        })
    }
}

/// Words of packed indices per row (`cols` is a multiple of 32).
pub fn row_words(bits: u32, cols: usize) -> usize {
    cols * bits as usize / 32
}

/// Bits per weight of a palettized matrix, its tables included.
pub fn bits_per_weight(bits: u32, rows: usize, cols: usize, rows_per_lut: usize) -> f64 {
    let tables = rows.div_ceil(rows_per_lut.max(1)) * (1 << bits) * 16;
    bits as f64 + tables as f64 / (rows * cols) as f64
}

pub fn mse(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| ((x - y) as f64).powi(2))
        .sum::<f64>()
        / a.len().max(1) as f64
}

/// k-means with k-means++ seeding (deterministic for a seed) and Lloyd iterations,
/// each value counted with its weight (`None`: all equal). Returns the centroids, sorted.
pub fn kmeans(
    values: &[f32],
    weights: Option<&[f32]>,
    k: usize,
    iterations: usize,
    seed: u64,
) -> Vec<f32> {
    let weight = |i: usize| weights.map_or(1.0, |w| w[i] as f64);
    let mut rng = crate::rng::Rng::new(seed);
    let mut centroids = vec![values[(rng.next_u64() % values.len() as u64) as usize]];
    let mut d2: Vec<f64> = (0..values.len())
        .map(|i| weight(i) * ((values[i] - centroids[0]) as f64).powi(2))
        .collect();
    while centroids.len() < k {
        let total: f64 = d2.iter().sum();
        if total <= 0.0 {
            break; // fewer distinct values than entries
        }
        let mut r = rng.next_f32() as f64 * total;
        let mut pick = values.len() - 1;
        for (i, &d) in d2.iter().enumerate() {
            r -= d;
            if r <= 0.0 && d > 0.0 {
                pick = i;
                break;
            }
        }
        let c = values[pick];
        centroids.push(c);
        for (i, d) in d2.iter_mut().enumerate() {
            *d = d.min(weight(i) * ((values[i] - c) as f64).powi(2));
        }
    }
    centroids.sort_by(f32::total_cmp);
    centroids.dedup();
    for _ in 0..iterations {
        let mut sum = vec![0f64; centroids.len()];
        let mut mass = vec![0f64; centroids.len()];
        for (i, &v) in values.iter().enumerate() {
            let j = nearest(&centroids, v);
            sum[j] += weight(i) * v as f64;
            mass[j] += weight(i);
        }
        let mut moved = false;
        for j in 0..centroids.len() {
            if mass[j] > 0.0 {
                let c = (sum[j] / mass[j]) as f32;
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
pub fn nearest(centroids: &[f32], v: f32) -> usize {
    let i = centroids.partition_point(|&c| c < v);
    match (i.checked_sub(1), centroids.get(i)) {
        (Some(lo), Some(&hi)) if (v - centroids[lo]).abs() <= (hi - v).abs() => lo,
        (Some(lo), None) => lo,
        _ => i,
    }
}

/// Palettizes a `rows × cols` matrix with one table per `rows_per_lut` rows, on all
/// cores. The tables are rounded to f16 before indices are chosen, so indices match
/// the stored tables exactly. With `importance` (`cols` values, e.g. the mean square of
/// each input column on calibration text) k-means weights each weight by its column's,
/// so the tables fit best where errors cost most.
pub fn palettize(
    w: &[f32],
    rows: usize,
    cols: usize,
    bits: u32,
    rows_per_lut: usize,
    seed: u64,
    importance: Option<&[f32]>,
) -> Palettized {
    let k = 1usize << bits;
    with_tables(w, rows, cols, bits, rows_per_lut, |g, chunk| {
        let weights: Option<Vec<f32>> =
            importance.map(|imp| imp.iter().copied().cycle().take(chunk.len()).collect());
        kmeans(chunk, weights.as_deref(), k, 25, seed ^ g as u64)
    })
}

/// The baseline palettization must beat: 2^bits evenly spaced levels over each group's
/// range (what a plain uniform quantizer would do).
pub fn uniform(w: &[f32], rows: usize, cols: usize, bits: u32, rows_per_lut: usize) -> Palettized {
    let k = 1usize << bits;
    with_tables(w, rows, cols, bits, rows_per_lut, |_, chunk| {
        let lo = chunk.iter().cloned().fold(f32::INFINITY, f32::min);
        let hi = chunk.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        (0..k)
            .map(|i| lo + (hi - lo) * i as f32 / (k - 1) as f32)
            .collect()
    })
}

/// Palettizes with the sorted table `table(group, weights)` gives each row group (on all
/// cores): entries are rounded to f16 first, so indices match the stored tables.
fn with_tables(
    w: &[f32],
    rows: usize,
    cols: usize,
    bits: u32,
    rows_per_lut: usize,
    table: impl Fn(usize, &[f32]) -> Vec<f32> + Sync,
) -> Palettized {
    assert!(bits == 2 || bits == 4, "palettes are 2- or 4-bit");
    let rows_per_lut = rows_per_lut.clamp(1, rows.max(1));
    let groups: Vec<(Vec<f16>, Vec<u8>)> = w
        .par_chunks(rows_per_lut * cols)
        .enumerate()
        .map(|(g, chunk)| {
            let lut: Vec<f16> = table(g, chunk).iter().map(|&c| f16::from_f32(c)).collect();
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

/// Checks a palettized `(rows, cols)` matrix's GGUF tensors: `bits`-wide indices packed
/// in u32 words, a table of 2^bits f16 levels per `rows_per_lut` rows.
pub fn check_gguf(
    (rows, cols): (usize, usize),
    bits: u32,
    rows_per_lut: usize,
    idx: &[u8],
    lut: &[u8],
) -> Result<()> {
    let groups = rows.div_ceil(rows_per_lut.max(1));
    if !matches!(bits, 2 | 4)
        || !cols.is_multiple_of(32)
        || idx.len() != rows * row_words(bits, cols) * 4
        || lut.len() != groups * (1usize << bits) * 2
    {
        return Err(Error::gguf(format!(
            "palettized {rows}x{cols} at {bits} bits: {} index bytes and {} table bytes do not fit",
            idx.len(),
            lut.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights shaped like a trained layer's: mostly small, a few large.
    fn weights(n: usize, seed: u64) -> Vec<f32> {
        let mut r = crate::rng::Rng::new(seed);
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
            let p = palettize(&w, rows, cols, bits, 16, 7, None);
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
    fn packed_words_and_tables_round_trip_through_gguf_bytes() {
        for bits in [2, 4] {
            let (rows, cols) = (21, 64);
            let p = palettize(&weights(rows * cols, 3), rows, cols, bits, 8, 1, None);
            let words = p.pack_indices();
            assert_eq!(words.len(), rows * row_words(bits, cols));
            let idx: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let lut: Vec<u8> = p.luts.iter().flat_map(|h| h.to_le_bytes()).collect();
            assert_eq!(
                Palettized::from_gguf(bits, (rows, cols), 8, &idx, &lut).unwrap(),
                p
            );
            assert!(Palettized::from_gguf(bits, (rows, cols), 8, &idx[4..], &lut).is_err());
            assert!(Palettized::from_gguf(bits, (rows, cols), 16, &idx, &lut).is_err());
        }
    }

    #[test]
    fn importance_weighting_favours_the_important_columns() {
        let (rows, cols) = (16, 64);
        // The unimportant columns are wide: unweighted tables spend entries on them.
        let mut w = weights(rows * cols, 4);
        w.iter_mut()
            .enumerate()
            .filter(|(i, _)| i % cols >= 8)
            .for_each(|(_, v)| *v = *v * 4.0 + 0.3);
        let mut imp = vec![0.01f32; cols];
        imp[..8].iter_mut().for_each(|v| *v = 100.0);
        let err = |p: &Palettized| {
            let d = p.dequantize();
            (0..rows * cols)
                .map(|i| imp[i % cols] as f64 * ((d[i] - w[i]) as f64).powi(2))
                .sum::<f64>()
        };
        let plain = palettize(&w, rows, cols, 2, 16, 1, None);
        let weighted = palettize(&w, rows, cols, 2, 16, 1, Some(&imp));
        assert!(
            err(&weighted) < err(&plain) * 0.7,
            "{} vs {}",
            err(&weighted),
            err(&plain)
        );
    }

    #[test]
    fn kmeans_is_never_worse_than_uniform_levels() {
        for (bits, seed) in [(2, 1), (4, 2), (4, 3)] {
            let (rows, cols) = (64, 128);
            let w = weights(rows * cols, seed);
            let km = palettize(&w, rows, cols, bits, 16, seed, None).mse(&w);
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
            palettize(&w, 32, 64, 4, 16, 5, None),
            palettize(&w, 32, 64, 4, 16, 5, None)
        );
        let three = [0.5f32, -1.0, 2.0].repeat(64);
        let p = palettize(&three, 3, 64, 2, 16, 1, None);
        assert_eq!(p.dequantize(), three);
    }
}
