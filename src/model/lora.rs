//! LoRA updates as the forwards apply them: per layer and projection, A and B (B
//! scaled, in the GGUF row order), kept apart from the base weights as y = W·x +
//! B·(A·x) so switching costs nothing; `merge_into` gives the CPU reference W + B·A.
//! `adapters` reads PEFT files into these.

use super::{PerProj, Proj, Weights};

/// One projection's low-rank update, ready to apply: `a` is `[rank][cols]`, `b` is
/// `[rows][rank]` already multiplied by the scale and in the GGUF row order.
#[derive(Clone, Debug)]
pub struct Lora {
    pub rank: usize,
    pub rows: usize,
    pub cols: usize,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    /// The file stored 16-bit values (kept 16-bit on the GPU).
    pub half: bool,
}

/// An adapter: per layer, per projection, an optional update.
#[derive(Clone, Debug)]
pub struct Adapter {
    pub rank: usize,
    pub scale: f32,
    pub layers: Vec<PerProj<Option<Lora>>>,
}

impl Adapter {
    /// Bytes of adapter weights (f32 on the CPU).
    pub fn bytes(&self) -> u64 {
        self.loras()
            .map(|l| 4 * (l.a.len() + l.b.len()) as u64)
            .sum()
    }

    pub fn loras(&self) -> impl Iterator<Item = &Lora> {
        self.layers
            .iter()
            .flat_map(|l| l.iter().filter_map(|(_, lora)| lora.as_ref()))
    }
}

/// `task` on top of `base` as one adapter: where both update a projection, the update
/// is both at once (A's rows stacked, B's columns side by side: B·A = B₁·A₁ + B₂·A₂,
/// each B carrying its own scale), so a task adapter trained on a recovered model runs
/// with its recovery adapter under it, at the cost of the two ranks together.
pub fn stack(base: &Adapter, task: &Adapter) -> Adapter {
    let layers = base
        .layers
        .iter()
        .zip(&task.layers)
        .map(|(b, t)| {
            let mut out = PerProj::<Option<Lora>>::default();
            for p in Proj::ALL {
                out[p] = match (&b[p], &t[p]) {
                    (Some(x), Some(y)) => Some(concat(x, y)),
                    (x, y) => x.clone().or_else(|| y.clone()),
                };
            }
            out
        })
        .collect();
    Adapter {
        rank: base.rank + task.rank,
        scale: 1.0,
        layers,
    }
}

fn concat(x: &Lora, y: &Lora) -> Lora {
    let rank = x.rank + y.rank;
    let mut b = Vec::with_capacity(x.rows * rank);
    for r in 0..x.rows {
        b.extend_from_slice(&x.b[r * x.rank..][..x.rank]);
        b.extend_from_slice(&y.b[r * y.rank..][..y.rank]);
    }
    Lora {
        rank,
        rows: x.rows,
        cols: x.cols,
        a: [&x.a[..], &y.a[..]].concat(),
        b,
        half: x.half && y.half,
    }
}

/// W += B·A for every update (the CPU reference of an adapted model).
pub fn merge_into(w: &mut Weights, adapter: &Adapter) {
    for (layer, loras) in w.layers.iter_mut().zip(&adapter.layers) {
        for (p, lora) in loras.iter() {
            let target = layer.proj_mut(p);
            if let Some(l) = lora {
                for r in 0..l.rows {
                    let row = &mut target[r * l.cols..][..l.cols];
                    for k in 0..l.rank {
                        let bk = l.b[r * l.rank + k];
                        row.iter_mut()
                            .zip(&l.a[k * l.cols..][..l.cols])
                            .for_each(|(w, a)| *w += bk * a);
                    }
                }
            }
        }
    }
}
