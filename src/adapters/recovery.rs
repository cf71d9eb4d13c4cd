//! A recovery adapter inside its model's GGUF (`pippin convert --recover`): the
//! compressed model and the LoRA updates that bring it back to the original's quality
//! travel, load and cache as one file, and every loader applies the updates unless
//! told not to. Tensors `blk.N.<matrix>.recovery_a` (`[rank][in]`) and `.recovery_b`
//! (`[out][rank]`, GGUF's row order, unscaled), F16 or F32; metadata
//! `pippin.recovery.{rank,alpha}` and, for people, `.source` and `.trained`.

use super::{Adapter, Lora};
use crate::error::{Error, Result};
use crate::gguf::{Gguf, Metadata};
use crate::model::arch::LayerTensor;
use crate::model::weights::{Reads, Role};
use crate::model::{Config, PerProj, Proj};
use crate::quant::GgmlType;

pub const RANK: &str = "pippin.recovery.rank";
pub const ALPHA: &str = "pippin.recovery.alpha";
pub const SOURCE: &str = "pippin.recovery.source";
pub const TRAINED: &str = "pippin.recovery.trained";

/// The tensor holding layer `layer`'s A (or B) of projection `p`.
pub fn tensor_name(layer: usize, p: Proj, a: bool) -> String {
    let half = if a { "recovery_a" } else { "recovery_b" };
    format!("blk.{layer}.{}.{half}", LayerTensor::of(p).gguf())
}

/// (layer, projection, is A) of a recovery tensor's name.
pub fn parse_name(name: &str) -> Option<(usize, Proj, bool)> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (matrix, half) = rest.rsplit_once('.')?;
    let a = match half {
        "recovery_a" => true,
        "recovery_b" => false,
        _ => return None,
    };
    let p = Proj::ALL
        .into_iter()
        .find(|&p| LayerTensor::of(p).gguf() == matrix)?;
    Some((layer.parse().ok()?, p, a))
}

/// Adds the file's recovery tensors to what a loader reads (as `Role::Adapter`).
pub fn add_reads(g: &Gguf, reads: &mut Reads) {
    if !present(&g.metadata) {
        return;
    }
    for t in g.tensors.iter().filter(|t| parse_name(&t.name).is_some()) {
        reads.roles.insert(t.name.clone(), Role::Adapter);
        reads.tensors.push(t.clone());
    }
    reads.tensors.sort_by_key(|t| (t.shard, t.offset));
}

/// The bytes of the tensors a loader read as `Role::Adapter`, by name.
pub type Tensors = std::collections::HashMap<String, (GgmlType, Vec<u8>)>;

/// Whether the file says it carries a recovery adapter.
pub fn present(md: &Metadata) -> bool {
    md.get(RANK).is_some()
}

/// The adapter of a file's recovery tensors: `tensors` gives each one's type and bytes
/// by name (`None`: absent). Checked against the model `c` with errors that name the
/// tensor.
pub fn read(
    md: &Metadata,
    c: &Config,
    mut tensors: impl FnMut(&str) -> Option<(GgmlType, Vec<u8>)>,
) -> Result<Adapter> {
    let bad = |m: String| Error::gguf(format!("recovery adapter: {m}"));
    let rank = md
        .u64(RANK)
        .ok_or_else(|| bad(format!("{RANK} is not a number")))? as usize;
    let alpha = md
        .f64(ALPHA)
        .ok_or_else(|| bad(format!("{ALPHA} is not a number")))? as f32;
    if rank == 0 || rank > 256 || !alpha.is_finite() {
        return Err(bad(format!("rank {rank}, alpha {alpha}")));
    }
    let scale = alpha / rank as f32;
    let mut layers = Vec::with_capacity(c.n_layers);
    let mut found = 0;
    for layer in 0..c.n_layers {
        let mut l = PerProj::<Option<Lora>>::default();
        for p in Proj::ALL {
            let (an, bn) = (tensor_name(layer, p, true), tensor_name(layer, p, false));
            let (a, b) = match (tensors(&an), tensors(&bn)) {
                (None, None) => continue,
                (Some(a), Some(b)) => (a, b),
                _ => return Err(bad(format!("{an} and {bn} come in pairs"))),
            };
            let (rows, cols) = p.shape(c);
            let a = values(&an, a, rank * cols)?;
            let b = values(&bn, b, rows * rank)?;
            l[p] = Some(Lora {
                rank,
                rows,
                cols,
                half: a.1 && b.1,
                a: a.0,
                b: b.0.iter().map(|v| v * scale).collect(),
            });
            found += 1;
        }
        layers.push(l);
    }
    if found == 0 {
        return Err(bad("the file names no recovery tensors".into()));
    }
    Ok(Adapter {
        rank,
        scale,
        layers,
    })
}

/// A tensor's f32 values (and whether it was 16-bit), `n` of them.
fn values(name: &str, (ty, bytes): (GgmlType, Vec<u8>), n: usize) -> Result<(Vec<f32>, bool)> {
    let half = match ty {
        GgmlType::F16 => true,
        GgmlType::F32 => false,
        other => {
            return Err(Error::gguf(format!(
                "recovery adapter: {name} is {other} (F16 or F32)"
            )))
        }
    };
    if ty.bytes_for(n as u64) != Some(bytes.len() as u64) {
        return Err(Error::gguf(format!(
            "recovery adapter: {name} holds {} bytes, not {n} values",
            bytes.len()
        )));
    }
    Ok((crate::quant::dequant::dequantize(ty, &bytes, n)?, half))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Proj::ALL {
            for a in [true, false] {
                assert_eq!(parse_name(&tensor_name(29, p, a)), Some((29, p, a)));
            }
        }
        assert_eq!(parse_name("blk.0.attn_q.weight"), None);
        assert_eq!(parse_name("blk.x.attn_q.recovery_a"), None);
    }
}
