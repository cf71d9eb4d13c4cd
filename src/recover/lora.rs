//! The trained low-rank updates: per layer and projection, A `[rank][in]` and B
//! `[out][rank]` as candle variables, initialized as PEFT initializes them (A uniform
//! within ±1/√in, B zero: the adapter starts as the identity), and their PEFT form.

use super::tensors::ce;
use crate::adapters::{needs_permutation, reorder_rows, PeftLora, RowOrder};
use crate::error::Result;
use crate::model::{Config, Proj};
use crate::rng::Rng;
use candle_core::{Device, Tensor, Var};

pub struct Update {
    pub a: Var,
    pub b: Var,
}

pub struct Loras {
    pub rank: usize,
    pub alpha: f32,
    /// alpha / rank: y = W·x + scale · B·(A·x).
    pub scale: f32,
    layers: Vec<[Option<Update>; 7]>,
}

impl Loras {
    /// Fresh updates of `modules` in every layer of `c`, deterministic for `seed`.
    pub fn new(c: &Config, rank: usize, alpha: f32, modules: &[Proj], seed: u64) -> Result<Loras> {
        let mut rng = Rng::new(seed);
        let mut layers = Vec::with_capacity(c.n_layers);
        for _ in 0..c.n_layers {
            let mut l: [Option<Update>; 7] = Default::default();
            for p in Proj::ALL.into_iter().filter(|p| modules.contains(p)) {
                let (rows, cols) = p.shape(c);
                let bound = 1.0 / (cols as f32).sqrt();
                let a: Vec<f32> = (0..rank * cols)
                    .map(|_| (rng.next_f32() * 2.0 - 1.0) * bound)
                    .collect();
                let a =
                    Var::from_tensor(&Tensor::from_vec(a, (rank, cols), &Device::Cpu).map_err(ce)?)
                        .map_err(ce)?;
                let b =
                    Var::zeros((rows, rank), candle_core::DType::F32, &Device::Cpu).map_err(ce)?;
                l[p.index()] = Some(Update { a, b });
            }
            layers.push(l);
        }
        Ok(Loras {
            rank,
            alpha,
            scale: alpha / rank as f32,
            layers,
        })
    }

    pub fn get(&self, layer: usize, p: Proj) -> Option<&Update> {
        self.layers.get(layer)?[p.index()].as_ref()
    }

    /// Every variable, A before B, in layer and projection order (the optimizer's and
    /// the checkpoint's order).
    pub fn vars(&self) -> Vec<&Var> {
        self.layers
            .iter()
            .flat_map(|l| l.iter().flatten().flat_map(|u| [&u.a, &u.b]))
            .collect()
    }

    /// The updates as PEFT stores them: B's rows back in Hugging Face's order.
    pub fn to_peft(&self, c: &Config) -> Result<Vec<PeftLora>> {
        let mut out = Vec::new();
        for (layer, l) in self.layers.iter().enumerate() {
            for (p, u) in Proj::ALL.into_iter().zip(l) {
                let Some(u) = u else { continue };
                let flat = |v: &Var| v.as_tensor().flatten_all().and_then(|t| t.to_vec1::<f32>());
                let a = flat(&u.a).map_err(ce)?;
                let mut b = flat(&u.b).map_err(ce)?;
                if let Some(heads) = needs_permutation(c, p) {
                    b = reorder_rows(&b, self.rank, heads, c.head_dim, RowOrder::HuggingFace);
                }
                out.push(PeftLora {
                    layer,
                    proj: p,
                    a,
                    b,
                });
            }
        }
        Ok(out)
    }
}
