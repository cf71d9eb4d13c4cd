//! The training state beside the adapter (`recover-state.safetensors`): every LoRA
//! variable and both Adam moments in f32, the step reached and the options that
//! shaped them, so `--resume` goes on exactly where a run stopped — and refuses a
//! state made with other options.

use super::adam::Adam;
use super::tensors::ce;
use super::Options;
use crate::adapters::write::tensor;
use crate::error::{Error, Result};
use candle_core::{Device, Tensor, Var};
use safetensors::{serialize, SafeTensors};
use std::collections::HashMap;
use std::path::Path;

pub const FILE: &str = "recover-state.safetensors";

/// The options and data a state depends on (the calibration tokens decide the
/// order of sequences, so another text would not go on as the run would have).
fn shape_of(o: &Options, calibration: &[u32]) -> String {
    let modules: Vec<&str> = o.modules.iter().map(|p| p.hf_name()).collect();
    let bytes: Vec<u8> = calibration.iter().flat_map(|t| t.to_le_bytes()).collect();
    let data = crate::engine::prefix_cache::Fingerprint::default()
        .with(&bytes)
        .value();
    format!(
        "rank={} alpha={} modules={} batch={} seq_len={} lr={} seed={} steps={} tokens={} data={data:016x}{}",
        o.rank,
        o.alpha,
        modules.join(","),
        o.batch,
        o.seq_len,
        o.lr,
        o.seed,
        o.steps,
        calibration.len(),
        refit_shape(o)
    )
}

/// The refit's options, only where one is on (states from before it stay valid).
fn refit_shape(o: &Options) -> String {
    let mut s = String::new();
    if o.tables {
        s += &format!(" tables={}", o.table_lr);
    }
    if o.norms {
        s += &format!(" norms={}", o.norm_lr);
    }
    if o.indices {
        s += &format!(" indices={}", o.index_lr);
    }
    s
}

/// A variable's values as a `[rows][cols]` matrix (a vector, a norm's, as one row).
fn values(t: &Tensor) -> Result<(Vec<f32>, usize, usize)> {
    let (r, c) = match t.dims() {
        &[n] => (1, n),
        _ => t.dims2().map_err(ce)?,
    };
    Ok((t.flatten_all().and_then(|x| x.to_vec1()).map_err(ce)?, r, c))
}

pub fn save(
    path: &Path,
    o: &Options,
    calibration: &[u32],
    vars: &[&Var],
    adam: &Adam,
) -> Result<()> {
    let mut named = Vec::new();
    for (i, var) in vars.iter().enumerate() {
        for (kind, t) in [("w", var.as_tensor()), ("m", &adam.m[i]), ("v", &adam.v[i])] {
            let (v, r, c) = values(t)?;
            named.push((format!("{kind}.{i}"), tensor(&v, r, c, false)));
        }
    }
    let meta = HashMap::from([
        ("step".to_string(), adam.step.to_string()),
        ("options".to_string(), shape_of(o, calibration)),
    ]);
    let views: Vec<(String, &_)> = named.iter().map(|(n, t)| (n.clone(), t)).collect();
    let bytes =
        serialize(views, Some(meta)).map_err(|e| Error::Internal(format!("checkpoint: {e}")))?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

pub fn load(
    path: &Path,
    o: &Options,
    calibration: &[u32],
    vars: &[&Var],
    adam: &mut Adam,
) -> Result<()> {
    let bad = |m: String| Error::invalid(format!("--resume: {}: {m}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| bad(e.to_string()))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    let made_with = meta.get("options").cloned().unwrap_or_default();
    let this = shape_of(o, calibration);
    if made_with != this {
        return Err(bad(format!(
            "made with {made_with:?}, this run has {this:?}"
        )));
    }
    let step: usize = meta
        .get("step")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no step recorded".into()))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
    let read = |name: String, like: &Tensor| -> Result<Tensor> {
        let t = st
            .tensor(&name)
            .map_err(|_| bad(format!("{name} is missing")))?;
        let count: usize = t.shape().iter().product();
        if count != like.elem_count() || t.dtype() != safetensors::Dtype::F32 {
            return Err(bad(format!("{name} has another shape")));
        }
        let v: Vec<f32> = t
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Tensor::from_vec(v, like.shape(), &Device::Cpu).map_err(ce)
    };
    for (i, var) in vars.iter().enumerate() {
        var.set(&read(format!("w.{i}"), var.as_tensor())?)
            .map_err(ce)?;
        adam.m[i] = read(format!("m.{i}"), &adam.m[i])?;
        adam.v[i] = read(format!("v.{i}"), &adam.v[i])?;
    }
    adam.step = step;
    Ok(())
}
