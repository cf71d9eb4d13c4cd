//! Dot products of quantized weight rows with activations quantized to 16 bits per
//! 32-value block: integer products summed per block, scaled in f32 (llama.cpp's
//! `vec_dot_*_q8` with 16-bit activations). 16 bits, not 8: wasm SIMD128 multiplies
//! 16-bit lanes (`i32x4.dot_i16x8_s`) whichever width the activations have, so 8-bit
//! ones would save no work here, while 16-bit ones keep the logits within 1e-2 of the
//! f32 reference (8-bit ones move them by up to ~1, enough to flip near-tie greedy
//! tokens). The K-quants (super-blocks of 256 with sub-block scales) apply their
//! integer scales and minimums per 16 or 32 values and f32 once per activation block
//! (`pippin_cpu_kernels::kquants`). With SIMD128 (the package build) the 4- and 8-bit
//! blocks and the K-quants use 128-bit lanes; elsewhere the same arithmetic in plain
//! loops, the reference the SIMD versions are tested against
//! (`pippin_cpu_kernels::fastest` chooses: nothing here asks where it runs).

use crate::quant::GgmlType;
use pippin_cpu_kernels::fastest;
pub use pippin_cpu_kernels::fastest::Format;
pub use pippin_cpu_kernels::palette::Levels;
pub use pippin_cpu_kernels::Acts;
use pippin_cpu_kernels::Lanes;

/// Activations quantized per 32 values: `q ≈ x / d`, and `s = d · Σq` per block
/// (the offset term of formats with a minimum or a bias).
#[derive(Clone, Debug, Default)]
pub struct Q16 {
    pub q: Vec<i16>,
    pub d: Vec<f32>,
    pub s: Vec<f32>,
    /// `d` and `s` by groups of four tokens (`pippin_cpu_kernels::lanes`), for the
    /// several-token kernels; empty until `with_lanes`.
    pub d4: Vec<f32>,
    pub s4: Vec<f32>,
}

/// The largest quantized magnitude: products with 8-bit weights summed over a block
/// stay far inside i32 (127 · 32767 · 32 < 2^28).
const QMAX: f32 = 32767.0;

impl Q16 {
    /// Quantizes `x` (a multiple of 32 long): each block's largest magnitude maps to
    /// `QMAX`.
    pub fn quantize(x: &[f32]) -> Q16 {
        let blocks = x.len() / 32;
        let mut out = Q16 {
            q: vec![0; x.len()],
            d: Vec::with_capacity(blocks),
            s: Vec::with_capacity(blocks),
            ..Default::default()
        };
        for (xb, qb) in x.chunks_exact(32).zip(out.q.chunks_exact_mut(32)) {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / QMAX;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            for (q, &v) in qb.iter_mut().zip(xb) {
                *q = (v * id).round() as i16;
                sum += *q as i32;
            }
            out.d.push(d);
            out.s.push(d * sum as f32);
        }
        out
    }

    /// These activations as several tokens of `cols` values each: their scales and
    /// sums also by groups of four tokens (what `dots` reads).
    pub fn with_lanes(mut self, cols: usize) -> Q16 {
        self.d4 = pippin_cpu_kernels::lanes(&self.d, cols / 32);
        self.s4 = pippin_cpu_kernels::lanes(&self.s, cols / 32);
        self
    }

    /// Every token's activations, as the kernels take them.
    pub fn acts(&self) -> Acts<'_> {
        Acts {
            q: &self.q,
            d: &self.d,
            s: &self.s,
        }
    }

    /// The scales and sums by groups of four tokens (`with_lanes`; empty before).
    fn lanes(&self) -> Lanes<'_> {
        Lanes {
            d: &self.d4,
            s: &self.s4,
        }
    }

    /// Token `token`'s row of `cols` values.
    pub fn row(&self, token: usize, cols: usize) -> Acts<'_> {
        self.acts().token(token, cols)
    }
}

/// The integer dot product's name for `ty`: the blocks of 32 and the K-quants; `None`
/// for the formats without one (decoded to f32 instead).
pub fn format(ty: GgmlType) -> Option<Format> {
    ty.format()
}

/// Formats with an integer dot product: the blocks of 32 and the K-quants.
pub fn has_int_dot(ty: GgmlType) -> bool {
    format(ty).is_some()
}

/// `row · x` for a row of `ty` blocks (`has_int_dot(ty)`; else 0), the fastest way
/// this build has (`pippin_cpu_kernels::fastest`).
pub fn dot(ty: GgmlType, row: &[u8], x: Acts) -> f32 {
    format(ty).map_or(0.0, |f| fastest::dot(f, row, x))
}

/// `row · x` in plain loops (the reference of the SIMD versions).
pub fn dot_scalar(ty: GgmlType, row: &[u8], x: Acts) -> f32 {
    format(ty).map_or(0.0, |f| fastest::plain_dot(f, row, x))
}

/// `row · x_t` into `out[t]` for the first `out.len()` tokens of `x` (rows of `cols`):
/// with SIMD each block of 32 is unpacked once for four tokens (prefill, a
/// speculative check; `x` made `with_lanes`), a K-quant super-block once for up to
/// eight (a speculative check). Each token's sum is `dot`'s, bit for
/// bit: the same products added in the same order (speculative decoding relies on it).
pub fn dots(f: Format, row: &[u8], x: &Q16, cols: usize, out: &mut [f32]) {
    fastest::dots(f, row, x.acts(), x.lanes(), cols, out)
}

/// Whether `dots` reads `f`'s activations by groups of four tokens (`with_lanes`).
pub fn wants_lanes(f: Format) -> bool {
    fastest::wants_lanes(f)
}

/// `row · x` for a palettized row (`bits`-bit indices packed in `words`) into the
/// table `lv`, in integers (`pippin_cpu_kernels::palette`).
pub fn palette(bits: u32, words: &[u32], lv: &Levels, x: Acts) -> f32 {
    fastest::palette(bits, words, lv, x)
}

/// `palette` in plain loops (the reference of the SIMD version).
pub fn palette_scalar(bits: u32, words: &[u32], lv: &Levels, x: Acts) -> f32 {
    pippin_cpu_kernels::palette::dot(bits, words, lv, x)
}

/// f32 dot product (vectorized by LLVM natively, SIMD128 in wasm).
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    fastest::dot_f32(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_activations_round_trip_within_half_a_step() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 19) as f32 - 9.0) * 0.3)
            .collect();
        let q = Q16::quantize(&x);
        for (i, &v) in x.iter().enumerate() {
            let d = q.d[i / 32];
            assert!((q.q[i] as f32 * d - v).abs() <= d * 0.5 + 1e-6, "{i}");
        }
        let zero = Q16::quantize(&[0.0; 32]);
        assert_eq!((zero.d[0], zero.s[0]), (0.0, 0.0));
    }
}
