//! CPU dequantization of GGML tensors: sizes checked, then each block decoded by its
//! format (`pippin_cpu_kernels::blocks32::Format`), exactly as ggml's reference `dequantize_row_*`
//! functions compute it (bit-identical to ggml's: the ground truth for the kernels).
//! The block decoders live in that crate to be compiled for speed in the
//! size-optimized browser build, where the CPU backend decodes K-quant rows with them.

use super::GgmlType;
use crate::error::{Error, Result};
use half::bf16;
use pippin_cpu_kernels::ggml::le_f16;

// Where the rest of the engine looks for them.
pub use pippin_cpu_kernels::ggml::{k4_scale_min, q3_k_scales, IQ4_NL_LEVELS};

/// A GGUF tensor's bytes decoded to f32 (an error names the tensor).
pub fn dequantize_tensor(t: &crate::gguf::TensorInfo, bytes: &[u8]) -> Result<Vec<f32>> {
    let n = usize::try_from(t.n_elements)
        .map_err(|_| Error::unsupported(format!("tensor {:?} is too large", t.name)))?;
    dequantize(t.ty, bytes, n).map_err(|e| Error::unsupported(format!("tensor {:?}: {e}", t.name)))
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
    if let Some(f) = ty.format() {
        f.decode(data, out);
        return Ok(());
    }
    let (per, bytes) = ty.block();
    let blocks = out
        .chunks_exact_mut(per as usize)
        .zip(data.chunks_exact(bytes as usize));
    match ty {
        GgmlType::F32 => {
            blocks.for_each(|(o, b)| o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        GgmlType::F16 => blocks.for_each(|(o, b)| o[0] = le_f16(b)),
        GgmlType::BF16 => {
            blocks.for_each(|(o, b)| o[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32())
        }
        other => {
            return Err(Error::unsupported(format!(
                "tensor type {other} cannot be decoded (supported: {})",
                super::GgmlType::decodable()
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

#[cfg(test)]
mod tests {
    use super::super::encode;
    use super::*;
    use half::f16;

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
            crate::testing::assert_close(ty.name(), &y, &x, tol);
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
    fn q5_high_bits_come_from_qh_bit_e() {
        // d = 1, all nibbles 0, qh = only bit 20: element 20 is 16 - 16 = 0, the rest -16.
        let mut b = f16::from_f32(1.0).to_le_bytes().to_vec();
        b.extend_from_slice(&(1u32 << 20).to_le_bytes());
        b.extend([0u8; 16]);
        let y = dequantize(GgmlType::Q5_0, &b, 32).unwrap();
        for (e, v) in y.iter().enumerate() {
            assert_eq!(*v, if e == 20 { 0.0 } else { -16.0 }, "element {e}");
        }
    }

    #[test]
    fn q6_k_places_each_value() {
        // d = 1, every scale 1, ql and qh zero except the bits of one element: that
        // element decodes to 63 - 32 = 31, all others to -32.
        for e in [0usize, 17, 40, 77, 100, 128, 200, 255] {
            let mut b = vec![0u8; 210];
            let (h, k, l) = (e / 128, (e % 128) / 32, e % 32);
            b[64 * h + 32 * (k % 2) + l] |= 0x0f << (4 * (k / 2));
            b[128 + 32 * h + l] |= 3 << (2 * k);
            b[192..208].fill(1);
            b[208..210].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
            let y = dequantize(GgmlType::Q6K, &b, 256).unwrap();
            for (i, v) in y.iter().enumerate() {
                assert_eq!(*v, if i == e { 31.0 } else { -32.0 }, "e {e}, i {i}");
            }
        }
    }

    #[test]
    fn k4_scales_unpack_six_bits() {
        // Sub-blocks 0..4 read the low 6 bits of bytes 0..8; 4..8 combine byte j + 4
        // with the top bits of bytes j - 4 and j.
        let mut q = [0u8; 12];
        q[0] = 0b11_000101; // sc0 = 5, top bits 3 → sc4's high bits
        q[4] = 0b01_000111; // m0 = 7, top bits 1 → m4's high bits
        q[8] = 0x92; // sc4 low nibble 2, m4 low nibble 9
        assert_eq!(k4_scale_min(0, &q), (5, 7));
        assert_eq!(k4_scale_min(4, &q), (2 | 3 << 4, 9 | 1 << 4));
    }

    #[test]
    fn wrong_size_and_unknown_types_are_errors() {
        assert!(dequantize(GgmlType::Q8_0, &[0; 33], 32).is_err());
        assert!(dequantize(GgmlType::Q4K, &[0; 143], 256).is_err());
        let e = dequantize(GgmlType::Iq2Xxs, &[0; 66], 256).unwrap_err();
        assert!(e.to_string().contains("IQ2_XXS"), "{e}");
    }
}
