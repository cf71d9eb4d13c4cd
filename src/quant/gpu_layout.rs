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

/// The `FORMAT` override constant of the matmul and embedding kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuFormat {
    /// 32 words per block of 32.
    F32 = 0,
    /// 16 words per block, two halves per word (`unpack2x16float`).
    F16 = 1,
    /// 8 words of 4 signed bytes; one f16 scale per block, two per word.
    Q8_0 = 2,
    /// 4 words of nibbles (byte j: element j low, j+16 high); f16 scales as Q8_0.
    Q4_0 = 3,
    /// Nibbles as Q4_0; one word per block: scale and minimum as two halves.
    Q4_1 = 4,
    /// Palettized, 4-bit: 4 words of indices per block (value j of a word at bits
    /// 4j); `scales` holds the f16 tables, 16 entries (8 words) per `lut_rows` rows.
    Pal4 = 5,
    /// Palettized, 2-bit: 2 words per block (value j at bits 2j); tables of 4 entries.
    Pal2 = 6,
    /// Q4_0's nibbles, then a word whose bit e is value e's fifth bit; f16 scales.
    Q5_0 = 7,
    /// As Q5_0, with Q4_1's scale-and-minimum word per block.
    Q5_1 = 8,
    /// Q4_0's nibbles, each an index into IQ4_NL's 16 levels; f16 scales.
    Iq4Nl = 9,
    /// 2 words per block, value e at bits 2(e % 16) of word e / 16 (as Pal2).
    Q2K = 10,
    /// Q2_K's 2 words of low bits, then a word of third bits (bit e).
    Q3K = 11,
    /// Q4_0's nibble layout per 32-block.
    Q4K = 12,
    /// Q5_0's layout per 32-block.
    Q5K = 13,
    /// Q4_0's nibbles (low 4 bits), then 2 words of the top 2 bits as Q2_K's.
    Q6K = 14,
}

/// Words of `scales` per K-quant super-block: d|dmin, then 16 bytes of sub-scales.
pub const K_SCALE_WORDS: usize = 5;

impl GpuFormat {
    pub fn qs_words_per_block(self) -> usize {
        use GpuFormat::*;
        match self {
            F32 => 32,
            F16 => 16,
            Q8_0 => 8,
            Q6K => 6,
            Q5_0 | Q5_1 | Q5K => 5,
            Q4_0 | Q4_1 | Pal4 | Iq4Nl | Q4K => 4,
            Q3K => 3,
            Pal2 | Q2K => 2,
        }
    }

    /// K-quants: scales per super-block of 8 blocks.
    pub fn is_k_quant(self) -> bool {
        use GpuFormat::*;
        matches!(self, Q2K | Q3K | Q4K | Q5K | Q6K)
    }

    /// One f16 scale per block, two to a word (the row split keeps rows even).
    pub fn has_half_scales(self) -> bool {
        use GpuFormat::*;
        matches!(self, Q8_0 | Q4_0 | Q5_0 | Iq4Nl)
    }

    /// Words of `scales` a row of `blocks` blocks owns, where rows own whole words
    /// (formats with a word or more per block or super-block).
    pub fn scale_words_per_row(self, blocks: usize) -> Option<usize> {
        use GpuFormat::*;
        match self {
            Q4_1 | Q5_1 => Some(blocks),
            f if f.is_k_quant() => Some(blocks / 8 * K_SCALE_WORDS),
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

/// A format of 32-blocks of `bytes`, each an f16 scale (or, `paired`, an f16 scale and
/// minimum as one word) first, then the byte ranges `ranges` (start, end) taken as words in order.
fn blocks32(
    data: &[u8],
    bytes: usize,
    (paired, ranges): (bool, &[(usize, usize)]),
    format: GpuFormat,
) -> Packed {
    let le16 = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
    let blocks = data.chunks_exact(bytes);
    let scales = match paired {
        true => blocks
            .clone()
            .map(|b| le16(b) as u32 | (le16(&b[2..]) as u32) << 16)
            .collect(),
        false => half_pairs(&blocks.clone().map(le16).collect::<Vec<_>>()),
    };
    let qs = blocks
        .flat_map(|b| ranges.iter().flat_map(|&(i, j)| words(&b[i..j])))
        .collect();
    Packed {
        format,
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
    use GpuFormat as G;
    Ok(match ty {
        GgmlType::F32 => plain(G::F32, words(data).collect()),
        GgmlType::F16 => plain(G::F16, words(data).collect()),
        // No BF16 in WGSL; F32 keeps every value exact.
        GgmlType::BF16 => plain(
            G::F32,
            data.chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32().to_bits())
                .collect(),
        ),
        GgmlType::Q8_0 => blocks32(data, 34, (false, &[(2, 34)]), G::Q8_0),
        GgmlType::Q4_0 => blocks32(data, 18, (false, &[(2, 18)]), G::Q4_0),
        GgmlType::Q4_1 => blocks32(data, 20, (true, &[(4, 20)]), G::Q4_1),
        // The nibbles, then the word of fifth bits.
        GgmlType::Q5_0 => blocks32(data, 22, (false, &[(6, 22), (2, 6)]), G::Q5_0),
        GgmlType::Q5_1 => blocks32(data, 24, (true, &[(8, 24), (4, 8)]), G::Q5_1),
        GgmlType::Iq4Nl => blocks32(data, 18, (false, &[(2, 18)]), G::Iq4Nl),
        GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => {
            k_quant(ty, data)
        }
        other => {
            return Err(Error::unsupported(format!(
                "tensor type {other} has no GPU kernel (supported: {})",
                super::GgmlType::decodable()
            )))
        }
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
fn k_quant(ty: GgmlType, data: &[u8]) -> Packed {
    use super::dequant::{k4_scale_min, q3_k_scales};
    let (_, bytes) = ty.block();
    let le16 = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]) as u32;
    let (mut qs, mut scales) = (Vec::new(), Vec::new());
    for b in data.chunks_exact(bytes as usize) {
        let (q, d_dmin, sub): (Vec<u8>, u32, [u8; 16]) = match ty {
            GgmlType::Q2K => {
                let q = (0..256)
                    .map(|e| (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3)
                    .collect();
                let mut sub = [0u8; 16];
                sub.copy_from_slice(&b[0..16]);
                (q, le16(&b[80..]) | le16(&b[82..]) << 16, sub)
            }
            GgmlType::Q3K => {
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
            GgmlType::Q4K | GgmlType::Q5K => {
                let five = ty == GgmlType::Q5K;
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
                GgmlType::Q2K => qs.extend(pack_bits(v, 2)),
                GgmlType::Q3K => {
                    let low: Vec<u8> = v.iter().map(|x| x & 3).collect();
                    let high: Vec<u8> = v.iter().map(|x| x >> 2).collect();
                    qs.extend(pack_bits(&low, 2).chain(pack_bits(&high, 1)));
                }
                GgmlType::Q4K => qs.extend(nibble_words(v)),
                GgmlType::Q5K => {
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
    let format = match ty {
        GgmlType::Q2K => GpuFormat::Q2K,
        GgmlType::Q3K => GpuFormat::Q3K,
        GgmlType::Q4K => GpuFormat::Q4K,
        GgmlType::Q5K => GpuFormat::Q5K,
        _ => GpuFormat::Q6K,
    };
    Packed {
        format,
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
