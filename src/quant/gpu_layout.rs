//! Weights as the GPU kernels read them: GGUF blocks split into two `u32` arrays, the
//! quantized values (`qs`) and the per-block scales (`scales`), so every block starts on
//! a word boundary whatever the GGUF block size (Q8_0 blocks are 34 bytes). Values are
//! unchanged: the CPU dequantization of the GGUF bytes is the reference for the kernels.

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
}

impl GpuFormat {
    pub fn qs_words_per_block(self) -> usize {
        match self {
            GpuFormat::F32 => 32,
            GpuFormat::F16 => 16,
            GpuFormat::Q8_0 => 8,
            GpuFormat::Q4_0 | GpuFormat::Q4_1 | GpuFormat::Pal4 => 4,
            GpuFormat::Pal2 => 2,
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

/// Repacks a tensor's GGUF bytes (`n` elements, a whole number of 32-blocks per row).
pub fn pack(ty: GgmlType, data: &[u8], n: usize) -> Result<Packed> {
    if ty.bytes_for(n as u64) != Some(data.len() as u64) || !n.is_multiple_of(32) {
        return Err(Error::invalid(format!(
            "{ty}: {} bytes do not hold {n} elements in blocks of 32",
            data.len()
        )));
    }
    let le16 = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
    Ok(match ty {
        GgmlType::F32 => Packed { format: GpuFormat::F32, qs: words(data).collect(), scales: vec![0], lut_rows: 0 },
        GgmlType::F16 => Packed { format: GpuFormat::F16, qs: words(data).collect(), scales: vec![0], lut_rows: 0 },
        GgmlType::BF16 => {
            // No BF16 in WGSL; F32 keeps every value exact.
            let qs = data.chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32().to_bits()).collect();
            Packed { format: GpuFormat::F32, qs, scales: vec![0], lut_rows: 0 }
        }
        GgmlType::Q8_0 => {
            let d: Vec<u16> = data.chunks_exact(34).map(&le16).collect();
            let qs = data.chunks_exact(34).flat_map(|b| words(&b[2..34]).collect::<Vec<_>>()).collect();
            Packed { format: GpuFormat::Q8_0, qs, scales: half_pairs(&d), lut_rows: 0 }
        }
        GgmlType::Q4_0 => {
            let d: Vec<u16> = data.chunks_exact(18).map(&le16).collect();
            let qs = data.chunks_exact(18).flat_map(|b| words(&b[2..18]).collect::<Vec<_>>()).collect();
            Packed { format: GpuFormat::Q4_0, qs, scales: half_pairs(&d), lut_rows: 0 }
        }
        GgmlType::Q4_1 => {
            let scales = data.chunks_exact(20).map(|b| le16(b) as u32 | (le16(&b[2..]) as u32) << 16).collect();
            let qs = data.chunks_exact(20).flat_map(|b| words(&b[4..20]).collect::<Vec<_>>()).collect();
            Packed { format: GpuFormat::Q4_1, qs, scales, lut_rows: 0 }
        }
        other => {
            return Err(Error::unsupported(format!(
                "tensor type {other} has no GPU kernel yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)"
            )))
        }
    })
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
    let format = match bits {
        4 => GpuFormat::Pal4,
        2 => GpuFormat::Pal2,
        b => {
            return Err(Error::unsupported(format!(
                "{b}-bit palettes (supported: 2, 4)"
            )))
        }
    };
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

/// f32 values as F16 GPU weights (for tests and converted tensors).
pub fn f16_words(x: &[f32]) -> Vec<u32> {
    half_pairs(
        &x.iter()
            .map(|v| f16::from_f32(*v).to_bits())
            .collect::<Vec<_>>(),
    )
}
