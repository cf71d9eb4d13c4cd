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
//! loops, the reference the SIMD versions are tested against.

use crate::quant::GgmlType;
use pippin_cpu_kernels::kquants::KQuant;
pub use pippin_cpu_kernels::palette::Levels;
use pippin_cpu_kernels::Acts;

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

    /// The scales and sums by groups of four tokens (`with_lanes`).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn lanes(&self) -> pippin_cpu_kernels::Lanes<'_> {
        pippin_cpu_kernels::Lanes {
            d: &self.d4,
            s: &self.s4,
        }
    }

    /// Token `token`'s row of `cols` values.
    pub fn row(&self, token: usize, cols: usize) -> Row<'_> {
        let (b, n) = (token * cols / 32, cols / 32);
        Row {
            q: &self.q[token * cols..][..cols],
            d: &self.d[b..][..n],
            s: &self.s[b..][..n],
        }
    }
}

#[derive(Clone, Copy)]
pub struct Row<'a> {
    pub q: &'a [i16],
    pub d: &'a [f32],
    pub s: &'a [f32],
}

impl<'a> Row<'a> {
    fn acts(self) -> Acts<'a> {
        Acts {
            q: self.q,
            d: self.d,
            s: self.s,
        }
    }
}

/// Formats with an integer dot product: the blocks of 32 and the K-quants.
pub fn has_int_dot(ty: GgmlType) -> bool {
    kquant(ty).is_some()
        || matches!(
            ty,
            GgmlType::Q4_0
                | GgmlType::Q4_1
                | GgmlType::Q5_0
                | GgmlType::Q5_1
                | GgmlType::Q8_0
                | GgmlType::Iq4Nl
        )
}

/// Whether `ty` is a K-quant (super-blocks of 256).
pub fn is_kquant(ty: GgmlType) -> bool {
    kquant(ty).is_some()
}

/// The K-quant formats (super-blocks of 256: `pippin_cpu_kernels::kquants`).
fn kquant(ty: GgmlType) -> Option<KQuant> {
    Some(match ty {
        GgmlType::Q2K => KQuant::Q2K,
        GgmlType::Q3K => KQuant::Q3K,
        GgmlType::Q4K => KQuant::Q4K,
        GgmlType::Q5K => KQuant::Q5K,
        GgmlType::Q6K => KQuant::Q6K,
        _ => return None,
    })
}

/// `row · x` for a row of `ty` blocks (`has_int_dot(ty)`), fastest available way.
pub fn dot(ty: GgmlType, row: &[u8], x: Row) -> f32 {
    // With SIMD128 every type of `has_int_dot` has a SIMD kernel: the plain loops are
    // not linked into the engine (-6 KB of wasm).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        if let Some(b) = simd_block(ty) {
            return pippin_cpu_kernels::simd::blocks::dot(b, row, x.acts());
        }
        match kquant(ty) {
            Some(k) => pippin_cpu_kernels::simd::kquants::dot(k, row, x.acts()),
            None => 0.0,
        }
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    dot_scalar(ty, row, x)
}

/// `row · x_t` into `out[t]` for the first `out.len()` tokens of `x` (rows of `cols`):
/// with SIMD each block of 32 is unpacked once for four tokens (prefill, a
/// speculative check; `x` made `with_lanes`). Each token's sum is `dot`'s, bit for
/// bit: the same products added in the same order (speculative decoding relies on it).
pub fn dots(ty: GgmlType, row: &[u8], x: &Q16, cols: usize, out: &mut [f32]) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if let (true, true, Some(b)) = (out.len() > 1, !x.d4.is_empty(), simd_block(ty)) {
        return pippin_cpu_kernels::simd::blocks::dots(b, row, x.acts(), x.lanes(), cols, out);
    }
    for (t, o) in out.iter_mut().enumerate() {
        *o = dot(ty, row, x.row(t, cols));
    }
}

/// Whether `dots` reads `ty`'s activations by groups of four tokens (`with_lanes`):
/// the SIMD blocks of 32 only (K-quants and the plain loops take tokens one by one).
pub fn wants_lanes(ty: GgmlType) -> bool {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd_block(ty).is_some();
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        let _ = ty;
        false
    }
}

/// The blocks of 32 with a SIMD128 dot product (`pippin-cpu-kernels`): all of them.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn simd_block(ty: GgmlType) -> Option<pippin_cpu_kernels::simd::blocks::Block> {
    use pippin_cpu_kernels::simd::blocks::Block;
    Some(match ty {
        GgmlType::Q4_0 => Block::Q4_0,
        GgmlType::Q4_1 => Block::Q4_1,
        GgmlType::Q8_0 => Block::Q8_0,
        GgmlType::Q5_0 => Block::Q5_0,
        GgmlType::Q5_1 => Block::Q5_1,
        GgmlType::Iq4Nl => Block::Iq4Nl(&crate::quant::dequant::IQ4_NL_LEVELS),
        _ => return None,
    })
}

/// `row · x` in plain loops (the reference of the SIMD versions).
pub fn dot_scalar(ty: GgmlType, row: &[u8], x: Row) -> f32 {
    use pippin_cpu_kernels::dots;
    let acts = x.acts();
    if let Some(k) = kquant(ty) {
        return pippin_cpu_kernels::kquants::dot(k, row, acts);
    }
    match ty {
        GgmlType::Q4_0 => dots::q4_0(row, acts),
        GgmlType::Q4_1 => dots::q4_1(row, acts),
        GgmlType::Q5_0 => dots::q5_0(row, acts),
        GgmlType::Q5_1 => dots::q5_1(row, acts),
        GgmlType::Q8_0 => dots::q8_0(row, acts),
        GgmlType::Iq4Nl => dots::iq4_nl(row, acts),
        _ => 0.0,
    }
}

/// `row · x` for a palettized row (`bits`-bit indices packed in `words`) into the
/// table `lv`, in integers (`pippin_cpu_kernels::palette`).
pub fn palette(bits: u32, words: &[u32], lv: &Levels, x: Row) -> f32 {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        pippin_cpu_kernels::simd::palette::dot(bits, words, lv, x.acts())
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    palette_scalar(bits, words, lv, x)
}

/// `palette` in plain loops (the reference of the SIMD version).
pub fn palette_scalar(bits: u32, words: &[u32], lv: &Levels, x: Row) -> f32 {
    pippin_cpu_kernels::palette::dot(bits, words, lv, x.acts())
}

/// f32 dot product (vectorized by LLVM natively, SIMD128 in wasm).
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    crate::model::reference::dot(a, b)
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
