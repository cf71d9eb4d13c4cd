//! Integer dot products of K-quant rows (super-blocks of 256 weights) with activations
//! quantized to 16 bits per 32 values, in plain loops: natively LLVM vectorizes them,
//! and they are the reference `simd::kquants` is tested against.
//!
//! Every K-quant weight is `d·sc·q − dmin·m` with small integers `q` (2–6 bits),
//! `sc` and `m` per sub-block of 16 or 32 values and f32 `d`, `dmin` per super-block.
//! So a 32-value activation block `b` (scale `dx`) contributes
//! `dx·(d·Σ_sub sc·Σ q·x − dmin·Σ_sub m·Σ x)`: integer sums per 16 values, scaled
//! once per sub-block, and f32 once per activation block. A super-block is first
//! unpacked into `Super` (256 small integers and 16 scale/min pairs) once, then read by
//! every token multiplied with it (prefill).

use crate::ggml::{k4_scale_min, le_f16, q3_k_scales};
use crate::Acts;

/// A K-quant format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KQuant {
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
}

impl KQuant {
    /// GGML's name.
    pub fn name(self) -> &'static str {
        match self {
            KQuant::Q2K => "Q2_K",
            KQuant::Q3K => "Q3_K",
            KQuant::Q4K => "Q4_K",
            KQuant::Q5K => "Q5_K",
            KQuant::Q6K => "Q6_K",
        }
    }

    /// GGML's type id.
    pub fn ggml_id(self) -> u32 {
        match self {
            KQuant::Q2K => 10,
            KQuant::Q3K => 11,
            KQuant::Q4K => 12,
            KQuant::Q5K => 13,
            KQuant::Q6K => 14,
        }
    }

    /// Byte offsets of a super-block's f16 fields (d, dmin).
    pub fn halves(self) -> &'static [usize] {
        match self {
            KQuant::Q2K => &[80, 82],
            KQuant::Q3K => &[108],
            KQuant::Q4K | KQuant::Q5K => &[0, 2],
            KQuant::Q6K => &[208],
        }
    }

    /// Words of the GPU's packed values per block of 32 (`quant::gpu_layout`).
    pub fn gpu_words(self) -> usize {
        match self {
            KQuant::Q2K => 2,
            KQuant::Q3K => 3,
            KQuant::Q4K => 4,
            KQuant::Q5K => 5,
            KQuant::Q6K => 6,
        }
    }

    /// Super-block `b` decoded into `o` (256 values), as ggml does.
    pub fn decode(self, b: &[u8], o: &mut [f32]) {
        use crate::ggml;
        match self {
            KQuant::Q2K => ggml::q2_k(b, o),
            KQuant::Q3K => ggml::q3_k(b, o),
            KQuant::Q4K => ggml::q4_k(b, o),
            KQuant::Q5K => ggml::q5_k(b, o),
            KQuant::Q6K => ggml::q6_k(b, o),
        }
    }

    /// Bytes per super-block of 256 weights.
    pub fn bytes(self) -> usize {
        match self {
            KQuant::Q2K => 84,
            KQuant::Q3K => 110,
            KQuant::Q4K => 144,
            KQuant::Q5K => 176,
            KQuant::Q6K => 210,
        }
    }

    /// Whether weights have a minimum subtracted (`dmin·m`).
    pub fn has_mins(self) -> bool {
        matches!(self, KQuant::Q2K | KQuant::Q4K | KQuant::Q5K)
    }
}

/// One super-block unpacked: weight `e` is `d·sc[e/16]·w[e] − dmin·mn[e/16]` (`w` in
/// 16 bits: natively the products then vectorize as 16-bit multiply-adds).
#[derive(Clone, Debug)]
pub struct Super {
    pub w: [i16; 256],
    pub sc: [i16; 16],
    pub mn: [i16; 16],
    pub d: f32,
    pub dmin: f32,
}

impl Default for Super {
    fn default() -> Super {
        Super {
            w: [0; 256],
            sc: [0; 16],
            mn: [0; 16],
            d: 0.0,
            dmin: 0.0,
        }
    }
}

/// The scales and minimums of a super-block (the `Super` fields but `w`), its f16
/// factors read by `half` (the SIMD kernels read a table, and unpack the weights in
/// registers themselves).
#[inline(always)]
pub fn scales(ty: KQuant, b: &[u8], s: &mut Super, half: impl Fn(&[u8]) -> f32) {
    match ty {
        KQuant::Q2K => {
            for (j, &v) in b[0..16].iter().enumerate() {
                (s.sc[j], s.mn[j]) = ((v & 15) as i16, (v >> 4) as i16);
            }
            (s.d, s.dmin) = (half(&b[80..]), half(&b[82..]));
        }
        KQuant::Q3K => {
            for (o, v) in s.sc.iter_mut().zip(q3_k_scales(&b[96..108])) {
                *o = v as i16;
            }
            (s.mn, s.d, s.dmin) = ([0; 16], half(&b[108..]), 0.0);
        }
        KQuant::Q4K | KQuant::Q5K => {
            for j in 0..8 {
                let (sc, m) = k4_scale_min(j, &b[4..16]);
                (s.sc[2 * j], s.sc[2 * j + 1]) = (sc as i16, sc as i16);
                (s.mn[2 * j], s.mn[2 * j + 1]) = (m as i16, m as i16);
            }
            (s.d, s.dmin) = (half(b), half(&b[2..]));
        }
        KQuant::Q6K => {
            for (o, &v) in s.sc.iter_mut().zip(&b[192..208]) {
                *o = v as i8 as i16;
            }
            (s.mn, s.d, s.dmin) = ([0; 16], half(&b[208..]), 0.0);
        }
    }
}

/// Unpacks super-block `b` of `ty` into `s` (layouts: `crate::ggml`'s decoders). The
/// loops run over 32 consecutive values, which LLVM vectorizes.
pub fn unpack(ty: KQuant, b: &[u8], s: &mut Super) {
    scales(ty, b, s, le_f16);
    let w = &mut s.w;
    match ty {
        // Q2_K's and Q3_K's low bits: value 128h + 32k + l is bits 2k of qs[32h + l].
        KQuant::Q2K | KQuant::Q3K => {
            let qs = if ty == KQuant::Q2K {
                &b[16..80]
            } else {
                &b[32..96]
            };
            for (c, o) in w.chunks_exact_mut(32).enumerate() {
                let (q, k) = (&qs[32 * (c / 4)..][..32], 2 * (c % 4));
                for (o, &q) in o.iter_mut().zip(q) {
                    *o = ((q >> k) & 3) as i16;
                }
            }
            if ty == KQuant::Q3K {
                // A clear bit j of hmask[l] makes value 32j + l 4 lower.
                for (j, o) in w.chunks_exact_mut(32).enumerate() {
                    for (o, &m) in o.iter_mut().zip(&b[0..32]) {
                        *o -= 4 - 4 * ((m >> j) & 1) as i16;
                    }
                }
            }
        }
        // Sub-block j of 32: nibble j % 2 of qs[32·(j / 2) + l]; Q5_K's fifth bit is
        // bit j of qh[l].
        KQuant::Q4K | KQuant::Q5K => {
            let q5 = ty == KQuant::Q5K;
            let qs = if q5 { &b[48..176] } else { &b[16..144] };
            for (j, sub) in w.chunks_exact_mut(32).enumerate() {
                let (q, shift) = (&qs[32 * (j / 2)..][..32], 4 * (j % 2));
                for ((o, &q), &h) in sub.iter_mut().zip(q).zip(&b[16..48]) {
                    let high = if q5 { ((h >> j) & 1) << 4 } else { 0 };
                    *o = ((q >> shift) & 15 | high) as i16;
                }
            }
        }
        // Value 128h + 32k + l: nibble k / 2 of ql[64h + 32(k % 2) + l], bits 2k of
        // qh[32h + l] above it, minus 32.
        KQuant::Q6K => {
            for (c, o) in w.chunks_exact_mut(32).enumerate() {
                let (h, k) = (c / 4, c % 4);
                let ql = &b[64 * h + 32 * (k % 2)..][..32];
                let qh = &b[128 + 32 * h..][..32];
                for ((o, &l), &hb) in o.iter_mut().zip(ql).zip(qh) {
                    let low = (l >> (4 * (k / 2))) & 15;
                    *o = (low | ((hb >> (2 * k)) & 3) << 4) as i16 - 32;
                }
            }
        }
    }
}

/// `s · x` for the 256 activations of `x` from block `blk` (of 32) on; `mins`: the
/// format has minimums (Q2_K, Q4_K, Q5_K).
pub fn super_dot(s: &Super, x: Acts, blk: usize, mins: bool) -> f32 {
    let mut acc = 0f32;
    for b in 0..8 {
        let xq = &x.q[(blk + b) * 32..][..32];
        let (mut isum, mut imin) = (0i64, 0i64);
        for h in 0..2 {
            let a = 2 * b + h;
            let (w, xs) = (&s.w[16 * a..][..16], &xq[16 * h..][..16]);
            let p: i32 = w.iter().zip(xs).map(|(&w, &x)| w as i32 * x as i32).sum();
            // |p| ≤ 16·32·32767 < 2^24: times a scale (|sc| ≤ 128) it still fits
            // i32, two such products may not.
            isum += (s.sc[a] as i32 * p) as i64;
            if mins {
                let sx: i32 = xs.iter().map(|&x| x as i32).sum();
                imin += (s.mn[a] as i32 * sx) as i64;
            }
        }
        acc += x.d[blk + b] * (s.d * isum as f32 - s.dmin * imin as f32);
    }
    acc
}

/// `row · x` for a row of `ty` super-blocks and one token's activations.
pub fn dot(ty: KQuant, row: &[u8], x: Acts) -> f32 {
    let mut s = Super::default();
    let mut sum = 0f32;
    for (i, b) in row.chunks_exact(ty.bytes()).enumerate() {
        unpack(ty, b, &mut s);
        sum += super_dot(&s, x, 8 * i, ty.has_mins());
    }
    sum
}
