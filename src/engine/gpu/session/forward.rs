//! A session's forward pass as kernels: the layers (a decode step fused to five
//! dispatches a layer, chunks through GEMMs), LoRA updates on top of the projections,
//! the output head. Recorded into a plan for decode steps, encoded for chunks.

use super::GpuSession;
use crate::engine::gpu::lora::{GpuLora, GpuLoraAdapter};
use crate::engine::gpu::GpuLayer;
use crate::engine::gpu::GpuModel;
use crate::error::{Error, Result};
use crate::kernels::attention;
use crate::kernels::elementwise::{self, NormOut};
use crate::kernels::matmul::{self, GpuMatrix, Io, NormIn};
use crate::kernels::sample;
use crate::kernels::short_conv::{self, ConvIo};
use crate::kernels::stacked::Stacked;
use crate::kernels::Pass;
use crate::model::arch::block::{self, Block, LayerOps, Norm, Projs};
use crate::model::arch::Rope;
use crate::model::{Activation, Proj};

/// One layer of one forward pass: the model, the layer, its adapter's updates by
/// projection, the tokens.
#[derive(Clone, Copy)]
struct LayerAt<'a> {
    m: &'a GpuModel,
    l: usize,
    lora: &'a dyn Fn(Proj) -> Option<&'a GpuLora>,
    n: usize,
}

impl GpuSession {
    /// Whether `n` tokens run as a decode step runs one (a speculative check's few
    /// too): the norms folded into GEMVs that decode each weight once for all of them,
    /// the GLU in the gate|up epilogue, one-pass attention token after token — each
    /// token's values those of a one-token step, bit for bit.
    fn decodes(&self, n: usize) -> bool {
        self.fused && n <= matmul::GEMV_TOKENS
    }

    /// y (+)= W·x, then the LoRA update y += B·(A·x) when there is one.
    fn project(
        &self,
        pass: &mut Pass,
        (w, lora): (&GpuMatrix, Option<&GpuLora>),
        io: &Io,
        n: usize,
    ) -> Result<()> {
        matmul::matmul(pass, w, io, n)?;
        match lora {
            Some(l) => self.lora(pass, l, io, n),
            None => Ok(()),
        }
    }

    /// y += B·(A·x): a LoRA update onto what `io` describes (its `accumulate` ignored).
    fn lora(&self, pass: &mut Pass, l: &GpuLora, io: &Io, n: usize) -> Result<()> {
        let t = &self.b.lora_t;
        let a_io = Io::new((io.x, io.x_stride), (t, l.rank));
        matmul::matmul(pass, &l.a, &a_io, n)?;
        let b_io = Io {
            x: t,
            x_stride: l.rank,
            accumulate: true,
            ..*io
        };
        matmul::matmul(pass, &l.b, &b_io, n)
    }

    /// y = W·rmsnorm(x) for stacked matrices (outputs side by side in rows of
    /// `y_stride`), with act(gate)·up when `glu` (a stacked [gate; up]). A decode step
    /// (`decodes`) folds the norm into each GEMV and writes rmsnorm(x) to `h` only when
    /// `keep_normed` (what a LoRA update reads); otherwise x is normalized into `h`,
    /// then each matrix runs over it.
    #[allow(clippy::too_many_arguments)]
    fn normed_matmul(
        &self,
        m: &GpuModel,
        pass: &mut Pass,
        mats: &Stacked,
        norm_w: &wgpu::Buffer,
        glu: Option<Activation>,
        keep_normed: bool,
        y: &wgpu::Buffer,
        y_stride: usize,
        n: usize,
    ) -> Result<()> {
        let (c, b) = (&m.config, &self.b);
        let folded = self.decodes(n);
        let io = |y_offset| Io {
            y_offset,
            ..Io::new((if folded { &b.x } else { &b.h }, c.hidden), (y, y_stride))
        };
        if folded {
            for (i, (mat, off)) in mats.mats().into_iter().enumerate() {
                let norm = NormIn {
                    weights: norm_w,
                    eps: c.rms_eps,
                    glu,
                    normed: &b.h,
                    write_normed: keep_normed && i == 0,
                };
                matmul::norm_gemv(pass, mat, &io(off), &norm, n)?;
            }
            return Ok(());
        }
        if glu.is_some() {
            return Err(Error::invalid(
                "a gated matmul runs fused, as decode steps do",
            ));
        }
        let out = NormOut::default();
        elementwise::rmsnorm(pass, norm_w, &b.x, &b.h, c.hidden, c.rms_eps, n, out)?;
        for (mat, off) in mats.mats() {
            matmul::matmul(pass, mat, &io(off), n)?;
        }
        Ok(())
    }

    /// Records the forward pass of `n` tokens at `pos0` (already in `b.tokens`): each
    /// layer is `block::run` over the operations below. A fused decode step's layer is
    /// five dispatches without adapters (norm+QKV, attention, O, norm+gate|up+GLU,
    /// down) while the context allows one-pass attention.
    pub(super) fn encode_layers(
        &self,
        m: &GpuModel,
        adapter: Option<&GpuLoraAdapter>,
        pass: &mut Pass,
        n: usize,
        pos0: usize,
    ) -> Result<()> {
        let (c, b) = (&m.config, &self.b);
        matmul::embed(pass, &m.embed, &b.tokens, &b.x, n, c.embed_scale)?;
        for l in 0..m.layers.len() {
            let lora = |p: Proj| {
                adapter
                    .and_then(|a| a.layers.get(l))
                    .and_then(|ls| ls[p].as_ref())
            };
            let at = LayerAt {
                m,
                l,
                lora: &lora,
                n,
            };
            let block = c.block(l);
            let mut ops = GpuLayerOps {
                s: self,
                at,
                block,
                pos0,
                pass: &mut *pass,
            };
            block::run(&mut ops, &block)?;
        }
        Ok(())
    }

    /// Where a layer's output goes: added to x, or (with Gemma's post norms) written
    /// to h, normalized with `post` and then added to x (`finish_residual`).
    fn residual(&self, post: Option<&wgpu::Buffer>) -> (&wgpu::Buffer, bool) {
        match post {
            Some(_) => (&self.b.h, false),
            None => (&self.b.x, true),
        }
    }

    /// A block's output: `x` (rows of `x_stride`) through `w` (its LoRA, its bias), scaled,
    /// added to the residual stream — after the post-norm where the family has one.
    #[allow(clippy::too_many_arguments)]
    fn add_output(
        &self,
        m: &GpuModel,
        pass: &mut Pass,
        (x, x_stride): (&wgpu::Buffer, usize),
        (w, lora, bias): (&GpuMatrix, Option<&GpuLora>, Option<&wgpu::Buffer>),
        post: Option<&wgpu::Buffer>,
        scale: f32,
        n: usize,
    ) -> Result<()> {
        let (y, accumulate) = self.residual(post);
        let io = Io {
            accumulate,
            scale,
            ..Io::new((x, x_stride), (y, m.config.hidden))
        };
        self.project(pass, (w, lora), &io, n)?;
        let (c, b) = (&m.config, &self.b);
        if let Some(bias) = bias {
            elementwise::bias_add(pass, bias, y, (c.hidden, c.hidden), scale, n)?;
        }
        match post {
            Some(w) => {
                let out = NormOut {
                    last_only: false,
                    accumulate: true,
                };
                let (eps, h) = (c.rms_eps, c.hidden);
                elementwise::rmsnorm(pass, w, &b.h, &b.x, h, eps, n, out)
            }
            None => Ok(()),
        }
    }

    /// The last token's logits — or with `all` every token's, row after row (a
    /// speculative check) — after the repetition penalty (`step.penalty` on the ids in
    /// `penalty_ids`; none listed: unchanged). A decode step folds the final norm into
    /// the head's GEMV.
    pub(super) fn encode_head(
        &self,
        m: &GpuModel,
        pass: &mut Pass,
        n: usize,
        all: bool,
    ) -> Result<()> {
        let (c, b) = (&m.config, &self.b);
        let io = |x| Io {
            scale: c.logit_scale,
            cap: c.final_softcap,
            ..Io::new((x, c.hidden), (&b.logits, c.vocab_size))
        };
        if self.decodes(n) && (n == 1 || all) {
            let norm = NormIn {
                weights: &m.output_norm,
                eps: c.rms_eps,
                glu: None,
                normed: &b.last,
                write_normed: false,
            };
            matmul::norm_gemv(pass, m.head(), &io(&b.x), &norm, n)?;
        } else if all && n > 1 {
            return Err(Error::gpu("every position's logits are a decode step's"));
        } else {
            let out = NormOut {
                last_only: true,
                accumulate: false,
            };
            let (w, h, eps) = (&m.output_norm, c.hidden, c.rms_eps);
            elementwise::rmsnorm(pass, w, &b.x, &b.last, h, eps, n, out)?;
            matmul::gemv(pass, m.head(), &io(&b.last), 1)?;
        }
        sample::penalty(pass, &b.penalty_ids, &b.logits, &b.tokens)
    }
}

/// An input of a group of projections, on the GPU.
#[derive(Clone, Copy)]
enum Input<'a> {
    /// The residual stream x normed by these weights: not recorded yet, so the norm
    /// can fold into the projections' GEMVs.
    Normed(&'a wgpu::Buffer),
    /// Rows of `stride` floats in a buffer.
    Rows(&'a wgpu::Buffer, usize),
}

/// A value between the block's operations on the GPU: an input, or projections of one
/// not recorded yet, so that their consumer can fuse them (the GLU into gate|up's
/// epilogue, the residual add into the output projection).
#[derive(Clone, Copy)]
enum Val<'a> {
    In(Input<'a>),
    Projected(Input<'a>, Projs),
}

fn out_of_order(what: &'static str) -> Error {
    Error::internal(what)
}

/// One layer of a forward pass as kernels: the block's operations, recorded.
struct GpuLayerOps<'s, 'p, 'a, 'e> {
    s: &'s GpuSession,
    at: LayerAt<'s>,
    block: Block,
    pos0: usize,
    pass: &'p mut Pass<'a, 'e>,
}

impl<'s> GpuLayerOps<'s, '_, '_, '_> {
    fn layer(&self) -> &'s GpuLayer {
        &self.at.m.layers[self.at.l]
    }

    /// The mixer's inputs Q|K|V (B|C|x) of `x` recorded into `qkv`: one normed matmul
    /// over the stack, the adapter's updates, the biases.
    fn mixer_inputs(&mut self, v: Val<'s>) -> Result<()> {
        let Val::Projected(Input::Normed(norm_w), Projs::Mixer) = v else {
            return Err(out_of_order(
                "GPU forward: the mixer's inputs out of the block's order",
            ));
        };
        let LayerAt { m, lora, n, .. } = self.at;
        let (c, b, w) = (&m.config, &self.s.b, self.layer());
        let widths = Projs::Mixer.widths(c, &self.block);
        let stride: usize = widths.iter().sum();
        let offsets = widths.iter().scan(0, |o, w| {
            *o += w;
            Some(*o - w)
        });
        let loras: Vec<_> = (Projs::Mixer.members().iter().zip(offsets))
            .filter_map(|(&p, off)| lora(p).map(|lo| (lo, off)))
            .collect();
        let pass = &mut *self.pass;
        let keep = !loras.is_empty();
        self.s
            .normed_matmul(m, pass, &w.qkv, norm_w, None, keep, &b.qkv, stride, n)?;
        for (lo, off) in loras {
            let io = Io {
                y_offset: off,
                accumulate: true,
                ..Io::new((&b.h, c.hidden), (&b.qkv, stride))
            };
            self.s.lora(pass, lo, &io, n)?;
        }
        if let Some(bias) = w.bias(Projs::Mixer) {
            elementwise::bias_add(pass, bias, &b.qkv, (stride, stride), 1.0, n)?;
        }
        Ok(())
    }
}

impl<'s> LayerOps for GpuLayerOps<'s, '_, '_, '_> {
    type Value = Val<'s>;

    fn norm(&mut self, n: Norm) -> Result<Val<'s>> {
        let w = self.layer();
        match n {
            Norm::Attn => Ok(Val::In(Input::Normed(&w.attn_norm))),
            Norm::Ffn => Ok(Val::In(Input::Normed(&w.ffn_norm))),
            Norm::PostAttn | Norm::PostFfn => Err(out_of_order(
                "GPU forward: a post norm as a value out of the block's order",
            )),
        }
    }

    fn project(&mut self, x: Val<'s>, ps: Projs) -> Result<Val<'s>> {
        match x {
            Val::In(input) => Ok(Val::Projected(input, ps)),
            Val::Projected(..) => Err(out_of_order(
                "GPU forward: a projection of a projection out of the block's order",
            )),
        }
    }

    fn attend(&mut self, qkv: Val<'s>, blk: &Block) -> Result<Val<'s>> {
        self.mixer_inputs(qkv)?;
        let LayerAt { m, l, n, .. } = self.at;
        let w = self.layer();
        let (s, pass, pos0) = (self.s, &mut *self.pass, self.pos0);
        let (c, b) = (&m.config, &s.b);
        let table = &b.rope[(blk.rope == Some(Rope::Local)) as usize];
        let (rotate, qk_norm) = (blk.rope.is_some(), w.qk_norm.as_ref());
        let (qkv, att) = (&b.qkv, &b.att);
        let cache = attention::CacheIo {
            c,
            format: s.opts.kv,
            qkv,
            cache: &s.cache[l],
        };
        if s.decodes(n) && attention::one_pass(pos0 + n) {
            attention::decode_fused(pass, &cache, (table, rotate), qk_norm, att)?;
        } else {
            if rotate || qk_norm.is_some() {
                elementwise::rope(pass, c, table, rotate, qkv, qk_norm, n)?;
            }
            attention::kv_write(pass, &cache, n)?;
            match n {
                1 => attention::decode(pass, &cache, &b.part, att, pos0 + 1)?,
                _ => attention::prefill(pass, &cache, att, n)?,
            }
        }
        Ok(Val::In(Input::Rows(&b.att, c.q_dim())))
    }

    /// LFM2's convolution: y = C ⊙ conv(B ⊙ x) over the layer's state ring. Three
    /// dispatches for one token with the projections around it.
    fn short_conv(&mut self, bcx: Val<'s>) -> Result<Val<'s>> {
        self.mixer_inputs(bcx)?;
        let LayerAt { m, l, n, .. } = self.at;
        let (c, b, w) = (&m.config, &self.s.b, self.layer());
        let taps = w
            .conv
            .as_ref()
            .ok_or_else(|| Error::internal("GPU forward: a convolution layer without taps"))?;
        let (state, slots) = (&self.s.cache[l].k, self.s.cache[l].slots);
        let io = ConvIo {
            bcx: &b.qkv,
            stride: 3 * c.hidden,
            taps,
            state,
            slots,
            y: &b.att,
        };
        short_conv::short_conv(self.pass, (c.hidden, c.conv_taps), &io, n)?;
        Ok(Val::In(Input::Rows(&b.att, c.hidden)))
    }

    /// act(gate)·up: in a decode step with gate|up stacked and no adapter, the GLU is
    /// the normed GEMV's epilogue (one dispatch); else gate|up, updates, then the GLU.
    fn glu(&mut self, gate_up: Val<'s>, act: Activation) -> Result<Val<'s>> {
        let Val::Projected(Input::Normed(norm_w), Projs::GateUp) = gate_up else {
            return Err(out_of_order(
                "GPU forward: the GLU out of the block's order",
            ));
        };
        let LayerAt { m, lora, n, .. } = self.at;
        let w = self.layer();
        let (s, pass) = (self.s, &mut *self.pass);
        let (c, b) = (&m.config, &s.b);
        let f = c.ffn_dim;
        let loras: Vec<_> = [(Proj::Gate, 0), (Proj::Up, f)]
            .into_iter()
            .filter_map(|(p, off)| lora(p).map(|lo| (lo, off)))
            .collect();
        let one = matches!(w.gate_up, Stacked::One(_));
        let bias = w.bias(Projs::GateUp);
        if s.decodes(n) && one && loras.is_empty() && bias.is_none() {
            s.normed_matmul(m, pass, &w.gate_up, norm_w, Some(act), false, &b.act, f, n)?;
        } else {
            let keep = !loras.is_empty();
            s.normed_matmul(m, pass, &w.gate_up, norm_w, None, keep, &b.gu, 2 * f, n)?;
            for (lo, off) in loras {
                let io = Io {
                    y_offset: off,
                    accumulate: true,
                    ..Io::new((&b.h, c.hidden), (&b.gu, 2 * f))
                };
                s.lora(pass, lo, &io, n)?;
            }
            if let Some(bias) = bias {
                elementwise::bias_add(pass, bias, &b.gu, (2 * f, 2 * f), 1.0, n)?;
            }
            elementwise::glu(pass, act, &b.gu, &b.act, f, n)?;
        }
        Ok(Val::In(Input::Rows(&b.act, f)))
    }

    /// The output projection (O, or down) accumulated into x as it is computed, or
    /// written apart and post-normed into x.
    fn residual(&mut self, out: Val<'s>, post: Option<Norm>, scale: f32) -> Result<()> {
        let Val::Projected(Input::Rows(x, stride), ps) = out else {
            return Err(out_of_order(
                "GPU forward: a residual add out of the block's order",
            ));
        };
        let LayerAt { m, lora, n, .. } = self.at;
        let w = self.layer();
        let weights = match ps {
            Projs::Out => (&w.wo, lora(Proj::O), w.bias(ps)),
            Projs::Down => (&w.down, lora(Proj::Down), w.bias(ps)),
            Projs::Mixer | Projs::GateUp => {
                return Err(out_of_order(
                    "GPU forward: a residual add out of the block's order",
                ))
            }
        };
        let post = match post {
            None => None,
            Some(n) => {
                let (a, f) = w
                    .post_norms
                    .as_ref()
                    .ok_or_else(|| Error::internal("a post norm the layer lacks"))?;
                Some(if n == Norm::PostAttn { a } else { f })
            }
        };
        let pass = &mut *self.pass;
        self.s
            .add_output(m, pass, (x, stride), weights, post, scale, n)
    }
}
