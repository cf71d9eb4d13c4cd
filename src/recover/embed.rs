//! Writes a compressed model with its recovery adapter inside (`adapters::recovery`
//! says the layout): every tensor and key of the model as it was (a previous
//! recovery adapter's left out), the adapter's A and B in f16 and its keys.

use super::refit::Replacements;
use crate::adapters::{recovery, Adapter};
use crate::convert::write_atomically;
use crate::error::Result;
use crate::gguf::{split::open_model, TensorReader, Value, Writer};
use crate::model::{Config, Proj};
use crate::quant::GgmlType;
use std::path::Path;

/// The metadata key that says how a file's tables and norms were refit (`refit`).
pub const REFIT: &str = "pippin.palette.refit";

/// Writes `output`: `model` with `adapter` (as `adapters::parse` reads a PEFT folder:
/// B scaled and in GGUF's row order) of its `alpha`, if any, and the `refit` tensors in
/// place of the model's own; `source` names what it recovers, `trained` how.
pub fn embed(
    model: &Path,
    adapter: Option<(&Adapter, f32)>,
    source: &str,
    trained: &str,
    refit: &Replacements,
    output: &Path,
) -> Result<u64> {
    let (g, mut files) = open_model(model)?;
    let c = Config::from_gguf(&g)?;
    let mut w = Writer::new();
    for (k, v) in g.metadata.iter() {
        // One file now: split keys describe the input's parts, not this file.
        if !k.starts_with("pippin.recovery.") && !k.starts_with("split.") && k != REFIT {
            w.meta(k, v.clone());
        }
    }
    if let Some((adapter, alpha)) = adapter {
        w.meta(recovery::RANK, Value::U32(adapter.rank as u32));
        w.meta(recovery::ALPHA, Value::F32(alpha));
        w.meta(recovery::SOURCE, Value::Str(source.to_string()));
        w.meta(recovery::TRAINED, Value::Str(trained.to_string()));
    }
    if !refit.is_empty() {
        w.meta(REFIT, Value::Str(format!("against {source}: {trained}")));
    }
    for t in &g.tensors {
        if recovery::parse_name(&t.name).is_some() {
            continue;
        }
        let bytes = match refit.get(&t.name) {
            Some(v) => super::refit::encode(v, t.ty, &t.dims, &t.name)?,
            None => files.read_tensor_of(&g, t)?,
        };
        w.tensor(&t.name, &t.dims, t.ty, bytes)?;
    }
    if let Some(name) = refit.keys().find(|n| g.tensor(n).is_none()) {
        return Err(crate::Error::invalid(format!(
            "the refit names {name}, which {} does not have",
            model.display()
        )));
    }
    let f16 = |v: &[f32]| {
        let n = [v.len() as u64];
        super::refit::encode(v, GgmlType::F16, &n, "the recovery adapter")
    };
    let Some((adapter, _)) = adapter else {
        return write_atomically(&w, output);
    };
    let unscale = 1.0 / adapter.scale;
    for (layer, l) in adapter.layers.iter().enumerate() {
        for p in Proj::ALL {
            let Some(u) = &l[p] else { continue };
            let (rows, cols) = p.shape(&c);
            let (r, c64) = (u.rank as u64, cols as u64);
            w.tensor(
                &recovery::tensor_name(layer, p, true),
                &[c64, r],
                GgmlType::F16,
                f16(&u.a)?,
            )?;
            let b: Vec<f32> = u.b.iter().map(|v| v * unscale).collect();
            let dims = [r, rows as u64];
            w.tensor(
                &recovery::tensor_name(layer, p, false),
                &dims,
                GgmlType::F16,
                f16(&b)?,
            )?;
        }
    }
    write_atomically(&w, output)
}

/// `embed` with what a `recover` folder holds: the PEFT adapter and the refit (either
/// may be missing: a refit alone trains no adapter).
pub fn embed_peft(
    model: &Path,
    dir: &Path,
    source: &str,
    trained: &str,
    output: &Path,
) -> Result<u64> {
    let (g, _) = crate::gguf::Gguf::open(model)?;
    let c = Config::from_gguf(&g)?;
    let refit = super::refit::load(dir)?;
    if !refit.is_empty() && !dir.join("adapter_model.safetensors").exists() {
        return embed(model, None, source, trained, &refit, output);
    }
    let read = |f: &str| {
        std::fs::read(dir.join(f)).map_err(|e| {
            crate::Error::invalid(format!("cannot read {}: {e}", dir.join(f).display()))
        })
    };
    let config = read("adapter_config.json")?;
    let cfg: crate::adapters::LoraConfig = serde_json::from_slice(&config)
        .map_err(|e| crate::Error::invalid(format!("adapter_config.json: {e}")))?;
    let adapter = crate::adapters::parse(&config, &read("adapter_model.safetensors")?, &c)?;
    let alpha = if cfg.use_rslora {
        // Stored as plain LoRA: the same scale as alpha' / rank.
        adapter.scale * adapter.rank as f32
    } else {
        cfg.lora_alpha
    };
    embed(
        model,
        Some((&adapter, alpha)),
        source,
        trained,
        &refit,
        output,
    )
}
