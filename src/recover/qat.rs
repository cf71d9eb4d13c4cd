//! Training which table entry each palettized weight uses (quantization-aware
//! training, as AFM's palettization does): every palettized weight keeps a latent f32
//! value, started at the original model's weight; the forward pass uses the table
//! entry nearest to it (so the model is the palettized one at step 0: k-means
//! assigned each weight its nearest entry), and the backward pass hands the latent the
//! gradient of the weight it stands for (the straight-through estimator). A weight
//! whose gradient keeps pushing it across the midpoint between two entries moves to
//! the other one — what fixed indices (`refit`) cannot do; the tables train too.

use super::refit::{assign, Indices};
use super::tensors::{contiguous_f32, R};
use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};

/// `x · Wᵀ` for `W` the tables' entries nearest to the latent weights (the op's
/// second and third inputs): the backward gives `x`, the tables and the latent
/// weights their gradients (the latent's is `∂L/∂W`, straight through).
pub struct PaletteQat(pub Indices);

impl PaletteQat {
    fn matrix(&self, latent: &[f32], lut: &[f32]) -> Indices {
        self.0.with(assign(&self.0, latent, lut))
    }
}

impl CustomOp3 for PaletteQat {
    fn name(&self) -> &'static str {
        "palette-qat"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> R<(CpuStorage, Shape)> {
        let lut = contiguous_f32(s2, l2, self.name())?;
        let i = self.matrix(contiguous_f32(s3, l3, self.name())?, lut);
        super::refit::forward(&i, lut, contiguous_f32(s1, l1, self.name())?, l1)
    }

    fn bwd(
        &self,
        x: &Tensor,
        lut: &Tensor,
        latent: &Tensor,
        _y: &Tensor,
        g: &Tensor,
    ) -> R<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let table = lut.flatten_all()?.to_vec1::<f32>()?;
        let i = self.matrix(&latent.flatten_all()?.to_vec1::<f32>()?, &table);
        let (gx, gw) = super::refit::backward(&i, &table, x, g)?;
        let gt = Tensor::from_vec(i.table_gradient(&gw), lut.shape(), &Device::Cpu)?;
        let gl = Tensor::from_vec(gw, latent.shape(), &Device::Cpu)?;
        Ok((Some(gx), Some(gt), Some(gl)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::palette::Palettized;
    use crate::rng::Rng;

    fn shape(rows: usize, cols: usize, per: usize, bits: u32) -> Indices {
        Indices::of(&Palettized {
            bits,
            rows,
            cols,
            rows_per_lut: per,
            indices: vec![0; rows * cols],
            luts: vec![half::f16::ZERO; rows.div_ceil(per) << bits],
        })
    }

    /// Nearest entries of unsorted tables, a short last group included, against a
    /// plain search over every entry.
    #[test]
    fn assign_finds_each_weight_s_nearest_entry_in_unsorted_tables() {
        let (rows, cols, per) = (11, 32, 4);
        let s = shape(rows, cols, per, 2);
        let mut rng = Rng::new(9);
        let lut: Vec<f32> = (0..rows.div_ceil(per) * 4)
            .map(|_| rng.next_f32() - 0.5)
            .collect();
        let latent: Vec<f32> = (0..rows * cols).map(|_| rng.next_f32() - 0.5).collect();
        let got = assign(&s, &latent, &lut);
        for (k, (&v, &i)) in latent.iter().zip(&got).enumerate() {
            let t = &lut[k / cols / per * 4..][..4];
            let best = t
                .iter()
                .map(|e| (e - v).abs())
                .fold(f32::INFINITY, f32::min);
            assert_eq!((t[i as usize] - v).abs(), best, "weight {k}");
        }
    }

    /// The op is the palette op on the assigned indices; the latent's gradient is
    /// the weight's, which the tables' sums.
    #[test]
    fn the_qat_op_is_the_palette_op_on_the_nearest_entries() {
        let (rows, cols, per) = (37, 64, 8);
        let s = shape(rows, cols, per, 4);
        let mut rng = Rng::new(4);
        let dev = &Device::Cpu;
        let lut: Vec<f32> = (0..s.groups() * 16).map(|_| rng.next_f32() - 0.5).collect();
        let latent: Vec<f32> = (0..rows * cols).map(|_| rng.next_f32() - 0.5).collect();
        let x: Vec<f32> = (0..2 * 3 * cols).map(|_| rng.next_f32() - 0.5).collect();
        let x = candle_core::Var::from_vec(x, (2, 3, cols), dev).unwrap();
        let t = candle_core::Var::from_vec(lut.clone(), (s.groups(), 16), dev).unwrap();
        let l = candle_core::Var::from_vec(latent.clone(), (rows, cols), dev).unwrap();
        let weights: Vec<f32> = (0..2 * 3 * rows).map(|_| rng.next_f32()).collect();
        let weights = Tensor::from_vec(weights, (2, 3, rows), dev).unwrap();
        let y = x
            .as_tensor()
            .apply_op3(t.as_tensor(), l.as_tensor(), PaletteQat(s.clone()))
            .unwrap();
        let g = (&y * &weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let fixed = s.with(assign(&s, &latent, &lut));
        let y2 = x
            .as_tensor()
            .apply_op2(t.as_tensor(), super::super::refit::PaletteLinear(fixed))
            .unwrap();
        let g2 = (&y2 * &weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let v = |t: &Tensor| super::super::refit::values(t).unwrap();
        let grad = |gs: &candle_core::backprop::GradStore, var: &candle_core::Var| {
            v(gs.get(var.as_tensor()).expect("a gradient"))
        };
        assert_eq!(v(&y), v(&y2));
        assert_eq!(grad(&g, &x), grad(&g2, &x));
        assert_eq!(grad(&g, &t), grad(&g2, &t));
        // ∂L/∂W[r][c] = Σ_tokens weights[r] · x[c].
        let (xs, ws) = (v(x.as_tensor()), v(&weights));
        let gl = grad(&g, &l);
        let want: Vec<f32> = (0..rows * cols)
            .map(|k| {
                (0..6)
                    .map(|n| ws[n * rows + k / cols] * xs[n * cols + k % cols])
                    .sum()
            })
            .collect();
        crate::testing::assert_close("dlatent", &gl, &want, 1e-5);
    }
}
