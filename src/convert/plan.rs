//! Calibration and the mixed 2/4-bit plan. On a calibration text the CPU reference
//! records (a) each matmul input's second moments H = XᵀX/n: its diagonal is the
//! importance the k-means is weighted by, the whole is what GPTQ-style error feedback
//! needs (`gptq`), and (b) on the first tokens, the hidden states entering each layer,
//! so that the sensitivity of one matrix (the KL divergence of the model's next-token
//! distributions when only that matrix goes to 2 bits) costs a run of the layers from
//! its own on, not of the whole model.

use super::gptq;
use crate::error::{Error, Result};
use crate::model::reference::{KvCache, Reference, Site};
use crate::model::Proj;
use crate::quant::palette::{bits_per_weight, palettize, Palettized};
use rayon::prelude::*;
use std::collections::HashMap;

/// Which input a layer matrix reads.
pub fn site(p: Proj) -> Site {
    match p {
        Proj::Q | Proj::K | Proj::V => Site::Attention,
        Proj::O => Site::AttentionOutput,
        Proj::Gate | Proj::Up => Site::Ffn,
        Proj::Down => Site::FfnDown,
    }
}

pub struct Calibration {
    /// Tokens the sensitivities are measured on.
    pub tokens: usize,
    /// Mean square of each input column, per (layer, site).
    pub importance: HashMap<(usize, Site), Vec<f32>>,
    /// GPTQ's factor of each site's inverse Hessian (when error feedback is on).
    pub factors: HashMap<(usize, Site), Vec<f32>>,
    /// Hidden states entering each layer, `[tokens][hidden]`.
    layer_inputs: Vec<Vec<f32>>,
    /// The unchanged model's log-probabilities, `[tokens][vocab]`.
    base: Vec<f32>,
}

fn log_softmax(row: &mut [f32]) {
    let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f32>().ln();
    row.iter_mut().for_each(|v| *v -= lse);
}

impl Calibration {
    /// Runs the model over `tokens`; sensitivities will use the first
    /// `sensitivity_tokens` of them. With `error_feedback`, every site's Hessian is
    /// factored for GPTQ.
    pub fn run(
        r: &Reference,
        tokens: &[u32],
        sensitivity_tokens: usize,
        error_feedback: bool,
    ) -> Result<Calibration> {
        let c = &r.config;
        if tokens.len() < 2 {
            return Err(Error::invalid(
                "the calibration text needs at least 2 tokens",
            ));
        }
        let n = tokens.len();
        let ns = sensitivity_tokens.clamp(2, n);
        let mut x = r.embed(tokens)?;
        let mut cache = KvCache::new(c);
        let mut hessians: HashMap<(usize, Site), Vec<f32>> = HashMap::new();
        let mut importance = HashMap::new();
        let mut layer_inputs = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            layer_inputs.push(x[..ns * c.hidden].to_vec());
            r.layers(l..l + 1, &mut x, &mut cache, &mut |l, s, input| {
                let width = input.len() / n;
                if error_feedback {
                    let h = gptq::hessian(input, width);
                    importance.insert((l, s), (0..width).map(|i| h[i * width + i]).collect());
                    hessians.insert((l, s), h);
                } else {
                    let mut acc = vec![0f32; width];
                    for row in input.chunks_exact(width) {
                        acc.iter_mut()
                            .zip(row)
                            .for_each(|(a, v)| *a += v * v / n as f32);
                    }
                    importance.insert((l, s), acc);
                }
            })?;
        }
        let factors = hessians
            .into_par_iter()
            .map(|(key, h)| {
                let dim = importance[&key].len();
                gptq::inverse_factor(&h, dim).map(|u| (key, u))
            })
            .collect::<Result<HashMap<_, _>>>()?;
        let mut base = r.logits(&x[..ns * c.hidden], true);
        base.par_chunks_mut(c.vocab_size).for_each(log_softmax);
        Ok(Calibration {
            tokens: ns,
            importance,
            factors,
            layer_inputs,
            base,
        })
    }

    /// Mean KL(base ‖ r) over the calibration positions, for a model that differs
    /// from the calibrated one only from layer `from` on.
    pub fn divergence(&self, r: &Reference, from: usize) -> Result<f64> {
        let c = &r.config;
        let mut x = self.layer_inputs[from].clone();
        let mut cache = KvCache::new(c);
        r.layers(from..c.n_layers, &mut x, &mut cache, &mut |_, _, _| {})?;
        let mut logits = r.logits(&x, true);
        let total: f64 = logits
            .par_chunks_mut(c.vocab_size)
            .zip(self.base.par_chunks(c.vocab_size))
            .map(|(q, p)| {
                log_softmax(q);
                p.iter()
                    .zip(q.iter())
                    .map(|(&lp, &lq)| (lp.exp() * (lp - lq)) as f64)
                    .sum::<f64>()
            })
            .sum();
        Ok(total / self.tokens as f64)
    }
}

/// Matrix `m` of layer `l` palettized to `bits`: importance-weighted k-means, then
/// GPTQ-style index assignment when the calibration has the factors.
pub fn quantize(
    w: &[f32],
    (rows, cols): (usize, usize),
    bits: u32,
    rows_per_lut: usize,
    seed: u64,
    cal: Option<&Calibration>,
    (l, m): (usize, usize),
) -> Palettized {
    let key = (l, site(Proj::ALL[m]));
    let imp = cal.and_then(|c| c.importance.get(&key)).map(Vec::as_slice);
    let mut p = palettize(w, rows, cols, bits, rows_per_lut, seed, imp);
    if let Some(u) = cal.and_then(|c| c.factors.get(&key)) {
        gptq::assign(&mut p, w, u);
    }
    p
}

/// Each layer matrix's sensitivity (`[layer][MATRICES]` flattened): the divergence
/// when only it is palettized to 2 bits.
pub fn sensitivities(
    r: &mut Reference,
    cal: &Calibration,
    rows_per_lut: usize,
    seed: u64,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<f64>> {
    let c = r.config.clone();
    let mut out = Vec::with_capacity(c.n_layers * Proj::ALL.len());
    for l in 0..c.n_layers {
        for (m, p) in Proj::ALL.into_iter().enumerate() {
            let shape = p.shape(&c);
            let w = r.weights.layers[l].proj_mut(p);
            let pal = quantize(w, shape, 2, rows_per_lut, seed, Some(cal), (l, m));
            let original = std::mem::replace(w, pal.dequantize());
            out.push(cal.divergence(r, l)?);
            *r.weights.layers[l].proj_mut(p) = original;
        }
        let row = &out[l * Proj::ALL.len()..];
        log(&format!(
            "sensitivity layer {l:2}: {}",
            row.iter()
                .map(|s| format!("{s:.4}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    Ok(out)
}

/// 2 or 4 bits for each matrix (`shapes` = rows, cols), so that their average bits per
/// weight (tables included) reaches `target_bpw` while the summed sensitivity of the
/// 2-bit ones stays small: matrices go to 2 bits in order of sensitivity per bit saved.
pub fn choose(
    shapes: &[(usize, usize)],
    sens: &[f64],
    target_bpw: f64,
    rows_per_lut: &dyn Fn(u32) -> usize,
) -> Vec<u32> {
    let cost = |i: usize, bits: u32| {
        let (r, c) = shapes[i];
        bits_per_weight(bits, r, c, rows_per_lut(bits)) * (r * c) as f64
    };
    let weights: f64 = shapes.iter().map(|(r, c)| (r * c) as f64).sum();
    let mut bits = vec![4u32; shapes.len()];
    let mut total: f64 = (0..shapes.len()).map(|i| cost(i, 4)).sum();
    let mut order: Vec<usize> = (0..shapes.len()).collect();
    let per_bit = |i: usize| sens[i] / (cost(i, 4) - cost(i, 2));
    order.sort_by(|&a, &b| per_bit(a).total_cmp(&per_bit(b)));
    for i in order {
        if total / weights <= target_bpw {
            break;
        }
        total -= cost(i, 4) - cost(i, 2);
        bits[i] = 2;
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_sensitive_go_to_two_bits_until_the_target() {
        let shapes = [(64, 64); 4];
        let sens = [0.5, 0.01, 0.2, 0.02];
        // 4.25 and 2.06 bits per weight with tables: two of four at 2 bits give 3.16.
        let bits = choose(&shapes, &sens, 3.2, &|_| 16);
        assert_eq!(bits, vec![4, 2, 4, 2]);
        assert_eq!(choose(&shapes, &sens, 4.5, &|_| 16), vec![4; 4]);
        assert_eq!(choose(&shapes, &sens, 1.0, &|_| 16), vec![2; 4]);
        // A table per 2-bit row: 2 + 64/64 = 3 bits per weight, so two at 2 bits
        // average 3.625, three 3.3125: a target of 3.4 takes three.
        let per_row = |b: u32| if b == 2 { 1 } else { 16 };
        assert_eq!(choose(&shapes, &sens, 3.4, &per_row), vec![4, 2, 2, 2]);
    }
}
