//! Weight formats: the GGML tensor types Pippin knows, their block layout, and CPU
//! dequantization (the ground truth the GPU kernels are tested against).

pub mod gpu_layout;
pub mod kv;
pub mod palette;

use crate::error::{Error, Result};
use half::{bf16, f16};

/// GGML tensor types by their on-disk id. Only the ones whose layout we know are listed;
/// any other id is rejected by the GGUF reader with its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    I8,
    I16,
    I32,
    I64,
    F64,
    BF16,
}

impl GgmlType {
    pub fn from_id(id: u32) -> Option<Self> {
        use GgmlType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            30 => BF16,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2K => 10,
            Q3K => 11,
            Q4K => 12,
            Q5K => 13,
            Q6K => 14,
            Q8K => 15,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            BF16 => 30,
        }
    }

    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            BF16 => "BF16",
        }
    }

    /// (elements per block, bytes per block).
    pub fn block(self) -> (u64, u64) {
        use GgmlType::*;
        match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2K => (256, 84),
            Q3K => (256, 110),
            Q4K => (256, 144),
            Q5K => (256, 176),
            Q6K => (256, 210),
            Q8K => (256, 292),
        }
    }

    /// Bytes taken by `n` elements, or `None` when `n` is not a whole number of blocks
    /// or the size overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let (per, bytes) = self.block();
        if !n.is_multiple_of(per) {
            return None;
        }
        (n / per).checked_mul(bytes)
    }

    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        matches!(self, F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn le_f16(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Dequantizes `data` (whole blocks of type `ty`) into `out`, which must hold exactly
/// the number of elements the data encodes.
pub fn dequantize_into(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<()> {
    let n = out.len() as u64;
    if ty.bytes_for(n) != Some(data.len() as u64) {
        return Err(Error::invalid(format!(
            "{ty}: {} bytes do not hold {n} elements",
            data.len()
        )));
    }
    match ty {
        GgmlType::F32 => {
            for (o, b) in out.iter_mut().zip(data.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, b) in out.iter_mut().zip(data.chunks_exact(2)) {
                *o = le_f16(b);
            }
        }
        GgmlType::BF16 => {
            for (o, b) in out.iter_mut().zip(data.chunks_exact(2)) {
                *o = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        GgmlType::Q8_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(data.chunks_exact(34)) {
                let d = le_f16(&b[0..2]);
                for (x, &q) in o.iter_mut().zip(&b[2..34]) {
                    *x = (q as i8) as f32 * d;
                }
            }
        }
        GgmlType::Q4_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(data.chunks_exact(18)) {
                let d = le_f16(&b[0..2]);
                // Low nibbles are elements 0..16, high nibbles 16..32.
                for (j, &q) in b[2..18].iter().enumerate() {
                    o[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
                    o[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
                }
            }
        }
        GgmlType::Q4_1 => {
            for (o, b) in out.chunks_exact_mut(32).zip(data.chunks_exact(20)) {
                let d = le_f16(&b[0..2]);
                let m = le_f16(&b[2..4]);
                for (j, &q) in b[4..20].iter().enumerate() {
                    o[j] = (q & 0x0f) as f32 * d + m;
                    o[j + 16] = (q >> 4) as f32 * d + m;
                }
            }
        }
        other => {
            return Err(Error::unsupported(format!(
                "tensor type {other} cannot be dequantized yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)"
            )))
        }
    }
    Ok(())
}

pub fn dequantize(ty: GgmlType, data: &[u8], n: usize) -> Result<Vec<f32>> {
    let mut out = vec![0f32; n];
    dequantize_into(ty, data, &mut out)?;
    Ok(out)
}

/// Quantizers for the block formats, used to make test tensors and converted files.
/// They follow GGML's reference (non-SIMD) quantizers.
pub mod encode {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect()
    }

    #[test]
    fn block_round_trips_are_close() {
        let x = ramp(96);
        let cases: [(GgmlType, Vec<u8>, f32); 5] = [
            (GgmlType::Q8_0, encode::q8_0(&x), 0.02),
            (GgmlType::Q4_0, encode::q4_0(&x), 0.3),
            (GgmlType::Q4_1, encode::q4_1(&x), 0.3),
            (GgmlType::F16, encode::f16s(&x), 1e-3),
            (GgmlType::F32, encode::f32s(&x), 0.0),
        ];
        for (ty, bytes, tol) in cases {
            let y = dequantize(ty, &bytes, x.len()).unwrap();
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() <= tol, "{ty}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn q4_1_layout_is_low_nibbles_first() {
        // d = 1, m = -8: nibble q decodes to q - 8.
        let mut b = vec![];
        b.extend_from_slice(&f16::from_f32(1.0).to_le_bytes());
        b.extend_from_slice(&f16::from_f32(-8.0).to_le_bytes());
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = dequantize(GgmlType::Q4_1, &b, 32).unwrap();
        assert_eq!(y[0], -8.0);
        assert_eq!(y[15], 7.0);
        assert_eq!(y[16], 7.0);
        assert_eq!(y[31], -8.0);
    }

    #[test]
    fn wrong_size_is_an_error() {
        assert!(dequantize(GgmlType::Q8_0, &[0; 33], 32).is_err());
        assert!(dequantize(GgmlType::Q4K, &[0; 144], 256).is_err());
    }
}
