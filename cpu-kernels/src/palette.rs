//! Palettized rows (2- or 4-bit indices into a table of 4 or 16 levels shared by a
//! group of rows) times 16-bit activations, in plain loops (natively, and the
//! reference `simd::palette` is tested against). The table is quantized once at load
//! to integers with one f32 scale (`Levels`), so a row's dot product is an integer
//! look-up and multiply-add per index, scaled once per 32-value activation block:
//! no row is decoded to f32.
//!
//! Index `j` of a row is bits `bits·(j mod 32/bits)` of word `j / (32/bits)`, low first
//! (`quant::palette::Palette::pack_indices`).

use crate::Acts;

/// The largest quantized level: a level is within 1/16382 of its table's largest
/// magnitude, and SIMD128's lanes, 8 products with 16-bit activations each, stay inside
/// i32 (8 · 8191 · 32767 < 2^31).
pub const LEVEL_MAX: f32 = 8191.0;

/// A table's levels as integers: level `i` ≈ `q[i] · scale`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Levels {
    pub q: [i16; 16],
    pub scale: f32,
}

impl Levels {
    /// `lut` (4 or 16 levels) quantized: its largest magnitude maps to `LEVEL_MAX`.
    pub fn new(lut: &[f32]) -> Levels {
        let amax = lut.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = amax / LEVEL_MAX;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        let mut q = [0i16; 16];
        for (o, &v) in q.iter_mut().zip(lut) {
            *o = (v * inv).round() as i16;
        }
        Levels { q, scale }
    }
}

/// `row · x` for a row of packed `bits`-bit indices (`words`, `bits` words per 32
/// values) into `lv`, and one token's activations.
pub fn dot(bits: u32, words: &[u32], lv: &Levels, x: Acts) -> f32 {
    let (per, mask) = (32 / bits as usize, (1u32 << bits) - 1);
    let mut acc = 0f32;
    for (b, ws) in words.chunks_exact(bits as usize).enumerate() {
        // 32 products may pass i32 (each < 2^28).
        let mut isum = 0i64;
        for (j, &xv) in x.q[b * 32..][..32].iter().enumerate() {
            let idx = (ws[j / per] >> ((j % per) as u32 * bits)) & mask;
            isum += (lv.q[idx as usize] as i32 * xv as i32) as i64;
        }
        acc += x.d[b] * isum as f32;
    }
    acc * lv.scale
}
