//! Pipelines compiled from the header alone. A model's pipelines depend on its shapes,
//! formats and session options, never on its weights: a shadow model — the real one's
//! matrices, norms and session on a shadow device (`Gpu::shadow`, placeholder buffers)
//! — records a session's every step before the first weight byte is read. Its plans
//! are dropped; the pipelines stay in the `Kernels` the real model then shares. In the
//! browser `createComputePipeline` returns at once and the GPU process compiles while
//! the weights download; natively the compile simply moves ahead of the upload.

use super::{GpuModel, Uploaded};
use crate::engine::backend::SessionOptions;
use crate::engine::gpu::GpuSession;
use crate::error::Result;
use crate::gpu::Gpu;
use crate::kernels::matmul::GpuMatrix;
use crate::kernels::Kernels;
use crate::model::weights::{Reads, Role};
use crate::model::Config;
use crate::quant::gpu_layout;
use std::collections::HashMap;
use std::sync::Arc;

/// Compiles, into `kernels`, every pipeline a session of `opts` runs on the model the
/// header `gguf` describes (with its tensors' `roles`): the work `GpuSession::warm`
/// would do after the upload, done before it.
pub(super) fn precompile(
    gpu: &Gpu,
    kernels: &Arc<Kernels>,
    config: &Config,
    reads: &Reads,
    opts: &SessionOptions,
) -> Result<()> {
    let shadow = gpu.shadow();
    let up = stand_ins(&shadow, reads)?;
    let model = GpuModel::assemble(shadow, kernels.clone(), config.clone(), up)?;
    GpuSession::new(&model, opts.clone())?.warm(&model)
}

/// A placeholder for every tensor the model reads, of its real format and shape.
fn stand_ins(shadow: &Gpu, reads: &Reads) -> Result<HashMap<String, Uploaded>> {
    let max = shadow.max_binding();
    let mut up = HashMap::new();
    for t in &reads.tensors {
        let (name, u) = match reads.roles.get(&t.name) {
            Some(Role::Whole(s)) if s.matrix => {
                let format = GpuMatrix::format_of(t.ty, s.cols)?;
                let m = GpuMatrix::empty(shadow, &t.name, format, 0, (s.rows, s.cols), max)?;
                (&t.name, Uploaded::Matrix(m))
            }
            Some(Role::Whole(_)) => {
                // Values matter to no pipeline; ones keep the RoPE table finite.
                let v = vec![1.0; t.n_elements as usize];
                (
                    &t.name,
                    Uploaded::Vector(shadow.upload_f32(&t.name, &v)?, v),
                )
            }
            Some(Role::Indices(s, bits, lut_rows)) => {
                let format = gpu_layout::palette_format(*bits)?;
                let shape = (s.rows, s.cols);
                let m = GpuMatrix::empty(shadow, &s.name, format, *lut_rows, shape, max)?;
                (&s.name, Uploaded::Matrix(m))
            }
            Some(Role::Tables(_) | Role::Adapter) | None => continue,
        };
        up.insert(name.clone(), u);
    }
    Ok(up)
}
