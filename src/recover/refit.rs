//! What recovery trains besides the adapter: the palettes' tables and the norms.
//!
//! A palettized matrix is `W[r][c] = table[group(r)][index[r][c]]`: its indices stay
//! fixed, its table entries are parameters like any other, and the loss's gradient
//! reaches each entry as the sum of `∂L/∂W` over the weights that use it (codebook
//! fine-tuning, as AQLM and SqueezeLLM do after their k-means). The k-means tables
//! minimize the weights' error; trained, they minimize the model's divergence. The
//! RMSNorm weights scale the columns of the matrices they feed (Q, K, V, gate, up):
//! a diagonal correction no low-rank update can make. Both go back into the
//! palettized file in place of what they replace, so they cost no bytes.

use super::tensors::{ce, contiguous_f32, matmul_t, R};
use crate::error::{Error, Result};
use crate::gguf::{Gguf, TensorReader};
use crate::model::arch::LayerTensor;
use crate::model::weights::{locate, Stored};
use crate::model::{Config, Proj};
use crate::par::*;
use crate::quant::palette::Palettized;
use crate::quant::GgmlType;
use candle_core::{CpuStorage, CustomOp2, Device, Layout, Shape, Tensor, Var};
use safetensors::tensor::{Dtype, TensorView};
use std::collections::HashMap;
use std::sync::Arc;

/// A palettized matrix's fixed part: its indices and how rows share tables.
#[derive(Clone)]
pub struct Indices {
    pub rows: usize,
    pub cols: usize,
    pub rows_per_lut: usize,
    pub entries: usize,
    indices: Arc<Vec<u8>>,
}

impl Indices {
    pub fn of(p: &Palettized) -> Indices {
        Indices {
            rows: p.rows,
            cols: p.cols,
            rows_per_lut: p.rows_per_lut,
            entries: p.entries(),
            indices: Arc::new(p.indices.clone()),
        }
    }

    /// The same shape with other indices (`[rows][cols]`).
    pub fn with(&self, indices: Vec<u8>) -> Indices {
        debug_assert_eq!(indices.len(), self.rows * self.cols);
        Indices {
            indices: Arc::new(indices),
            ..self.clone()
        }
    }

    pub fn groups(&self) -> usize {
        self.rows.div_ceil(self.rows_per_lut)
    }

    /// The matrix `[rows][cols]` the tables `[groups][entries]` make.
    pub(super) fn weight(&self, lut: &[f32]) -> Vec<f32> {
        let mut w = vec![0f32; self.rows * self.cols];
        w.par_chunks_mut(self.cols)
            .zip(self.indices.par_chunks(self.cols))
            .enumerate()
            .for_each(|(r, (out, idx))| {
                let t = &lut[r / self.rows_per_lut * self.entries..][..self.entries];
                out.iter_mut()
                    .zip(idx)
                    .for_each(|(o, &i)| *o = t[i as usize]);
            });
        w
    }

    /// `∂L/∂table` from `∂L/∂W`: each entry sums the gradients of the weights using it.
    pub(super) fn table_gradient(&self, gw: &[f32]) -> Vec<f32> {
        let mut g = vec![0f32; self.groups() * self.entries];
        let span = self.rows_per_lut * self.cols;
        g.par_chunks_mut(self.entries)
            .zip(gw.par_chunks(span).zip(self.indices.par_chunks(span)))
            .for_each(|(out, (gw, idx))| {
                gw.iter().zip(idx).for_each(|(&v, &i)| out[i as usize] += v);
            });
        g
    }
}

/// `x · Wᵀ` for `W` made from the tables (the op's second input): the backward gives
/// both `x` and the tables their gradients.
pub struct PaletteLinear(pub Indices);

impl CustomOp2 for PaletteLinear {
    fn name(&self) -> &'static str {
        "palette-linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> R<(CpuStorage, Shape)> {
        let lut = contiguous_f32(s2, l2, self.name())?;
        forward(&self.0, lut, contiguous_f32(s1, l1, self.name())?, l1)
    }

    fn bwd(
        &self,
        x: &Tensor,
        lut: &Tensor,
        _y: &Tensor,
        g: &Tensor,
    ) -> R<(Option<Tensor>, Option<Tensor>)> {
        let table = lut.flatten_all()?.to_vec1::<f32>()?;
        let (gx, gw) = backward(&self.0, &table, x, g)?;
        let gt = Tensor::from_vec(self.0.table_gradient(&gw), lut.shape(), &Device::Cpu)?;
        Ok((Some(gx), Some(gt)))
    }
}

/// `x · Wᵀ` (`x` laid out as `l`), `W` made from `lut` by `i`, as a custom op returns it.
pub(super) fn forward(i: &Indices, lut: &[f32], x: &[f32], l: &Layout) -> R<(CpuStorage, Shape)> {
    let x = Tensor::from_slice(x, l.shape(), &Device::Cpu)?;
    let w = Tensor::from_vec(i.weight(lut), (i.rows, i.cols), &Device::Cpu)?;
    let y = matmul_t(&x, &w)?;
    let shape = y.shape().clone();
    Ok((CpuStorage::F32(y.flatten_all()?.to_vec1()?), shape))
}

/// The gradients of `x` and of `W` (`[rows][cols]`, flat) for `y = x · Wᵀ`, `W` made
/// from `lut` by `i`, given `g = ∂L/∂y`.
pub(super) fn backward(i: &Indices, lut: &[f32], x: &Tensor, g: &Tensor) -> R<(Tensor, Vec<f32>)> {
    let w = Tensor::from_vec(i.weight(lut), (i.rows, i.cols), &Device::Cpu)?;
    let g2 = g.reshape(((), i.rows))?;
    let x2 = x.reshape(((), i.cols))?;
    let gx = g2.matmul(&w)?.reshape(x.shape())?;
    let gw = g2.t()?.matmul(&x2)?.flatten_all()?.to_vec1::<f32>()?;
    Ok((gx, gw))
}

/// A palettized matrix with the names of its two tensors.
pub struct Palette {
    pub lut: String,
    pub idx: String,
    pub matrix: Palettized,
}

/// A layer's palettized matrices by projection (`None` where one is not palettized).
pub type LayerPalettes = [Option<Palette>; 7];

/// A trained variable that replaces a tensor of the file: a table or a norm (its
/// values), or a matrix's latent weights (the indices of their nearest entries in
/// `nearest_in`'s tables, `qat`). `group` is its Adam group.
pub struct Refit {
    pub name: String,
    pub var: Var,
    pub group: usize,
    nearest_in: Option<(Var, Indices)>,
}

impl Refit {
    pub fn plain(name: String, var: Var, group: usize) -> Refit {
        Refit {
            name,
            var,
            group,
            nearest_in: None,
        }
    }

    pub fn latent(name: String, var: Var, group: usize, tables: (Var, Indices)) -> Refit {
        Refit {
            name,
            var,
            group,
            nearest_in: Some(tables),
        }
    }

    /// What goes into the file: the values, or the indices the latent weights choose.
    fn stored(&self) -> Result<Vec<f32>> {
        let v = values(self.var.as_tensor())?;
        let Some((table, shape)) = &self.nearest_in else {
            return Ok(v);
        };
        let lut = values(table.as_tensor())?;
        let idx = assign(shape, &v, &lut);
        Ok(idx.into_iter().map(f32::from).collect())
    }
}

/// The palettized matrices of a compressed file, by layer.
pub fn palettes(g: &Gguf, r: &mut impl TensorReader, c: &Config) -> Result<Vec<LayerPalettes>> {
    let family = c.arch.family();
    let mut out = Vec::with_capacity(c.n_layers);
    for l in 0..c.n_layers {
        let mut layer: LayerPalettes = Default::default();
        for p in Proj::ALL {
            let spec = family.layer_spec(LayerTensor::of(p), c, l);
            if spec.rows_of.is_some() || g.tensor(&spec.name).is_some() {
                continue;
            }
            if let Ok(Stored::Palette(t)) = locate(g, &spec) {
                layer[p.index()] = Some(Palette {
                    lut: t.lut.name.clone(),
                    idx: t.idx.name.clone(),
                    matrix: t.read(g, r, (spec.rows, spec.cols))?,
                });
            }
        }
        out.push(layer);
    }
    Ok(out)
}

/// A trained vector or table as the file stores the tensor it replaces (`dims` its
/// shape), or a matrix's indices (one value each) packed as its `.pidx` tensor.
pub fn encode(values: &[f32], ty: GgmlType, dims: &[u64], name: &str) -> Result<Vec<u8>> {
    let count: u64 = dims.iter().product();
    match ty {
        GgmlType::I32 => pack_indices(values, dims, name),
        _ if values.len() as u64 != count => Err(Error::invalid(format!(
            "the refit {name} has {} values; the model's tensor {dims:?}",
            values.len()
        ))),
        GgmlType::F32 => Ok(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        GgmlType::F16 => Ok(values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect()),
        _ => Err(Error::unsupported(format!(
            "recover: {name} is stored as {ty}; only f32 and f16 tensors are refit"
        ))),
    }
}

/// Indices (`rows × cols` values) packed as a `.pidx` tensor `[cols·bits/32, rows]`.
fn pack_indices(values: &[f32], dims: &[u64], name: &str) -> Result<Vec<u8>> {
    let bad = || Error::invalid(format!("the refit {name} does not fit its tensor {dims:?}"));
    let &[words, rows] = dims else {
        return Err(bad());
    };
    let (words, rows) = (words as usize, rows as usize);
    let cols = values.len().checked_div(rows).ok_or_else(bad)?;
    let bits = (words * 32).checked_div(cols).ok_or_else(bad)?;
    if !matches!(bits, 2 | 4) || cols * rows != values.len() || cols * bits != words * 32 {
        return Err(bad());
    }
    let top = (1usize << bits) as f32;
    if values
        .iter()
        .any(|&v| !(0.0..top).contains(&v) || v.fract() != 0.0)
    {
        return Err(bad());
    }
    let p = Palettized {
        bits: bits as u32,
        rows,
        cols,
        rows_per_lut: rows,
        indices: values.iter().map(|&v| v as u8).collect(),
        luts: Vec::new(),
    };
    Ok(p.stored().0)
}

/// Tensors that replace the file's own of the same name (the refit tables and norms),
/// as f32 values.
pub type Replacements = HashMap<String, Vec<f32>>;

/// A tensor's values (any shape) as f32.
pub fn values(t: &Tensor) -> Result<Vec<f32>> {
    t.flatten_all().and_then(|x| x.to_vec1()).map_err(ce)
}

/// The refit beside the adapter in a `recover` folder: every trained table and norm
/// under the name of the file's tensor it replaces (f32). PEFT ignores it; the
/// adapter was trained on top of it, so `embed_peft` writes both into the file.
pub const FILE: &str = "palette-refit.safetensors";

/// Writes the refit (or removes a stale one when nothing was refit): tables and norms
/// as f32, indices as u8.
pub fn save(path: &std::path::Path, refits: &[Refit]) -> Result<()> {
    if refits.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        };
    }
    let mut stored: Vec<(Dtype, usize, Vec<u8>)> = Vec::with_capacity(refits.len());
    for r in refits {
        let v = r.stored()?;
        stored.push(match r.nearest_in {
            Some(_) => (Dtype::U8, v.len(), v.iter().map(|&i| i as u8).collect()),
            None => (
                Dtype::F32,
                v.len(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ),
        });
    }
    let mut named = Vec::with_capacity(refits.len());
    for (r, (ty, n, bytes)) in refits.iter().zip(&stored) {
        let view = TensorView::new(*ty, vec![*n], bytes)
            .map_err(|e| Error::Internal(format!("refit: {e}")))?;
        named.push((r.name.clone(), view));
    }
    let bytes =
        safetensors::serialize(named, None).map_err(|e| Error::Internal(format!("refit: {e}")))?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The refit of a `recover` folder, empty where it has none.
pub fn load(dir: &std::path::Path) -> Result<Replacements> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Replacements::new()),
        Err(e) => return Err(e.into()),
    };
    let bad = |m: String| Error::invalid(format!("{}: {m}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
    let mut out = Replacements::new();
    for (name, t) in st.tensors() {
        let v = match t.dtype() {
            Dtype::F32 => t
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::U8 => t.data().iter().map(|&i| f32::from(i)).collect(),
            _ => return Err(bad(format!("{name} is neither f32 nor u8"))),
        };
        out.insert(name, v);
    }
    Ok(out)
}

/// Each weight's nearest entry in its row group's table (`lut` `[groups][entries]`,
/// in any order: trained tables do not stay sorted); ties go to the lower value.
pub fn assign(shape: &Indices, latent: &[f32], lut: &[f32]) -> Vec<u8> {
    let (cols, k) = (shape.cols, shape.entries);
    let mut out = vec![0u8; shape.rows * cols];
    let span = shape.rows_per_lut * cols;
    out.par_chunks_mut(span)
        .zip(latent.par_chunks(span))
        .enumerate()
        .for_each(|(g, (out, w))| {
            let table = &lut[g * k..][..k];
            let mut order: Vec<usize> = (0..k).collect();
            order.sort_by(|&a, &b| table[a].total_cmp(&table[b]));
            let sorted: Vec<f32> = order.iter().map(|&i| table[i]).collect();
            for (o, &v) in out.iter_mut().zip(w) {
                *o = order[crate::quant::palette::nearest(&sorted, v)] as u8;
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The op against candle's own autograd through an explicit gather: the same
    /// product, the same gradients for the input and for every table entry.
    #[test]
    fn the_palette_op_s_gradients_are_candle_s_through_a_gather() {
        // 37 rows over tables of 8: the last group is short.
        let (rows, cols, per, bits) = (37usize, 64usize, 8usize, 4u32);
        let mut rng = Rng::new(3);
        let entries = 1usize << bits;
        let groups = rows.div_ceil(per);
        let p = Palettized {
            bits,
            rows,
            cols,
            rows_per_lut: per,
            indices: (0..rows * cols)
                .map(|_| (rng.next_u64() % 16) as u8)
                .collect(),
            luts: (0..groups * entries)
                .map(|_| half::f16::from_f32(rng.next_f32() - 0.5))
                .collect(),
        };
        let lut: Vec<f32> = p.luts.iter().map(|h| h.to_f32()).collect();
        let x: Vec<f32> = (0..3 * 5 * cols).map(|_| rng.next_f32() - 0.5).collect();
        let dev = &Device::Cpu;
        let x = candle_core::Var::from_vec(x, (3, 5, cols), dev).unwrap();
        let t = candle_core::Var::from_vec(lut, (groups, entries), dev).unwrap();
        let weights: Vec<f32> = (0..3 * 5 * rows).map(|_| rng.next_f32()).collect();
        let weights = Tensor::from_vec(weights, (3, 5, rows), dev).unwrap();
        // Ours.
        let i = Indices::of(&p);
        let y = x
            .as_tensor()
            .apply_op2(t.as_tensor(), PaletteLinear(i.clone()))
            .unwrap();
        let loss = (&y * &weights).unwrap().sum_all().unwrap();
        let g = loss.backward().unwrap();
        // candle's: W = table[flat index], gathered.
        let ids: Vec<u32> = (0..rows * cols)
            .map(|k| ((k / cols / per) * entries + p.indices[k] as usize) as u32)
            .collect();
        let ids = Tensor::from_vec(ids, rows * cols, dev).unwrap();
        let w = t
            .as_tensor()
            .flatten_all()
            .unwrap()
            .index_select(&ids, 0)
            .unwrap();
        let w = w.reshape((rows, cols)).unwrap();
        let y2 = x.as_tensor().broadcast_matmul(&w.t().unwrap()).unwrap();
        let loss2 = (&y2 * &weights).unwrap().sum_all().unwrap();
        let g2 = loss2.backward().unwrap();
        // 1e-4 of the largest value: the two sum in different orders.
        let close = |a: &Tensor, b: &Tensor, what: &str| {
            let (a, b) = (values(a).unwrap(), values(b).unwrap());
            let scale = b.iter().fold(1f32, |m, v| m.max(v.abs()));
            crate::testing::assert_close(what, &a, &b, 1e-4 * scale);
        };
        close(&y, &y2, "y");
        let grad = |gs: &candle_core::backprop::GradStore, v: &candle_core::Var| {
            gs.get(v.as_tensor()).expect("a gradient").clone()
        };
        close(&grad(&g, &x), &grad(&g2, &x), "dx");
        close(&grad(&g, &t), &grad(&g2, &t), "dtable");
    }
}
