//! GGML's K-quant super-blocks decoded to f32, block by block, exactly as ggml's
//! reference `dequantize_row_*` functions compute them (same operations in the same
//! order, f32 throughout): bit-identical to ggml's, the ground truth for every kernel
//! (the blocks of 32 decode in `blocks32`, each with its type). The engine's
//! `quant::dequant` checks sizes and walks a tensor's blocks through `Format::decode`.

use half::f16;

/// IQ4_NL's 16 non-linear levels (ggml's `kvalues_iq4nl`).
pub const IQ4_NL_LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// A little-endian f16 at the start of `b`. (Inline: `quant::dequant` calls it per
/// F16 element, across the crate boundary, without LTO natively.)
#[inline]
pub fn le_f16(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Q2_K: scales[16] (4-bit scale | 4-bit min << 4 per 16 values), qs[64], d, dmin.
/// Value e of the super-block: bits 2·((e % 128) / 32) of qs[32·(e / 128) + e % 32].
/// One `Q2_K` block `b` into `o`.
pub fn q2_k(b: &[u8], o: &mut [f32]) {
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
/// One `Q3_K` block `b` into `o`.
pub fn q3_k(b: &[u8], o: &mut [f32]) {
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
/// One `Q4_K` block `b` into `o`.
pub fn q4_k(b: &[u8], o: &mut [f32]) {
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
/// One `Q5_K` block `b` into `o`.
pub fn q5_k(b: &[u8], o: &mut [f32]) {
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
/// One `Q6_K` block `b` into `o`.
pub fn q6_k(b: &[u8], o: &mut [f32]) {
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
