//! A session's activation buffers, each with its shape.

use super::footprint::Sizes;
use crate::engine::backend::SessionOptions;
use crate::engine::gpu::GpuModel;
use crate::error::Result;
use crate::kernels::elementwise;
use crate::kernels::Step;

/// Activations for up to `chunk` tokens (`n` below; f32 unless said; sizes in
/// `footprint::Sizes`).
pub(super) struct Buffers {
    /// `kernels::Step`: the step's uniform.
    pub(super) step: wgpu::Buffer,
    /// u32 `[n]`: the token ids of the chunk (a decode step's: chosen on the GPU).
    pub(super) tokens: wgpu::Buffer,
    /// `[n][hidden]`: the residual stream.
    pub(super) x: wgpu::Buffer,
    /// `[n][hidden]`: x normed (what a LoRA update reads), or a post-normed output.
    pub(super) h: wgpu::Buffer,
    /// `[n][q_dim + 2·kv_dim]`: Q|K|V (a convolution's B|C|x: `[n][3·hidden]`).
    pub(super) qkv: wgpu::Buffer,
    /// `[n][q_dim]`: the attention's output (a convolution's: `[n][hidden]`).
    pub(super) att: wgpu::Buffer,
    /// `[n][2·ffn]`: gate|up.
    pub(super) gu: wgpu::Buffer,
    /// `[n][ffn]`: act(gate)·up.
    pub(super) act: wgpu::Buffer,
    /// `[n_heads][splits][head_dim + 2]`: split attention's partial outputs, max, sum.
    pub(super) part: wgpu::Buffer,
    /// `[hidden]`: the last token's normed hidden state.
    pub(super) last: wgpu::Buffer,
    /// `[verify_rows][vocab]`: logits (one row, or a speculative check's every row).
    pub(super) logits: wgpu::Buffer,
    /// u32 `[1 + MAX_PENALTY_IDS]`: how many ids, then the ids the penalty applies to.
    pub(super) penalty_ids: wgpu::Buffer,
    /// `[max_context][rope_dim / 2][2]` (cos, sin) tables: [global layers,
    /// sliding-window layers] (the same table twice when the model has one RoPE).
    pub(super) rope: [wgpu::Buffer; 2],
    /// `[n][rank ≤ 256]`: A·x of a LoRA update.
    pub(super) lora_t: wgpu::Buffer,
    /// Read-back buffers, reused every step: the candidates (`[MAX_K]` of (id,
    /// logit)), the logits (`[verify_rows][vocab]`), and the picked token (u32) of
    /// chained steps (two: one step's is read while the next runs).
    pub(super) read_top: wgpu::Buffer,
    pub(super) read_logits: wgpu::Buffer,
    pub(super) read_choice: [wgpu::Buffer; 2],
}

impl Buffers {
    /// The buffers of a session of `opts` on model `m`, sized as `z` says, with the
    /// RoPE tables (one per kind of layer there is: global, sliding-window).
    pub(super) fn new(m: &GpuModel, opts: &SessionOptions, z: &Sizes) -> Result<Buffers> {
        let (c, g) = (&m.config, &m.gpu);
        let factors = m.rope_factors.as_deref();
        // One table per kind of layer there is (global, sliding-window).
        let table = |l: usize| {
            let freqs = c.rope_freqs(factors, l);
            g.upload_f32(
                "rope table",
                &elementwise::rope_table(c, &freqs, opts.max_context),
            )
        };
        let (global, local) = c.first_of_each_kind();
        let rope_global = table(global.or(local).unwrap_or(0))?;
        let rope_local = match (local, global) {
            (Some(l), Some(_)) => table(l)?,
            _ => rope_global.clone(),
        };
        Ok(Buffers {
            step: g.uniform("step", bytemuck::bytes_of(&Step::default())),
            tokens: g.storage("tokens", z.tokens)?,
            x: g.storage("x", z.x)?,
            h: g.storage("h", z.h)?,
            qkv: g.storage("qkv", z.qkv)?,
            att: g.storage("attention out", z.att)?,
            gu: g.storage("gate|up", z.gu)?,
            act: g.storage("swiglu", z.act)?,
            part: g.storage("attention partials", z.part)?,
            last: g.storage("last hidden", z.last)?,
            logits: g.storage("logits", z.logits)?,
            penalty_ids: g.storage("penalty ids", z.penalty_ids)?,
            rope: [rope_global, rope_local],
            lora_t: g.storage("LoRA A·x", z.lora_t)?,
            read_top: g.readback(z.read_top),
            read_logits: g.readback(z.read_logits),
            read_choice: [g.readback(z.read_choice), g.readback(z.read_choice)],
        })
    }

    /// GPU bytes these hold (a RoPE table shared by both kinds of layer counts once).
    pub(super) fn bytes(&self) -> u64 {
        let rope = if self.rope[0] == self.rope[1] {
            &self.rope[..1]
        } else {
            &self.rope[..]
        };
        [
            &self.step,
            &self.tokens,
            &self.x,
            &self.h,
            &self.qkv,
            &self.att,
            &self.gu,
            &self.act,
            &self.part,
            &self.last,
            &self.logits,
            &self.penalty_ids,
            &self.lora_t,
            &self.read_top,
            &self.read_logits,
        ]
        .into_iter()
        .chain(rope)
        .chain(&self.read_choice)
        .map(wgpu::Buffer::size)
        .sum()
    }
}
