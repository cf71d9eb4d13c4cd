//! The model's forward pass in candle tensors, so candle's reverse mode gives the
//! gradients of LoRA updates on top of frozen weights. It runs the block of
//! `model::arch::block` as `model::reference` does (the same weights, GGUF row order,
//! the same RoPE), over a batch of whole sequences with a causal mask, and is tested
//! against the reference's logits. Short-convolution layers (LFM2) are refused.

use super::lora::Loras;
use super::qat;
use super::refit::{self, Refit};
use super::tensors::{ce, contiguous_f32, matmul_t, R};
use crate::error::{Error, Result};
use crate::model::arch::block::{self, Block, LayerOps, Norm, Projs};
use crate::model::arch::{GlobalTensor, LayerTensor};
use crate::model::{weights, Activation, Config, Proj, RopeStyle, Weights};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor, Var, D};

/// A frozen matrix `[rows][cols]`: `x · Wᵀ`, whose backward gives `x` its gradient
/// only. candle's own matmul also computes the gradient of the matrix, a second
/// product as large as the forward one, which frozen weights never use.
#[derive(Clone)]
struct Frozen(Tensor);

impl CustomOp1 for Frozen {
    fn name(&self) -> &'static str {
        "frozen-linear"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> R<(CpuStorage, Shape)> {
        let x = Tensor::from_slice(contiguous_f32(s, l, self.name())?, l.shape(), &Device::Cpu)?;
        let y = matmul_t(&x, &self.0)?;
        let shape = y.shape().clone();
        Ok((CpuStorage::F32(y.flatten_all()?.to_vec1()?), shape))
    }

    fn bwd(&self, _x: &Tensor, _y: &Tensor, g: &Tensor) -> R<Option<Tensor>> {
        let (dims, out) = (g.dims(), self.0.dim(1)?);
        let mut shape = dims.to_vec();
        *shape.last_mut().unwrap_or(&mut 0) = out;
        Ok(Some(
            g.reshape(((), dims[dims.len() - 1]))?
                .matmul(&self.0)?
                .reshape(shape)?,
        ))
    }
}

/// A projection's matrix: frozen, palettized with trainable tables (`refit`), or
/// palettized with trainable tables and latent weights choosing the entries (`qat`).
#[derive(Clone)]
enum Matrix {
    Frozen(Frozen),
    Palette(refit::Indices, Tensor),
    Qat(refit::Indices, Tensor, Tensor),
}

impl Matrix {
    fn apply(&self, x: &Tensor) -> R<Tensor> {
        match self {
            Matrix::Frozen(w) => x.apply_op1(w.clone()),
            Matrix::Palette(i, lut) => x.apply_op2(lut, refit::PaletteLinear(i.clone())),
            Matrix::Qat(i, lut, latent) => x.apply_op3(lut, latent, qat::PaletteQat(i.clone())),
        }
    }
}

/// A layer as candle runs it: the model's layer with tensors for its values.
type Layer = weights::Layer<Matrix, Tensor>;

/// The frozen model, ready to run batches of token sequences.
pub struct Net {
    pub config: Config,
    embedding: Tensor,
    head: Frozen,
    output_norm: Tensor,
    layers: Vec<Layer>,
    rope_freqs: Option<Vec<f32>>,
}

fn vector(v: &[f32]) -> R<Tensor> {
    Tensor::from_slice(v, v.len(), &Device::Cpu)
}

fn matrix(v: &[f32], rows: usize, cols: usize) -> R<Tensor> {
    Tensor::from_slice(v, (rows, cols), &Device::Cpu)
}

impl Net {
    /// The f32 weights as frozen tensors (moved: the model's weights are not kept twice).
    pub fn new(config: Config, w: Weights) -> Result<Net> {
        let c = &config;
        if c.has_conv() {
            return Err(Error::unsupported(
                "recovery adapters: models with short-convolution layers (LFM2) are not supported",
            ));
        }
        let build = || -> R<Net> {
            let embedding = matrix(&w.token_embd, c.vocab_size, c.hidden)?;
            let head = Frozen(match &w.output {
                Some(o) => matrix(o, c.vocab_size, c.hidden)?,
                None => embedding.clone(),
            });
            let frozen = |p: Proj, m: Vec<f32>| -> R<Matrix> {
                let (rows, cols) = p.shape(c);
                Ok(Matrix::Frozen(Frozen(matrix(&m, rows, cols)?)))
            };
            let layers = (w.layers.into_iter())
                .map(|l| l.map(frozen, |v| vector(&v)))
                .collect::<R<Vec<_>>>()?;
            Ok(Net {
                embedding,
                head,
                output_norm: vector(&w.output_norm)?,
                layers,
                rope_freqs: w.rope_freqs,
                config: config.clone(),
            })
        };
        build().map_err(ce)
    }

    /// Logits `[batch][tokens][vocab]` of `tokens` (`[batch][tokens]`, every row from
    /// position 0), with `loras` applied beside the matrices they update.
    pub fn forward(&self, tokens: &Tensor, loras: Option<&Loras>) -> Result<Tensor> {
        self.run(tokens, loras)
    }

    fn run(&self, tokens: &Tensor, loras: Option<&Loras>) -> Result<Tensor> {
        let c = &self.config;
        let embed = || -> R<(Tensor, Tensor)> {
            let (b, t) = tokens.dims2()?;
            let mut x = self
                .embedding
                .index_select(&tokens.flatten_all()?, 0)?
                .reshape((b, t, c.hidden))?;
            if c.embed_scale != 1.0 {
                x = (x * c.embed_scale as f64)?;
            }
            Ok((x, causal_mask(t, usize::MAX)?))
        };
        let (mut x, mask) = embed().map_err(ce)?;
        for (l, layer) in self.layers.iter().enumerate() {
            let mut ops = NetLayer {
                net: self,
                layer,
                l,
                loras,
                x,
                mask: &mask,
            };
            block::run(&mut ops, &c.block(l))?;
            x = ops.x;
        }
        self.head(&x).map_err(ce)
    }

    /// The logits of the final hidden states.
    fn head(&self, x: &Tensor) -> R<Tensor> {
        let c = &self.config;
        let h = rmsnorm(x, &self.output_norm, c.rms_eps)?;
        let mut logits = h.apply_op1(self.head.clone())?;
        if c.logit_scale != 1.0 {
            logits = (logits * c.logit_scale as f64)?;
        }
        if c.final_softcap > 0.0 {
            logits = softcap(&logits, c.final_softcap)?;
        }
        Ok(logits)
    }

    /// Makes the palettized matrices' tables trainable: each becomes a variable (of
    /// `group`) named for the `.plut` tensor it replaces. With `latent` (the original
    /// model), each also gets latent weights that choose its entries (`qat`), started
    /// at the original's, a variable of `latent_group` named for the `.pidx` tensor.
    pub fn train_tables(
        &mut self,
        palettes: Vec<refit::LayerPalettes>,
        group: usize,
        latent: Option<(&Net, usize)>,
    ) -> Result<Vec<Refit>> {
        let mut vars = Vec::new();
        for (l, (layer, pals)) in self.layers.iter_mut().zip(palettes).enumerate() {
            for (p, (slot, pal)) in layer.proj.0.iter_mut().zip(pals).enumerate() {
                let Some(pal) = pal else { continue };
                let i = refit::Indices::of(&pal.matrix);
                let lut: Vec<f32> = pal.matrix.luts.iter().map(|h| h.to_f32()).collect();
                let table = Var::from_tensor(&matrix(&lut, i.groups(), i.entries).map_err(ce)?)
                    .map_err(ce)?;
                let lut = table.as_tensor().clone();
                *slot = match latent {
                    None => Matrix::Palette(i, lut),
                    Some((original, latent_group)) => {
                        let Matrix::Frozen(Frozen(w)) = &original.layers[l].proj.0[p] else {
                            return Err(Error::Internal(
                                "recover: the original's matrices are not frozen".into(),
                            ));
                        };
                        let w = Var::from_tensor(w).map_err(ce)?;
                        let qat = Matrix::Qat(i.clone(), lut, w.as_tensor().clone());
                        vars.push(Refit::latent(pal.idx, w, latent_group, (table.clone(), i)));
                        qat
                    }
                };
                vars.push(Refit::plain(pal.lut, table, group));
            }
        }
        Ok(vars)
    }

    /// Makes every RMSNorm weight trainable: variables of `group` named for their
    /// tensors (as the family spells them in a file).
    pub fn train_norms(&mut self, group: usize) -> Result<Vec<Refit>> {
        let c = &self.config;
        let (family, mut vars) = (c.arch.family(), Vec::new());
        let name = |t: LayerTensor, l: usize| family.layer_spec(t, c, l).name;
        let mut var = |t: &mut Tensor, name: String| -> Result<()> {
            let v = Var::from_tensor(t).map_err(ce)?;
            *t = v.as_tensor().clone();
            vars.push(Refit::plain(name, v, group));
            Ok(())
        };
        for (l, layer) in self.layers.iter_mut().enumerate() {
            var(&mut layer.attn_norm, name(LayerTensor::AttnNorm, l))?;
            var(&mut layer.ffn_norm, name(LayerTensor::FfnNorm, l))?;
            if let Some(t) = &mut layer.post_attn_norm {
                var(t, name(LayerTensor::PostAttnNorm, l))?;
            }
            if let Some(t) = &mut layer.post_ffn_norm {
                var(t, name(LayerTensor::PostFfnNorm, l))?;
            }
            if let Some(q) = &mut layer.q_norm {
                var(q, name(LayerTensor::QNorm, l))?;
            }
            if let Some(k) = &mut layer.k_norm {
                var(k, name(LayerTensor::KNorm, l))?;
            }
        }
        let output = family.global_spec(GlobalTensor::OutputNorm, c).name;
        var(&mut self.output_norm, output)?;
        Ok(vars)
    }

    /// cos and sin `[tokens][rope_dim / 2]` of layer `l`'s RoPE, times its mscale.
    fn rope_table(&self, l: usize, t: usize) -> R<(Tensor, Tensor)> {
        let c = &self.config;
        let freqs = c.rope_freqs(self.rope_freqs.as_deref(), l);
        let n = freqs.len();
        let (mut cos, mut sin) = (Vec::with_capacity(t * n), Vec::with_capacity(t * n));
        for p in 0..t {
            for f in &freqs {
                let (s, co) = (p as f32 * f).sin_cos();
                cos.push(co * c.rope_mscale);
                sin.push(s * c.rope_mscale);
            }
        }
        Ok((matrix(&cos, t, n)?, matrix(&sin, t, n)?))
    }
}

/// `x · Wᵀ`, plus `s · (x · Aᵀ) · Bᵀ` where layer `l` has an update of `p`.
fn linear(x: &Tensor, w: &Matrix, loras: Option<&Loras>, l: usize, p: Proj) -> R<Tensor> {
    let y = w.apply(x)?;
    match loras.and_then(|ls| ls.get(l, p).map(|u| (ls.scale, u))) {
        Some((s, u)) => {
            y + (matmul_t(&matmul_t(x, u.a.as_tensor())?, u.b.as_tensor())? * s as f64)?
        }
        None => Ok(y),
    }
}

/// RMSNorm over the last dimension, as `model::reference::rmsnorm`.
fn rmsnorm(x: &Tensor, w: &Tensor, eps: f32) -> R<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    let r = (ms + eps as f64)?.sqrt()?.recip()?;
    x.broadcast_mul(&r)?.broadcast_mul(w)
}

fn softcap(x: &Tensor, cap: f32) -> R<Tensor> {
    (x / cap as f64)?.tanh()? * cap as f64
}

/// Rotates the first `rope_dim` dimensions of each head of `x` `[b][heads][t][d]`.
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, c: &Config) -> R<Tensor> {
    let (b, h, t, d) = x.dims4()?;
    let (rd, half) = (c.rope_dim, c.rope_dim / 2);
    let rot = x.narrow(3, 0, rd)?;
    let (x0, x1) = match c.rope_style {
        RopeStyle::Adjacent => {
            let pairs = rot.reshape((b, h, t, half, 2))?;
            (
                pairs.narrow(4, 0, 1)?.squeeze(4)?,
                pairs.narrow(4, 1, 1)?.squeeze(4)?,
            )
        }
        RopeStyle::HalfSplit => (rot.narrow(3, 0, half)?, rot.narrow(3, half, half)?),
    };
    let o0 = (x0.broadcast_mul(cos)? - x1.broadcast_mul(sin)?)?;
    let o1 = (x0.broadcast_mul(sin)? + x1.broadcast_mul(cos)?)?;
    let out = match c.rope_style {
        RopeStyle::Adjacent => Tensor::stack(&[o0, o1], 4)?.reshape((b, h, t, rd))?,
        RopeStyle::HalfSplit => Tensor::cat(&[o0, o1], 3)?,
    };
    if rd == d {
        return Ok(out);
    }
    Tensor::cat(&[out, x.narrow(3, rd, d - rd)?], 3)
}

/// 0 where query i may see key j (j ≤ i, within `window` keys itself included), else
/// a large negative number: `[t][t]`.
fn causal_mask(t: usize, window: usize) -> R<Tensor> {
    let m: Vec<f32> = (0..t * t)
        .map(|k| {
            let (i, j) = (k / t, k % t);
            if j <= i && i - j < window {
                0.0
            } else {
                -1e9
            }
        })
        .collect();
    matrix(&m, t, t)
}

/// Causal grouped-query attention: `q` `[b][heads][t][d]`, `k`, `v` `[b][kv heads][t][d]`.
fn attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, c: &Config) -> R<Tensor> {
    let (b, kvh, t, d) = k.dims4()?;
    let g = c.n_heads / c.n_kv_heads;
    let expand = |x: &Tensor| -> R<Tensor> {
        if g == 1 {
            return Ok(x.clone());
        }
        x.unsqueeze(2)?
            .expand((b, kvh, g, t, d))?
            .reshape((b, kvh * g, t, d))
    };
    let (k, v) = (expand(k)?, expand(v)?);
    let mut s = (q.matmul(&k.t()?)? * c.attn_scale as f64)?;
    if c.attn_softcap > 0.0 {
        s = softcap(&s, c.attn_softcap)?;
    }
    let p = softmax(&s.broadcast_add(mask)?)?;
    p.matmul(&v)
}

/// Softmax over the last dimension from candle's differentiable primitives.
fn softmax(x: &Tensor) -> R<Tensor> {
    let e = x
        .broadcast_sub(&x.max_keepdim(D::Minus1)?.detach())?
        .exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// One layer of the candle forward: the block's operations over `[batch][tokens][..]`
/// tensors.
struct NetLayer<'a> {
    net: &'a Net,
    layer: &'a Layer,
    l: usize,
    loras: Option<&'a Loras>,
    /// The residual stream `[batch][tokens][hidden]`.
    x: Tensor,
    mask: &'a Tensor,
}

/// One tensor per projection of a group, or one.
type Ts = Vec<Tensor>;

fn one(mut v: Ts) -> R<Tensor> {
    match v.len() {
        1 => Ok(v.swap_remove(0)),
        n => Err(candle_core::Error::Msg(format!(
            "a value of {n} tensors where one was due"
        ))),
    }
}

impl NetLayer<'_> {
    fn norm_weights(&self, n: Norm) -> R<&Tensor> {
        let w = self.layer;
        match n {
            Norm::Attn => Some(&w.attn_norm),
            Norm::Ffn => Some(&w.ffn_norm),
            Norm::PostAttn => w.post_attn_norm.as_ref(),
            Norm::PostFfn => w.post_ffn_norm.as_ref(),
        }
        .ok_or_else(|| candle_core::Error::Msg(format!("layer {} has no {n:?} norm", self.l)))
    }
}

impl LayerOps for NetLayer<'_> {
    type Value = Ts;

    fn norm(&mut self, n: Norm) -> Result<Ts> {
        let eps = self.net.config.rms_eps;
        Ok(vec![rmsnorm(
            &self.x,
            self.norm_weights(n).map_err(ce)?,
            eps,
        )
        .map_err(ce)?])
    }

    fn project(&mut self, x: Ts, ps: Projs) -> Result<Ts> {
        let run = || -> R<Ts> {
            let x = one(x)?;
            let mut out = Vec::with_capacity(ps.members().len());
            for &p in ps.members() {
                let y = linear(&x, &self.layer.proj[p], self.loras, self.l, p)?;
                out.push(match &self.layer.biases[p] {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                });
            }
            Ok(out)
        };
        run().map_err(ce)
    }

    fn attend(&mut self, qkv: Ts, blk: &Block) -> Result<Ts> {
        let (c, l) = (&self.net.config, self.l);
        let run = || -> R<Ts> {
            let [q, k, v]: [Tensor; 3] = qkv
                .try_into()
                .map_err(|_| candle_core::Error::Msg("attention takes q, k and v".into()))?;
            let (b, t, _) = q.dims3()?;
            let heads = |x: Tensor, n: usize| -> R<Tensor> {
                x.reshape((b, t, n, c.head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let (mut q, mut k, v) = (
                heads(q, c.n_heads)?,
                heads(k, c.n_kv_heads)?,
                heads(v, c.n_kv_heads)?,
            );
            if let (Some(qn), Some(kn)) = (&self.layer.q_norm, &self.layer.k_norm) {
                q = rmsnorm(&q, qn, c.rms_eps)?;
                k = rmsnorm(&k, kn, c.rms_eps)?;
            }
            if blk.rope.is_some() {
                let (cos, sin) = self.net.rope_table(l, t)?;
                q = rope(&q, &cos, &sin, c)?.contiguous()?;
                k = rope(&k, &cos, &sin, c)?.contiguous()?;
            }
            let window_mask;
            let m = if blk.window == usize::MAX {
                self.mask
            } else {
                window_mask = causal_mask(t, blk.window)?;
                &window_mask
            };
            let o = attention(&q, &k, &v, m, c)?;
            Ok(vec![o.transpose(1, 2)?.contiguous()?.reshape((
                b,
                t,
                c.q_dim(),
            ))?])
        };
        run().map_err(ce)
    }

    fn short_conv(&mut self, _bcx: Ts) -> Result<Ts> {
        Err(Error::unsupported(
            "recovery adapters: short-convolution layers (LFM2)",
        ))
    }

    fn glu(&mut self, gate_up: Ts, act: Activation) -> Result<Ts> {
        let run = || -> R<Ts> {
            let [gate, up]: [Tensor; 2] = gate_up
                .try_into()
                .map_err(|_| candle_core::Error::Msg("a GLU takes gate and up".into()))?;
            let act = match act {
                Activation::Silu => gate.silu()?,
                Activation::GeluTanh => gate.gelu()?,
            };
            Ok(vec![(act * up)?])
        };
        run().map_err(ce)
    }

    fn residual(&mut self, out: Ts, post: Option<Norm>, scale: f32) -> Result<()> {
        let eps = self.net.config.rms_eps;
        let run = || -> R<Tensor> {
            let mut out = one(out)?;
            if let Some(n) = post {
                out = rmsnorm(&out, self.norm_weights(n)?, eps)?;
            }
            if scale != 1.0 {
                out = (out * scale as f64)?;
            }
            &self.x + out
        };
        self.x = run().map_err(ce)?;
        Ok(())
    }
}

/// Token ids as a `[batch][tokens]` tensor.
pub fn batch(rows: &[&[u32]]) -> Result<Tensor> {
    let t = rows.first().map_or(0, |r| r.len());
    let flat: Vec<u32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_vec(flat, (rows.len(), t), &Device::Cpu)
        .and_then(|x| x.to_dtype(DType::U32))
        .map_err(ce)
}
