//! CPU dequantization of GGML blocks, exactly as ggml's reference `dequantize_row_*`
//! functions compute it (same operations in the same order, f32 throughout), so the
//! result is bit-identical to ggml's and serves as the ground truth for the kernels.

use super::GgmlType;
use crate::error::{Error, Result};
use half::{bf16, f16};

/// IQ4_NL's 16 non-linear levels (ggml's `kvalues_iq4nl`).
pub const IQ4_NL_LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

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
        GgmlType::Q8_0 => blocks.for_each(|(o, b)| q8_0(b, o)),
        GgmlType::Q4_0 => blocks.for_each(|(o, b)| q4_0(b, o)),
        GgmlType::Q4_1 => blocks.for_each(|(o, b)| q4_1(b, o)),
        GgmlType::Q5_0 => blocks.for_each(|(o, b)| q5_0(b, o)),
        GgmlType::Q5_1 => blocks.for_each(|(o, b)| q5_1(b, o)),
        GgmlType::Iq4Nl => blocks.for_each(|(o, b)| iq4_nl(b, o)),
        GgmlType::Q2K => blocks.for_each(|(o, b)| q2_k(b, o)),
        GgmlType::Q3K => blocks.for_each(|(o, b)| q3_k(b, o)),
        GgmlType::Q4K => blocks.for_each(|(o, b)| q4_k(b, o)),
        GgmlType::Q5K => blocks.for_each(|(o, b)| q5_k(b, o)),
        GgmlType::Q6K => blocks.for_each(|(o, b)| q6_k(b, o)),
        other => {
            return Err(Error::unsupported(format!(
                "tensor type {other} cannot be decoded (supported: {})",
                super::DECODABLE
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

fn q8_0(b: &[u8], o: &mut [f32]) {
    let d = le_f16(&b[0..2]);
    for (x, &q) in o.iter_mut().zip(&b[2..34]) {
        *x = (q as i8) as f32 * d;
    }
}

/// Low nibbles are elements 0..16, high nibbles 16..32 (all 32-blocks of 4 bits).
fn q4_0(b: &[u8], o: &mut [f32]) {
    let d = le_f16(&b[0..2]);
    for (j, &q) in b[2..18].iter().enumerate() {
        o[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
        o[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

fn q4_1(b: &[u8], o: &mut [f32]) {
    let (d, m) = (le_f16(&b[0..2]), le_f16(&b[2..4]));
    for (j, &q) in b[4..20].iter().enumerate() {
        o[j] = (q & 0x0f) as f32 * d + m;
        o[j + 16] = (q >> 4) as f32 * d + m;
    }
}

/// 5-bit values: the nibbles of Q4, plus bit e of the 32-bit `qh` for element e.
fn five_bits(qh: &[u8], qs: &[u8]) -> [i32; 32] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut v = [0i32; 32];
    for (j, &q) in qs.iter().enumerate() {
        v[j] = ((q & 0x0f) as u32 | ((qh >> j) << 4 & 0x10)) as i32;
        v[j + 16] = ((q >> 4) as u32 | ((qh >> (j + 12)) & 0x10)) as i32;
    }
    v
}

fn q5_0(b: &[u8], o: &mut [f32]) {
    let d = le_f16(&b[0..2]);
    for (x, q) in o.iter_mut().zip(five_bits(&b[2..6], &b[6..22])) {
        *x = (q - 16) as f32 * d;
    }
}

fn q5_1(b: &[u8], o: &mut [f32]) {
    let (d, m) = (le_f16(&b[0..2]), le_f16(&b[2..4]));
    for (x, q) in o.iter_mut().zip(five_bits(&b[4..8], &b[8..24])) {
        *x = q as f32 * d + m;
    }
}

fn iq4_nl(b: &[u8], o: &mut [f32]) {
    let d = le_f16(&b[0..2]);
    for (j, &q) in b[2..18].iter().enumerate() {
        o[j] = d * IQ4_NL_LEVELS[(q & 0x0f) as usize] as f32;
        o[j + 16] = d * IQ4_NL_LEVELS[(q >> 4) as usize] as f32;
    }
}

/// Q2_K: scales[16] (4-bit scale | 4-bit min << 4 per 16 values), qs[64], d, dmin.
/// Value e of the super-block: bits 2·((e % 128) / 32) of qs[32·(e / 128) + e % 32].
fn q2_k(b: &[u8], o: &mut [f32]) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, min) = (le_f16(&b[80..82]), le_f16(&b[82..84]));
    for (e, x) in o.iter_mut().enumerate() {
        let sc = scales[e / 16];
        let (dl, ml) = (d * (sc & 0x0f) as f32, min * (sc >> 4) as f32);
        let q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        *x = dl * q as f32 - ml;
    }
}

/// Q3_K's sixteen 6-bit scales, unpacked from their 12 bytes (ggml's kmask shuffle).
pub fn q3_k_scales(packed: &[u8]) -> [i8; 16] {
    let mut s = [0i8; 16];
    for (j, v) in s.iter_mut().enumerate() {
        let low = if j < 8 {
            packed[j] & 0x0f
        } else {
            packed[j - 8] >> 4
        };
        let high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        *v = (low | high << 4) as i8 - 32;
    }
    s
}

/// Q3_K: hmask[32], qs[64], scales[12], d. Value e: low 2 bits as Q2_K's, the third
/// from bit (e / 32) of hmask[e % 32]; a clear bit means the value is 4 lower.
fn q3_k(b: &[u8], o: &mut [f32]) {
    let (hmask, qs) = (&b[0..32], &b[32..96]);
    let scales = q3_k_scales(&b[96..108]);
    let d_all = le_f16(&b[108..110]);
    for (e, x) in o.iter_mut().enumerate() {
        let dl = d_all * scales[e / 16] as f32;
        let low = ((qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) as i8;
        let high = hmask[e % 32] & (1 << (e / 32)) != 0;
        *x = dl * (low - if high { 0 } else { 4 }) as f32;
    }
}

/// Q4_K/Q5_K: the 6-bit scale and min of 32-value sub-block `j` (ggml's
/// `get_scale_min_k4`).
pub fn k4_scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q4_K: d, dmin, scales[12], qs[128]: value 64i + l (l < 32) is the low nibble of
/// qs[32i + l], value 64i + 32 + l its high nibble.
fn q4_k(b: &[u8], o: &mut [f32]) {
    let (d, min) = (le_f16(&b[0..2]), le_f16(&b[2..4]));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for (j, sub) in o.chunks_exact_mut(32).enumerate() {
        let (sc, m) = k4_scale_min(j, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let q = &qs[32 * (j / 2)..][..32];
        let shift = 4 * (j % 2);
        for (x, &q) in sub.iter_mut().zip(q) {
            *x = d1 * ((q >> shift) & 0x0f) as f32 - m1;
        }
    }
}

/// Q5_K: Q4_K's layout plus qh[32]: bit j of qh[l] is the fifth bit of value 32j + l.
fn q5_k(b: &[u8], o: &mut [f32]) {
    let (d, min) = (le_f16(&b[0..2]), le_f16(&b[2..4]));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for (j, sub) in o.chunks_exact_mut(32).enumerate() {
        let (sc, m) = k4_scale_min(j, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let q = &qs[32 * (j / 2)..][..32];
        let shift = 4 * (j % 2);
        for (l, x) in sub.iter_mut().enumerate() {
            let high = if qh[l] & (1 << j) != 0 { 16 } else { 0 };
            *x = d1 * (((q[l] >> shift) & 0x0f) + high) as f32 - m1;
        }
    }
}

/// Q6_K: ql[128], qh[64], scales[16] (i8), d. In each half of 128 values, value
/// 32k + l takes the nibble k / 2 of ql[64h + 32(k % 2) + l] and bits 2k of
/// qh[32h + l]; its scale is scales[e / 16].
fn q6_k(b: &[u8], o: &mut [f32]) {
    let (ql, qh) = (&b[0..128], &b[128..192]);
    let d = le_f16(&b[208..210]);
    for (e, x) in o.iter_mut().enumerate() {
        let (h, k, l) = (e / 128, (e % 128) / 32, e % 32);
        let low = (ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0f;
        let high = (qh[32 * h + l] >> (2 * k)) & 3;
        let q = (low | high << 4) as i8 - 32;
        *x = d * (b[192 + e / 16] as i8) as f32 * q as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::super::encode;
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
