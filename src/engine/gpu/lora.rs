//! LoRA adapters on the GPU: per projection, A (rank padded to a multiple of 32, so the
//! quantized-matmul kernels take it as F16/F32 weights) and B (already scaled). Applied
//! after the base matmul as t = A·x, y += B·t: two small launches, nothing merged.

use crate::adapters::{Adapter, Lora};
use crate::error::Result;
use crate::gpu::Gpu;
use crate::kernels::matmul::GpuMatrix;
use crate::model::PerProj;
use crate::quant::gpu_layout::{f16_words, GpuFormat, Packed};

pub struct GpuLora {
    pub a: GpuMatrix,
    pub b: GpuMatrix,
    /// Padded rank: the row length of B and the width of t.
    pub rank: usize,
}

pub struct GpuLoraAdapter {
    /// Unique per upload: a session's KV cache is valid for one adapter only.
    pub id: u64,
    pub rank: usize,
    pub layers: Vec<PerProj<Option<GpuLora>>>,
    pub bytes: u64,
}

fn pad(rows: usize, cols: usize, data: &[f32], new_rows: usize, new_cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; new_rows * new_cols];
    for r in 0..rows {
        out[r * new_cols..][..cols].copy_from_slice(&data[r * cols..][..cols]);
    }
    out
}

fn matrix(
    gpu: &Gpu,
    name: &str,
    data: Vec<f32>,
    rows: usize,
    cols: usize,
    half: bool,
) -> Result<GpuMatrix> {
    let packed = if half {
        Packed {
            format: GpuFormat::F16,
            qs: f16_words(&data),
            scales: vec![0],
            lut_rows: 0,
        }
    } else {
        Packed {
            format: GpuFormat::F32,
            qs: data.iter().map(|v| v.to_bits()).collect(),
            scales: vec![0],
            lut_rows: 0,
        }
    };
    GpuMatrix::from_packed(gpu, name, packed, rows, cols)
}

fn upload_lora(gpu: &Gpu, l: &Lora) -> Result<GpuLora> {
    let rank = l.rank.next_multiple_of(32);
    // A keeps the file's 16-bit values exactly; B is scaled, so it stays f32.
    let a = matrix(
        gpu,
        "LoRA A",
        pad(l.rank, l.cols, &l.a, rank, l.cols),
        rank,
        l.cols,
        l.half,
    )?;
    let b = matrix(
        gpu,
        "LoRA B",
        pad(l.rows, l.rank, &l.b, l.rows, rank),
        l.rows,
        rank,
        false,
    )?;
    Ok(GpuLora { a, b, rank })
}

impl GpuLoraAdapter {
    pub fn upload(gpu: &Gpu, adapter: &Adapter) -> Result<GpuLoraAdapter> {
        let mut layers = Vec::with_capacity(adapter.layers.len());
        for l in &adapter.layers {
            let mut out: PerProj<Option<GpuLora>> = Default::default();
            for (p, lora) in l.iter() {
                if let Some(lora) = lora {
                    out[p] = Some(upload_lora(gpu, lora)?);
                }
            }
            layers.push(out);
        }
        gpu.take_error()?;
        let bytes = layers
            .iter()
            .flat_map(|l| l.iter().filter_map(|(_, g)| g.as_ref()))
            .map(|l| l.a.bytes() + l.b.bytes())
            .sum();
        Ok(GpuLoraAdapter {
            id: crate::engine::backend::next_adapter_id(),
            rank: adapter.rank,
            layers,
            bytes,
        })
    }
}
