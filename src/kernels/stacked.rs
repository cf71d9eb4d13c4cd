//! Matrices that read the same input (Q, K, V; gate, up), stacked by rows into one
//! matrix at load so one dispatch computes them all; kept apart when their formats or
//! sizes do not allow it (mixed K-quant files often store V or up in another type).
//! The stacking is a GPU copy: nothing is staged in (wasm) memory.

use super::matmul::{GpuMatrix, Part};
use crate::error::Result;
use crate::gpu::Gpu;
use crate::quant::gpu_layout::GpuFormat;

pub enum Stacked {
    /// One matrix: its outputs side by side in the order stacked.
    One(GpuMatrix),
    Apart(Vec<GpuMatrix>),
}

impl Stacked {
    /// Stacks `mats` (in order) when they share format, width and table grouping, each
    /// is in one part, each ends on a word of scales and a table, and the whole fits
    /// one binding; otherwise keeps them apart.
    pub fn stack(gpu: &Gpu, name: &str, mats: Vec<GpuMatrix>) -> Result<Stacked> {
        if !stackable(gpu, &mats) {
            return Ok(Stacked::Apart(mats));
        }
        let qs_bytes = mats.iter().map(|m| m.packed_bytes().0).sum();
        let qs = gpu.storage(&format!("{name} qs"), qs_bytes)?;
        let scales = if has_scales(mats[0].format) {
            let bytes = mats.iter().map(|m| m.packed_bytes().1).sum();
            gpu.storage(&format!("{name} scales"), bytes)?
        } else {
            gpu.storage(&format!("{name} scales"), 4)?
        };
        // A shadow device's buffers are placeholders: there is nothing to copy.
        if !gpu.is_shadow() {
            copy_into(gpu, &mats, &qs, &scales);
        }
        let rows = mats.iter().map(|m| m.rows).sum();
        Ok(Stacked::One(GpuMatrix {
            format: mats[0].format,
            rows,
            cols: mats[0].cols,
            lut_rows: mats[0].lut_rows,
            parts: vec![Part::new(gpu, 0, rows, qs, scales)?],
        }))
    }

    /// The matrices to run, each with the output row it starts at.
    pub fn mats(&self) -> Vec<(&GpuMatrix, usize)> {
        match self {
            Stacked::One(m) => vec![(m, 0)],
            Stacked::Apart(ms) => {
                let mut row = 0;
                ms.iter()
                    .map(|m| {
                        row += m.rows;
                        (m, row - m.rows)
                    })
                    .collect()
            }
        }
    }

    pub fn bytes(&self) -> u64 {
        self.mats().iter().map(|(m, _)| m.bytes()).sum()
    }
}

/// Each matrix's values and scales, one after another, into `qs` and `scales`.
fn copy_into(gpu: &Gpu, mats: &[GpuMatrix], qs: &wgpu::Buffer, scales: &wgpu::Buffer) {
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    let (mut q_at, mut s_at) = (0, 0);
    for m in mats {
        let p = &m.parts[0];
        enc.copy_buffer_to_buffer(&p.qs, 0, qs, q_at, p.qs.size());
        q_at += p.qs.size();
        if has_scales(m.format) {
            enc.copy_buffer_to_buffer(&p.scales, 0, scales, s_at, p.scales.size());
            s_at += p.scales.size();
        }
    }
    gpu.queue.submit([enc.finish()]);
}

/// F32 and F16 matrices have no scales (one dummy word).
fn has_scales(f: GpuFormat) -> bool {
    !matches!(f, GpuFormat::F32 | GpuFormat::F16)
}

fn stackable(gpu: &Gpu, mats: &[GpuMatrix]) -> bool {
    let Some(first) = mats.first() else {
        return false;
    };
    let same = mats.iter().all(|m| {
        m.parts.len() == 1
            && m.format == first.format
            && m.cols == first.cols
            && m.lut_rows == first.lut_rows
    });
    // Every matrix but the last must end where its scales end: on a whole word of
    // half scales (two per word), on a whole lookup table.
    let blocks = first.cols / 32;
    let aligned = mats[..mats.len() - 1].iter().all(|m| {
        let halves_ok = !m.format.has_half_scales() || (m.rows * blocks).is_multiple_of(2);
        let tables_ok = !m.format.is_palette() || m.rows.is_multiple_of(m.lut_rows.max(1));
        halves_ok && tables_ok
    });
    // Sizes from shapes, not buffers: a shadow device's matrices stack as the real do.
    let total = |f: fn((u64, u64)) -> u64| mats.iter().map(|m| f(m.packed_bytes())).sum::<u64>();
    let fits = total(|b| b.0).max(total(|b| b.1)) <= gpu.max_binding();
    same && aligned && fits
}
