//! Quantizers for the block formats, used to make test tensors and converted files.
//! They follow GGML's reference (non-SIMD) quantizers. `random_blocks` makes valid
//! blocks of any decodable type with every bit pattern of its values, for tests.

use half::f16;

pub fn q8_0(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / 32 * 34);
    for blk in x.chunks(32) {
        let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend(blk.iter().map(|v| ((v * id).round() as i8) as u8));
    }
    out
}

pub fn q4_0(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / 32 * 18);
    for blk in x.chunks(32) {
        // The value of largest magnitude maps to -8, keeping its sign.
        let max = blk
            .iter()
            .fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
        out.extend((0..16).map(|j| q(blk[j]) | (q(blk[j + 16]) << 4)));
    }
    out
}

pub fn q4_1(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / 32 * 20);
    for blk in x.chunks(32) {
        let min = blk.iter().cloned().fold(f32::INFINITY, f32::min);
        let max = blk.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
        let q = |v: f32| (((v - min) * id + 0.5) as i32).clamp(0, 15) as u8;
        out.extend((0..16).map(|j| q(blk[j]) | (q(blk[j + 16]) << 4)));
    }
    out
}

pub fn f16s(x: &[f32]) -> Vec<u8> {
    x.iter()
        .flat_map(|v| f16::from_f32(*v).to_le_bytes())
        .collect()
}

pub fn f32s(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `n` random f16 values in [-1, 1], one in four subnormal.
fn random_halves(n: usize, rng: &mut crate::rng::Rng) -> Vec<u8> {
    (0..n)
        .flat_map(|_| {
            let v = match rng.next_u64() % 4 {
                0 => (1 + rng.next_u64() % 1023) as f32 * 2f32.powi(-24),
                _ => rng.next_f32() * 2.0 - 1.0,
            };
            f16::from_f32(v).to_le_bytes()
        })
        .collect()
}

/// `n` elements of type `ty` as random but valid blocks: every value and sub-scale
/// field random, the f16 scales small positive numbers (not NaN or infinite), so a
/// kernel test sees every bit pattern a real file can hold.
pub fn random_blocks(ty: super::GgmlType, n: usize, seed: u64) -> Vec<u8> {
    use super::GgmlType::*;
    let (per, bytes) = ty.block();
    let mut rng = crate::rng::Rng::new(seed);
    let mut out: Vec<u8> = (0..n / per as usize * bytes as usize)
        .map(|_| rng.next_u64() as u8)
        .collect();
    // The scales' range that keeps values O(1).
    let (format, lo, hi) = match (ty, ty.format()) {
        (Q8_0, Some(f)) => (f, 0.001, 0.01),
        (Q4K | Q5K, Some(f)) => (f, 0.0005, 0.005),
        (Q6K, Some(f)) => (f, 0.0005, 0.002),
        (_, Some(f)) => (f, 0.001, 0.02),
        (F16, _) => return random_halves(n, &mut rng),
        (F32, _) => {
            return (0..n)
                .flat_map(|_| (rng.next_f32() * 2.0 - 1.0).to_le_bytes())
                .collect()
        }
        (BF16, _) => {
            return (0..n)
                .flat_map(|_| half::bf16::from_f32(rng.next_f32() * 2.0 - 1.0).to_le_bytes())
                .collect()
        }
        _ => return out,
    };
    for block in out.chunks_exact_mut(bytes as usize) {
        // One scale in four is an f16 subnormal, as real files have them (Q6_K's
        // d nearly always): kernels must not flush them.
        format.test_scales(block, &mut || match rng.next_u64() % 4 {
            0 => (1 + rng.next_u64() % 1023) as f32 * 2f32.powi(-24),
            _ => lo + (hi - lo) * rng.next_f32(),
        });
    }
    out
}
