//! Weights as the GPU kernels read them: GGUF blocks split into two `u32` arrays, the
//! quantized values (`qs`) and the scales (`scales`), so every block starts on a word
//! boundary whatever the GGUF block size (Q8_0 blocks are 34 bytes). The kernels walk
//! rows in blocks of 32 values: a K-quant super-block of 256 is repacked as 8 such
//! blocks of `qs` (bits rearranged so value e of a block sits where the kernel looks)
//! plus 5 words of scales per super-block (d|dmin as two halves, then 16 sub-scale
//! bytes, the 6-bit ones unpacked). Values are unchanged: the CPU dequantization of
//! the GGUF bytes is the reference for the kernels.

use super::GgmlType;
use crate::error::{Error, Result};
use half::{bf16, f16};
use pippin_cpu_kernels::blocks32::{Format, Gpu32, Scale};
use pippin_cpu_kernels::kquants::KQuant;

/// How the matmul and embedding kernels read a matrix (their `FORMAT` override
/// constant, `id`): a GGML block format — its layout its type's
/// (`pippin_cpu_kernels::blocks32`), its id GGML's — or one of the GPU's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuFormat {
    /// 32 words per block of 32.
    F32,
    /// 16 words per block, two halves per word (`unpack2x16float`).
    F16,
    /// Palettized, 4-bit: 4 words of indices per block (value j of a word at bits
    /// 4j); `scales` holds the f16 tables, 16 entries (8 words) per `lut_rows` rows.
    Pal4,
    /// Palettized, 2-bit: 2 words per block (value j at bits 2j); tables of 4 entries.
    Pal2,
    /// A GGML block format. Blocks of 32: `scales` holds each block's scale as its
    /// `Gpu32` says (an f16, two blocks' to a word; scale and minimum as one word; or
    /// a word of its own), `qs` the byte ranges of its `Gpu32`. K-quants: 8 blocks of 32 per super-block, each block's values
    /// as a format of 32 of as many bits would hold them (Q2_K as Pal2's words, Q3_K
    /// those then a word of third bits, Q4_K as Q4_0's nibbles, Q5_K as Q5_0's, Q6_K
    /// Q4_0's nibbles then Q2_K's words of the top bits), and `K_SCALE_WORDS` of
    /// scales per super-block.
    Blocks(Format),
}

/// Words of `scales` per K-quant super-block: d|dmin, then 16 bytes of sub-scales.
pub const K_SCALE_WORDS: usize = 5;

impl GpuFormat {
    /// The kernels' `FORMAT` id. build.rs writes each as a WGSL constant `GPU_<NAME>`
    /// (the GPU's own from these arms, GGML's from `Format::ALL`, which are below 64).
    pub fn id(self) -> u32 {
        use GpuFormat::*;
        match self {
            F32 => 0,
            F16 => 1,
            Pal4 => 64,
            Pal2 => 65,
            Blocks(f) => f.ggml_id(),
        }
    }

    /// Words of `qs` per block of 32 (build.rs writes WGSL's `qs_words_of` from these
    /// arms and `Format::gpu_words`).
    pub fn qs_words_per_block(self) -> usize {
        use GpuFormat::*;
        match self {
            F32 => 32,
            F16 => 16,
            Pal4 => 4,
            Pal2 => 2,
            Blocks(f) => f.gpu_words(),
        }
    }

    /// K-quants: scales per super-block of 8 blocks.
    pub fn is_k_quant(self) -> bool {
        matches!(self, GpuFormat::Blocks(Format::K(_)))
    }

    /// One f16 scale per block, two to a word (the row split keeps rows even).
    pub fn has_half_scales(self) -> bool {
        self.block32()
            .is_some_and(|g| matches!(g.scale, Scale::Half))
    }

    /// Words of `scales` a row of `blocks` blocks owns, where rows own whole words
    /// (formats with a word or more per block or super-block).
    pub fn scale_words_per_row(self, blocks: usize) -> Option<usize> {
        match self.block32() {
            Some(Gpu32 {
                scale: Scale::Pair | Scale::Word(_),
                ..
            }) => Some(blocks),
            _ if self.is_k_quant() => Some(blocks / 8 * K_SCALE_WORDS),
            _ => None,
        }
    }

    pub fn is_palette(self) -> bool {
        matches!(self, GpuFormat::Pal4 | GpuFormat::Pal2)
    }

    /// Words of `scales` per table (palettes only).
    pub fn lut_words(self) -> usize {
        match self {
            GpuFormat::Pal4 => 8,
            GpuFormat::Pal2 => 2,
            _ => 0,
        }
    }

    /// A block format of 32's layout.
    fn block32(self) -> Option<Gpu32> {
        match self {
            GpuFormat::Blocks(f) => f.gpu32(),
            _ => None,
        }
    }
}

pub struct Packed {
    pub format: GpuFormat,
    pub qs: Vec<u32>,
    pub scales: Vec<u32>,
    /// Rows sharing one table (palettes; 0 otherwise).
    pub lut_rows: usize,
}

impl Packed {
    /// Bytes the GPU holds for these weights.
    pub fn bytes(&self) -> u64 {
        4 * (self.qs.len() + self.scales.len()) as u64
    }
}

fn words(b: &[u8]) -> impl Iterator<Item = u32> + '_ {
    b.chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

fn half_pairs(h: &[u16]) -> Vec<u32> {
    h.chunks(2)
        .map(|p| p[0] as u32 | (*p.get(1).unwrap_or(&0) as u32) << 16)
        .collect()
}

/// Unquantized words: no scales.
fn plain(format: GpuFormat, qs: Vec<u32>) -> Packed {
    Packed {
        format,
        qs,
        scales: vec![0],
        lut_rows: 0,
    }
}

/// A block format of 32 as its `Gpu32` says: each block's scale (`Scale`) in
/// `scales`, its byte ranges `values` as words in `qs`.
fn blocks32(data: &[u8], f: Format, g: Gpu32) -> Packed {
    let le16 = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
    let blocks = data.chunks_exact(f.block().1);
    let scales = match g.scale {
        Scale::Pair => blocks
            .clone()
            .map(|b| le16(b) as u32 | (le16(&b[2..]) as u32) << 16)
            .collect(),
        Scale::Half => half_pairs(&blocks.clone().map(le16).collect::<Vec<_>>()),
        Scale::Word(word) => blocks.clone().map(word).collect(),
    };
    let qs = blocks
        .flat_map(|b| g.values.iter().flat_map(|&(i, j)| words(&b[i..j])))
        .collect();
    Packed {
        format: GpuFormat::Blocks(f),
        qs,
        scales,
        lut_rows: 0,
    }
}

/// Repacks a tensor's GGUF bytes (`n` elements, a whole number of 32-blocks per row).
pub fn pack(ty: GgmlType, data: &[u8], n: usize) -> Result<Packed> {
    if ty.bytes_for(n as u64) != Some(data.len() as u64) || !n.is_multiple_of(32) {
        return Err(Error::invalid(format!(
            "{ty}: {} bytes do not hold {n} elements in blocks of 32",
            data.len()
        )));
    }
    Ok(match ty {
        GgmlType::F32 => plain(GpuFormat::F32, words(data).collect()),
        GgmlType::F16 => plain(GpuFormat::F16, words(data).collect()),
        // No BF16 in WGSL; F32 keeps every value exact.
        GgmlType::BF16 => plain(
            GpuFormat::F32,
            data.chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32().to_bits())
                .collect(),
        ),
        _ => match ty.format().map(|f| (f, f.gpu32())) {
            Some((Format::K(k), _)) => k_quant(k, data),
            Some((f, Some(g))) => blocks32(data, f, g),
            _ => {
                return Err(Error::unsupported(format!(
                    "tensor type {ty} has no GPU kernel (supported: {})",
                    super::GgmlType::decodable()
                )))
            }
        },
    })
}

/// Packs 32 values of `bits` bits (each < 2^bits) into words, value e of a group of
/// 32/bits at bits `bits·(e % per_word)`.
fn pack_bits(values: &[u8], bits: u32) -> impl Iterator<Item = u32> + '_ {
    let per = (32 / bits) as usize;
    values.chunks(per).map(move |c| {
        c.iter()
            .enumerate()
            .fold(0u32, |w, (i, &v)| w | (v as u32) << (bits as usize * i))
    })
}

/// Value e's bits in Q4_0's nibble order: byte j holds value j (low) and j + 16 (high).
fn nibble_words(v: &[u8]) -> impl Iterator<Item = u32> + '_ {
    let bytes: Vec<u8> = (0..16)
        .map(|j| (v[j] & 15) | (v[j + 16] & 15) << 4)
        .collect();
    words(&bytes).collect::<Vec<_>>().into_iter()
}

/// A K-quant super-block's values (unsigned, each block's bits) and sub-scales, from
/// the CPU decoder's own reading of the block, repacked for the kernels.
fn k_quant(ty: KQuant, data: &[u8]) -> Packed {
    use super::dequant::{k4_scale_min, q3_k_scales};
    let le16 = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]) as u32;
    let (mut qs, mut scales) = (Vec::new(), Vec::new());
    for b in data.chunks_exact(ty.bytes()) {
        let (q, d_dmin, sub): (Vec<u8>, u32, [u8; 16]) = match ty {
            KQuant::Q2K => {
                let q = (0..256)
                    .map(|e| (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3)
                    .collect();
                let mut sub = [0u8; 16];
                sub.copy_from_slice(&b[0..16]);
                (q, le16(&b[80..]) | le16(&b[82..]) << 16, sub)
            }
            KQuant::Q3K => {
                let q = (0..256)
                    .map(|e| {
                        let low = (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                        low | (((b[e % 32] >> (e / 32)) & 1) << 2)
                    })
                    .collect();
                (
                    q,
                    le16(&b[108..]),
                    q3_k_scales(&b[96..108]).map(|s| s as u8),
                )
            }
            KQuant::Q4K | KQuant::Q5K => {
                let five = ty == KQuant::Q5K;
                let qs_at = if five { 48 } else { 16 };
                let q = (0..256)
                    .map(|e| {
                        let (j, l) = (e / 32, e % 32);
                        let low = (b[qs_at + 32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
                        let high = if five { ((b[16 + l] >> j) & 1) << 4 } else { 0 };
                        low | high
                    })
                    .collect();
                let mut sub = [0u8; 16];
                for j in 0..8 {
                    (sub[j], sub[8 + j]) = k4_scale_min(j, &b[4..16]);
                }
                (q, le16(&b[0..]) | le16(&b[2..]) << 16, sub)
            }
            _ => {
                // Q6_K
                let q = (0..256)
                    .map(|e| {
                        let (h, k, l) = (e / 128, (e % 128) / 32, e % 32);
                        let low = (b[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
                        low | ((b[128 + 32 * h + l] >> (2 * k)) & 3) << 4
                    })
                    .collect();
                let mut sub = [0u8; 16];
                sub.copy_from_slice(&b[192..208]);
                (q, le16(&b[208..]), sub)
            }
        };
        for v in q.chunks_exact(32) {
            match ty {
                KQuant::Q2K => qs.extend(pack_bits(v, 2)),
                KQuant::Q3K => {
                    let low: Vec<u8> = v.iter().map(|x| x & 3).collect();
                    let high: Vec<u8> = v.iter().map(|x| x >> 2).collect();
                    qs.extend(pack_bits(&low, 2).chain(pack_bits(&high, 1)));
                }
                KQuant::Q4K => qs.extend(nibble_words(v)),
                KQuant::Q5K => {
                    let high: Vec<u8> = v.iter().map(|x| x >> 4).collect();
                    qs.extend(nibble_words(v).chain(pack_bits(&high, 1)));
                }
                _ => {
                    let high: Vec<u8> = v.iter().map(|x| x >> 4).collect();
                    qs.extend(nibble_words(v).chain(pack_bits(&high, 2)));
                }
            }
        }
        scales.push(d_dmin);
        scales.extend(words(&sub));
    }
    Packed {
        format: GpuFormat::Blocks(Format::K(ty)),
        qs,
        scales,
        lut_rows: 0,
    }
}

/// A palettized matrix as the kernels read it: its packed indices and its tables.
pub fn pack_palette(p: &super::palette::Palettized) -> Result<Packed> {
    let format = match p.bits {
        4 => GpuFormat::Pal4,
        2 => GpuFormat::Pal2,
        b => {
            return Err(Error::unsupported(format!(
                "{b}-bit palettes (supported: 2, 4)"
            )))
        }
    };
    if !p.cols.is_multiple_of(32) {
        return Err(Error::invalid(format!(
            "palettized rows of {} values: not whole blocks of 32",
            p.cols
        )));
    }
    Ok(Packed {
        format,
        qs: p.pack_indices(),
        scales: p.lut_words(),
        lut_rows: p.rows_per_lut,
    })
}

/// A palettized matrix straight from its GGUF tensors (`.pidx` words are already in
/// the kernels' layout; `.plut` f16 tables pair up into words).
pub fn pack_palette_bytes(bits: u32, lut_rows: usize, idx: &[u8], lut: &[u8]) -> Result<Packed> {
    let format = palette_format(bits)?;
    if !idx.len().is_multiple_of(4) || !lut.len().is_multiple_of(4) {
        return Err(Error::gguf("palettized tensor sizes are not whole words"));
    }
    Ok(Packed {
        format,
        qs: words(idx).collect(),
        scales: words(lut).collect(),
        lut_rows,
    })
}

/// The GPU format of a palette of `bits`-bit indices.
pub fn palette_format(bits: u32) -> Result<GpuFormat> {
    match bits {
        4 => Ok(GpuFormat::Pal4),
        2 => Ok(GpuFormat::Pal2),
        b => Err(Error::unsupported(format!(
            "{b}-bit palettes (supported: 2, 4)"
        ))),
    }
}

/// f32 values as F16 GPU weights (for tests and converted tensors).
pub fn f16_words(x: &[f32]) -> Vec<u32> {
    half_pairs(
        &x.iter()
            .map(|v| f16::from_f32(*v).to_bits())
            .collect::<Vec<_>>(),
    )
}
