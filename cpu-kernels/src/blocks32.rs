//! GGML's block formats of 32 weights, one type each: a format's `Block32` impl is all
//! Pippin knows about it — GGML's id and name, the block's bytes and f16 fields, ggml's
//! decode (the ground truth), the integer dot product with 16-bit activations in plain
//! loops and in SIMD128, and how the GPU packer lays it out in words. `Format`, the
//! runtime name of a weight format (these and the K-quants), is written from the list
//! in `blocks32!` below, with every dispatch on it.
//!
//! A new format of 32 weights is a type here with its name in that list, and its
//! decode in `shaders/weights.wgsl`: its GGUF id is in `gguf::GgmlType`'s table already
//! (every type ggml defines), which asks `Format::from_ggml` what Pippin decodes, and
//! build.rs writes its GPU id and words per block to the kernels from `Format::ALL`.

use crate::ggml::{le_f16, IQ4_NL_LEVELS};
use crate::kquants::{self, KQuant};
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use crate::simd::blocks as simd;
use crate::Acts;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use core::arch::wasm32::v128;

/// A GGML block format of 32 weights.
pub trait Block32 {
    /// GGML's name and type id (a GGUF tensor's type).
    const NAME: &'static str;
    const GGML_ID: u32;
    /// Bytes per block.
    const BYTES: usize;
    /// Byte offsets of the block's f16 fields (scale, minimum): test blocks
    /// (`quant::encode::random_blocks`) keep them finite and small.
    const HALVES: &'static [usize];
    /// The block as the GPU kernels read it.
    const GPU: Gpu32;
    /// Sets random block `b`'s scales to values `next` draws (test blocks): by
    /// default each f16 field of `HALVES`.
    fn test_scales(b: &mut [u8], next: &mut dyn FnMut() -> f32) {
        set_halves(Self::HALVES, b, next)
    }
    /// Block `b` decoded into `o` (32 values) exactly as ggml's `dequantize_row_*`.
    fn decode(b: &[u8], o: &mut [f32]);
    /// `Σ w·x` over block `b` and its 32 activations `xq` (scale `dx`, `sx = dx·Σxq`):
    /// integer products, then f32 — the plain loops, reference of `lanes`.
    fn dot(b: &[u8], xq: &[i16], dx: f32, sx: f32) -> f32;
    /// The block's 32 weights as four i16x8 (values 0..8, 8..16, 16..24, 24..32), its
    /// scale d, and the factor of the activations' block sum in its dot product
    /// (`w = d·q + c/d·…`: Q4_0 −8·d, Q5_0 −16·d, Q4_1 and Q5_1 the minimum, else 0).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn lanes(h: &simd::Halves, b: &[u8]) -> ([v128; 4], f32, f32);
}

/// How the GPU packer (`quant::gpu_layout`) lays a block out in two word arrays: its
/// scale in `scales` (`Scale`), and in `qs` the byte ranges `values` of the block, in
/// order.
#[derive(Clone, Copy)]
pub struct Gpu32 {
    pub scale: Scale,
    pub values: &'static [(usize, usize)],
}

/// A block's scale as the GPU kernels read it from `scales`.
#[derive(Clone, Copy)]
pub enum Scale {
    /// The f16 at byte 0, two blocks' to a word.
    Half,
    /// The f16 scale and minimum at bytes 0 and 2, as one word.
    Pair,
    /// A word per block, made from the block (a scale f16 cannot hold, as f32 bits).
    Word(fn(&[u8]) -> u32),
}

impl Gpu32 {
    /// Words of `qs` per block.
    pub const fn words(&self) -> usize {
        let (mut n, mut i) = (0, 0);
        while i < self.values.len() {
            n += (self.values[i].1 - self.values[i].0) / 4;
            i += 1;
        }
        n
    }
}

/// An f16 scale then 16 bytes of nibbles (Q4_0, IQ4_NL), as the GPU reads them.
const HALF_NIBBLES: Gpu32 = Gpu32 {
    scale: Scale::Half,
    values: &[(2, 18)],
};

/// Value j of 16 bytes of nibbles (byte j: value j low, j + 16 high) as `f(q)` into
/// `o` (ggml's order of operations stays each format's, in `f`).
#[inline(always)]
fn each_nibble(qs: &[u8], o: &mut [f32], f: impl Fn(u8) -> f32) {
    for (j, &q) in qs.iter().enumerate() {
        o[j] = f(q & 0x0f);
        o[j + 16] = f(q >> 4);
    }
}

/// Q4_0: f16 d, 16 bytes of nibbles (byte j: value j low, j + 16 high); w = d·(q − 8).
#[derive(Clone, Copy, Debug)]
pub struct Q4_0;

impl Block32 for Q4_0 {
    const NAME: &'static str = "Q4_0";
    const GGML_ID: u32 = 2;
    const BYTES: usize = 18;
    const HALVES: &'static [usize] = &[0];
    const GPU: Gpu32 = HALF_NIBBLES;

    fn decode(b: &[u8], o: &mut [f32]) {
        let d = le_f16(b);
        each_nibble(&b[2..18], o, |q| (q as i32 - 8) as f32 * d);
    }

    #[inline(always)]
    fn dot(b: &[u8], xq: &[i16], dx: f32, sx: f32) -> f32 {
        le_f16(b) * (dx * nibbles(&b[2..18], xq) as f32 - 8.0 * sx)
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn lanes(h: &simd::Halves, b: &[u8]) -> ([v128; 4], f32, f32) {
        let d = simd::f16_at(h, b, 0);
        // SAFETY: 16 bytes from 2 of 18.
        (simd::nibbles(unsafe { simd::load(b, 2) }), d, -8.0 * d)
    }
}

/// Q4_1: f16 d, f16 m, 16 bytes of nibbles as Q4_0's; w = d·q + m.
#[derive(Clone, Copy, Debug)]
pub struct Q4_1;

impl Block32 for Q4_1 {
    const NAME: &'static str = "Q4_1";
    const GGML_ID: u32 = 3;
    const BYTES: usize = 20;
    const HALVES: &'static [usize] = &[0, 2];
    const GPU: Gpu32 = Gpu32 {
        scale: Scale::Pair,
        values: &[(4, 20)],
    };

    fn decode(b: &[u8], o: &mut [f32]) {
        let (d, m) = (le_f16(b), le_f16(&b[2..]));
        each_nibble(&b[4..20], o, |q| q as f32 * d + m);
    }

    #[inline(always)]
    fn dot(b: &[u8], xq: &[i16], dx: f32, sx: f32) -> f32 {
        le_f16(b) * dx * nibbles(&b[4..20], xq) as f32 + le_f16(&b[2..]) * sx
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn lanes(h: &simd::Halves, b: &[u8]) -> ([v128; 4], f32, f32) {
        let (d, m) = (simd::f16_at(h, b, 0), simd::f16_at(h, b, 2));
        // SAFETY: 16 bytes from 4 of 20.
        (simd::nibbles(unsafe { simd::load(b, 4) }), d, m)
    }
}

/// Q5_0: f16 d, 32 bits qh (bit e: value e's fifth bit), 16 bytes of nibbles as
/// Q4_0's; w = d·(q − 16).
#[derive(Clone, Copy, Debug)]
pub struct Q5_0;

impl Block32 for Q5_0 {
    const NAME: &'static str = "Q5_0";
    const GGML_ID: u32 = 6;
    const BYTES: usize = 22;
    const HALVES: &'static [usize] = &[0];
    // The nibbles, then the word of fifth bits.
    const GPU: Gpu32 = Gpu32 {
        scale: Scale::Half,
        values: &[(6, 22), (2, 6)],
    };

    fn decode(b: &[u8], o: &mut [f32]) {
        let d = le_f16(&b[0..2]);
        for (x, q) in o.iter_mut().zip(five_bits(&b[2..6], &b[6..22])) {
            *x = (q - 16) as f32 * d;
        }
    }

    #[inline(always)]
    fn dot(b: &[u8], xq: &[i16], dx: f32, sx: f32) -> f32 {
        le_f16(b) * (dx * fives(&b[2..6], &b[6..22], xq) as f32 - 16.0 * sx)
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn lanes(h: &simd::Halves, b: &[u8]) -> ([v128; 4], f32, f32) {
        let d = simd::f16_at(h, b, 0);
        // SAFETY: 16 bytes from 6 of 22.
        let qs = unsafe { simd::load(b, 6) };
        (simd::fives(qs, simd::fifth_bits(b, 2)), d, -16.0 * d)
    }
}

/// Q5_1: f16 d, f16 m, then Q5_0's qh and nibbles; w = d·q + m.
#[derive(Clone, Copy, Debug)]
pub struct Q5_1;

impl Block32 for Q5_1 {
    const NAME: &'static str = "Q5_1";
    const GGML_ID: u32 = 7;
    const BYTES: usize = 24;
    const HALVES: &'static [usize] = &[0, 2];
    const GPU: Gpu32 = Gpu32 {
        scale: Scale::Pair,
        values: &[(8, 24), (4, 8)],
    };

    fn decode(b: &[u8], o: &mut [f32]) {
        let (d, m) = (le_f16(&b[0..2]), le_f16(&b[2..4]));
        for (x, q) in o.iter_mut().zip(five_bits(&b[4..8], &b[8..24])) {
            *x = q as f32 * d + m;
        }
    }

    #[inline(always)]
    fn dot(b: &[u8], xq: &[i16], dx: f32, sx: f32) -> f32 {
        le_f16(b) * dx * fives(&b[4..8], &b[8..24], xq) as f32 + le_f16(&b[2..]) * sx
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn lanes(h: &simd::Halves, b: &[u8]) -> ([v128; 4], f32, f32) {
        let (d, m) = (simd::f16_at(h, b, 0), simd::f16_at(h, b, 2));
        // SAFETY: 16 bytes from 8 of 24.
        let qs = unsafe { simd::load(b, 8) };
        (simd::fives(qs, simd::fifth_bits(b, 4)), d, m)
    }
}

/// Q8_0: f16 d, 32 signed bytes; w = d·q.
#[derive(Clone, Copy, Debug)]
pub struct Q8_0;

impl Block32 for Q8_0 {
    const NAME: &'static str = "Q8_0";
    const GGML_ID: u32 = 8;
    const BYTES: usize = 34;
    const HALVES: &'static [usize] = &[0];
    const GPU: Gpu32 = Gpu32 {
        scale: Scale::Half,
        values: &[(2, 34)],
    };

    fn decode(b: &[u8], o: &mut [f32]) {
        let d = le_f16(&b[0..2]);
        for (x, &q) in o.iter_mut().zip(&b[2..34]) {
            *x = (q as i8) as f32 * d;
        }
    }

    #[inline(always)]
    fn dot(b: &[u8], xq: &[i16], dx: f32, _: f32) -> f32 {
        let w = b[2..34].iter().zip(xq);
        le_f16(b) * dx * w.map(|(&w, &x)| w as i8 as i32 * x as i32).sum::<i32>() as f32
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn lanes(h: &simd::Halves, b: &[u8]) -> ([v128; 4], f32, f32) {
        let d = simd::f16_at(h, b, 0);
        // SAFETY: 16 bytes from 2 and from 18 of 34.
        let (lo, hi) = unsafe { (simd::load(b, 2), simd::load(b, 18)) };
        (simd::signed(lo, hi), d, 0.0)
    }
}

/// IQ4_NL: f16 d, 16 bytes of nibbles as Q4_0's, each an index into 16 fixed levels;
/// w = d·levels[q].
#[derive(Clone, Copy, Debug)]
pub struct Iq4Nl;

impl Block32 for Iq4Nl {
    const NAME: &'static str = "IQ4_NL";
    const GGML_ID: u32 = 20;
    const BYTES: usize = 18;
    const HALVES: &'static [usize] = &[0];
    const GPU: Gpu32 = HALF_NIBBLES;

    fn decode(b: &[u8], o: &mut [f32]) {
        let d = le_f16(b);
        each_nibble(&b[2..18], o, |q| d * IQ4_NL_LEVELS[q as usize] as f32);
    }

    #[inline(always)]
    fn dot(b: &[u8], xq: &[i16], dx: f32, _: f32) -> f32 {
        le_f16(b) * dx * levels(&IQ4_NL_LEVELS, &b[2..18], xq) as f32
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn lanes(h: &simd::Halves, b: &[u8]) -> ([v128; 4], f32, f32) {
        let d = simd::f16_at(h, b, 0);
        // SAFETY: 16 bytes from 2 of 18.
        (
            simd::levels(unsafe { simd::load(b, 2) }, &IQ4_NL_LEVELS),
            d,
            0.0,
        )
    }
}

/// MXFP4 (OCP microscaling, as gpt-oss ships its experts): an E8M0 exponent byte e,
/// then 16 bytes of nibbles as Q4_0's, each an FP4 (E2M1) value; w = 2^(e−128)·levels[q]
/// (ggml's levels are E2M1's values doubled, its scale halved to match).
#[derive(Clone, Copy, Debug)]
pub struct Mxfp4;

/// MXFP4's 16 levels: E2M1's values, doubled (ggml's `kvalues_mxfp4`).
pub const MXFP4_LEVELS: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// MXFP4's scale from its exponent byte: 2^(e−128) as f32 bits, subnormal below e = 2
/// (ggml's `ggml_e8m0_to_fp32_half`).
fn e8m0_half_bits(e: u8) -> u32 {
    match e {
        0 | 1 => 0x0020_0000 << e,
        _ => ((e - 1) as u32) << 23,
    }
}

impl Block32 for Mxfp4 {
    const NAME: &'static str = "MXFP4";
    const GGML_ID: u32 = 39;
    const BYTES: usize = 17;
    const HALVES: &'static [usize] = &[];
    // f16 cannot hold 2^(e−128): the kernels read the scale as f32 bits.
    const GPU: Gpu32 = Gpu32 {
        scale: Scale::Word(|b| e8m0_half_bits(b[0])),
        values: &[(1, 17)],
    };

    /// The exponent nearest below the drawn scale's (at least 2^-20, at most 1).
    fn test_scales(b: &mut [u8], next: &mut dyn FnMut() -> f32) {
        let e = next().max(1e-6).log2().floor().clamp(-20.0, 0.0);
        b[0] = (e as i32 + 128) as u8;
    }

    fn decode(b: &[u8], o: &mut [f32]) {
        let d = f32::from_bits(e8m0_half_bits(b[0]));
        each_nibble(&b[1..17], o, |q| MXFP4_LEVELS[q as usize] as f32 * d);
    }

    #[inline(always)]
    fn dot(b: &[u8], xq: &[i16], dx: f32, _: f32) -> f32 {
        f32::from_bits(e8m0_half_bits(b[0])) * dx * levels(&MXFP4_LEVELS, &b[1..17], xq) as f32
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    fn lanes(_: &simd::Halves, b: &[u8]) -> ([v128; 4], f32, f32) {
        let d = f32::from_bits(e8m0_half_bits(b[0]));
        // SAFETY: 16 bytes from 1 of 17.
        (
            simd::levels(unsafe { simd::load(b, 1) }, &MXFP4_LEVELS),
            d,
            0.0,
        )
    }
}

/// `Format` and its dispatch, from the list of block formats of 32 (each a type above).
macro_rules! blocks32 {
    ($($b:ident),* $(,)?) => {
        /// A weight format with an integer dot product (16-bit activations): a block
        /// format of 32 (a `Block32` type of the same name) or a K-quant.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Format {
            $($b,)*
            K(KQuant),
        }

        impl Format {
            /// Every format: the blocks of 32, then the K-quants.
            pub const ALL: &'static [Format] = &[
                $(Format::$b,)*
                Format::K(KQuant::Q2K),
                Format::K(KQuant::Q3K),
                Format::K(KQuant::Q4K),
                Format::K(KQuant::Q5K),
                Format::K(KQuant::Q6K),
            ];

            /// GGML's name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Format::$b => $b::NAME,)*
                    Format::K(k) => k.name(),
                }
            }

            /// GGML's type id.
            pub fn ggml_id(self) -> u32 {
                match self {
                    $(Format::$b => $b::GGML_ID,)*
                    Format::K(k) => k.ggml_id(),
                }
            }

            /// (values, bytes) per block or super-block.
            pub fn block(self) -> (usize, usize) {
                match self {
                    $(Format::$b => (32, $b::BYTES),)*
                    Format::K(k) => (256, k.bytes()),
                }
            }

            /// Byte offsets of a block's f16 fields.
            pub fn halves(self) -> &'static [usize] {
                match self {
                    $(Format::$b => $b::HALVES,)*
                    Format::K(k) => k.halves(),
                }
            }

            /// Sets a random block's scales to values `next` draws (test blocks).
            pub fn test_scales(self, b: &mut [u8], next: &mut dyn FnMut() -> f32) {
                match self {
                    $(Format::$b => $b::test_scales(b, next),)*
                    Format::K(k) => set_halves(k.halves(), b, next),
                }
            }

            /// How the GPU packer lays a block of 32 out (`None` for the K-quants,
            /// which `quant::gpu_layout` repacks by super-block).
            pub fn gpu32(self) -> Option<Gpu32> {
                match self {
                    $(Format::$b => Some($b::GPU),)*
                    Format::K(_) => None,
                }
            }

            /// Whole blocks `data` decoded into `o`, as ggml does: the format chosen
            /// once, not per block (the CPU backend decodes K-quant rows so in prefill).
            pub fn decode(self, data: &[u8], o: &mut [f32]) {
                let (per, bytes) = self.block();
                let blocks = o.chunks_exact_mut(per).zip(data.chunks_exact(bytes));
                match self {
                    $(Format::$b => blocks.for_each(|(o, b)| $b::decode(b, o)),)*
                    Format::K(k) => blocks.for_each(|(o, b)| k.decode(b, o)),
                }
            }

            /// `row · x` in plain loops on every target (the reference of the SIMD
            /// versions).
            pub fn plain_dot(self, row: &[u8], x: Acts) -> f32 {
                match self {
                    $(Format::$b => row_dot::<$b>(row, x),)*
                    Format::K(k) => kquants::dot(k, row, x),
                }
            }

            /// A block of 32's weights as four i16x8, its scale and its block-sum
            /// factor (`Block32::lanes`), for the SIMD loops of `simd::blocks`, which
            /// choose the format per block (zeros for a K-quant: never asked).
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            #[inline(always)]
            pub fn lanes(self, h: &simd::Halves, b: &[u8]) -> ([v128; 4], f32, f32) {
                match self {
                    $(Format::$b => $b::lanes(h, b),)*
                    Format::K(_) => ([core::arch::wasm32::i16x8_splat(0); 4], 0.0, 0.0),
                }
            }
        }
    };
}

blocks32!(Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Iq4Nl, Mxfp4);

impl Format {
    /// The format of GGML type `id`, if it has an integer dot product here.
    pub fn from_ggml(id: u32) -> Option<Format> {
        Format::ALL.iter().copied().find(|f| f.ggml_id() == id)
    }

    /// Words of the GPU's packed values per block of 32 (`quant::gpu_layout`).
    pub fn gpu_words(self) -> usize {
        match (self.gpu32(), self) {
            (Some(g), _) => g.words(),
            (None, Format::K(k)) => k.gpu_words(),
            (None, _) => unreachable!("every block of 32 has a GPU layout"),
        }
    }
}

/// Each f16 field of `b` at `at` to a value `next` draws.
fn set_halves(at: &[usize], b: &mut [u8], next: &mut dyn FnMut() -> f32) {
    for &i in at {
        b[i..i + 2].copy_from_slice(&half::f16::from_f32(next()).to_le_bytes());
    }
}

/// Σ over the row's blocks of `B::dot`.
#[inline(always)]
fn row_dot<B: Block32>(row: &[u8], x: Acts) -> f32 {
    let mut sum = 0f32;
    for (i, b) in row.chunks_exact(B::BYTES).enumerate() {
        sum += B::dot(b, &x.q[i * 32..][..32], x.d[i], x.s[i]);
    }
    sum
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

/// Σ nibble·x: low nibbles are values 0..16, high ones 16..32. Never inlined: LLVM
/// vectorizes it alone, and inlined into `row_dot`'s loop it did not (natively, Q4_1
/// decode went from 56 to 21 tokens/s when another change to this crate tipped the
/// inliner). The same for `fives` and `levels`.
///
/// Its slices are cut to their lengths first: the loops then have a known count and
/// vectorize whoever calls (a block type's `dot` may be instantiated in another
/// crate, so LLVM could not take the lengths from the callers: Q4_1 decode fell from
/// 12.7 to 3.3 tokens/s natively until they were).
#[inline(never)]
fn nibbles(qs: &[u8], x: &[i16]) -> i32 {
    let (qs, x) = (&qs[..16], &x[..32]);
    let (x0, x1) = x.split_at(16);
    qs.iter()
        .zip(x0.iter().zip(x1))
        .map(|(&q, (&a, &b))| (q & 15) as i32 * a as i32 + (q >> 4) as i32 * b as i32)
        .sum()
}

/// Σ 5-bit value·x: the nibbles plus bit e of `qh` for value e.
#[inline(never)]
fn fives(qh: &[u8], qs: &[u8], x: &[i16]) -> i32 {
    let (qs, x) = (&qs[..16], &x[..32]);
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut s = 0;
    for (j, &q) in qs.iter().enumerate() {
        let lo = (q & 15) as u32 | ((h >> j) & 1) << 4;
        let hi = (q >> 4) as u32 | ((h >> (j + 16)) & 1) << 4;
        s += lo as i32 * x[j] as i32 + hi as i32 * x[j + 16] as i32;
    }
    s
}

/// Σ level(nibble)·x for IQ4_NL and MXFP4 (`l` their 16 levels).
#[inline(never)]
fn levels(l: &[i8; 16], qs: &[u8], x: &[i16]) -> i32 {
    let (qs, x) = (&qs[..16], &x[..32]);
    let (x0, x1) = x.split_at(16);
    qs.iter()
        .zip(x0.iter().zip(x1))
        .map(|(&q, (&a, &b))| {
            l[(q & 15) as usize] as i32 * a as i32 + l[(q >> 4) as usize] as i32 * b as i32
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_s_layout_fits_its_block() {
        // (GGML's ids and names: `gguf::GgmlType`'s table test.)
        for f in Format::ALL {
            assert_eq!(Format::from_ggml(f.ggml_id()), Some(*f));
            let (per, bytes) = f.block();
            // The f16 fields lie inside the block; the GPU's words fit its values.
            assert!(f.halves().iter().all(|&h| h + 2 <= bytes), "{f:?}");
            assert!(
                f.gpu_words() * 4 * (256 / per) <= bytes * (256 / per),
                "{f:?}"
            );
            if let Some(g) = f.gpu32() {
                assert!(g
                    .values
                    .iter()
                    .all(|&(a, b)| a < b && b <= bytes && (b - a) % 4 == 0));
            }
        }
        assert_eq!(Format::from_ggml(0), None);
    }
}
