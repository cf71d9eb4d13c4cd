//! What a GPU session and its model will hold, from the GGUF header alone. WebGPU
//! tells a page no memory size, only how large one binding may be
//! (`maxStorageBufferBindingSize`: 128 MiB on many phones and integrated GPUs), so a
//! model is checked buffer by buffer: matrices split by rows across bindings, but a
//! layer's KV cache, a RoPE table or the logits are one binding each. One over the
//! limit is refused before any weight is read (in the browser: before the rest of the
//! download) with `DeviceLimits` naming it, its size, and the context that would fit.

use crate::engine::backend::SessionOptions;
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::kernels::attention::{self, CacheSize};
use crate::kernels::matmul::GEMV_TOKENS;
use crate::kernels::sample::{self, TopK};
use crate::kernels::Step;
use crate::model::Config;

/// Session options as a session of a model of shape `c` runs them on a device whose
/// bindings hold `max_binding` bytes: the context within the model's, prefill chunks
/// of 1–256 tokens, fewer where a chunk's activations would be over one binding.
pub(super) fn fit(c: &Config, mut opts: SessionOptions, max_binding: u64) -> SessionOptions {
    opts.max_context = opts.max_context.clamp(1, c.context_length);
    let widest = [
        c.hidden,
        c.mixer_in_dim(),
        2 * c.ffn_dim,
        MAX_LORA_RANK as usize,
    ]
    .into_iter()
    .max()
    .unwrap_or(1) as u64
        * 4;
    let fits = (max_binding / widest).max(1) as usize;
    opts.chunk = opts.chunk.clamp(1, 256).min(fits);
    opts
}

/// Bytes of each buffer of a session's `Buffers` (as `Gpu::storage` rounds them).
#[derive(Clone, Copy, Debug)]
pub(super) struct Sizes {
    pub step: u64,
    pub tokens: u64,
    pub x: u64,
    pub h: u64,
    pub qkv: u64,
    pub att: u64,
    pub gu: u64,
    pub act: u64,
    pub part: u64,
    pub last: u64,
    pub logits: u64,
    pub penalty_ids: u64,
    /// One RoPE table (there are two when the model has two kinds of layer).
    pub rope: u64,
    pub lora_t: u64,
    pub read_top: u64,
    pub read_logits: u64,
    pub read_choice: u64,
    /// Positions a speculative check runs in one pass (rows of `logits`).
    pub verify_rows: usize,
}

/// Token ids a repetition penalty can name in one step.
pub(super) const MAX_PENALTY_IDS: usize = 1024;

/// The widest LoRA rank a session has room for.
pub(super) const MAX_LORA_RANK: u64 = 256;

fn rounded(bytes: u64) -> u64 {
    bytes.next_multiple_of(4).max(4)
}

impl Sizes {
    /// The buffers of a session of `opts` (already `fit`) on a model of shape `c`, on
    /// a device whose bindings hold `max_binding` bytes: a speculative check takes as
    /// many positions as the GEMV kernels do, within a chunk and one binding of logits.
    pub fn of(c: &Config, opts: &SessionOptions, max_binding: u64) -> Sizes {
        let (n, f4) = (opts.chunk as u64, 4u64);
        let row = (c.vocab_size as u64 * f4).max(1);
        let verify_rows = opts
            .chunk
            .min(GEMV_TOKENS)
            .min((max_binding / row).max(1) as usize);
        let rows = verify_rows as u64;
        let splits = opts.max_context.div_ceil(attention::CHUNK as usize) as u64;
        let b = |x: u64| rounded(x.saturating_mul(f4));
        Sizes {
            step: std::mem::size_of::<Step>() as u64,
            tokens: b(n),
            x: b(n * c.hidden as u64),
            h: b(n * c.hidden as u64),
            qkv: b(n * c.mixer_in_dim() as u64),
            att: b(n * c.mixer_out_dim() as u64),
            gu: b(n * 2 * c.ffn_dim as u64),
            act: b(n * c.ffn_dim as u64),
            part: b(c.n_heads as u64 * splits * (c.head_dim as u64 + 2)),
            last: b(c.hidden as u64),
            logits: b(rows * c.vocab_size as u64),
            penalty_ids: b(MAX_PENALTY_IDS as u64 + 1),
            // (cos, sin) for each of rope_dim / 2 frequencies, at every position.
            rope: b(opts.max_context as u64 * c.rope_dim as u64),
            lora_t: b(n * MAX_LORA_RANK),
            read_top: rounded(sample::MAX_K as u64 * 8),
            read_logits: b(rows * c.vocab_size as u64),
            read_choice: 4,
            verify_rows,
        }
    }

    /// Every buffer a kernel binds as storage, named for an error message.
    fn bound(&self) -> [(&'static str, u64); 13] {
        [
            ("the prompt chunk's token ids", self.tokens),
            ("the hidden states", self.x),
            ("the normed hidden states", self.h),
            ("the Q|K|V rows", self.qkv),
            ("the attention output", self.att),
            ("the gate|up rows", self.gu),
            ("the activations", self.act),
            ("the attention partials", self.part),
            ("the last hidden state", self.last),
            ("the logits", self.logits),
            ("the penalized ids", self.penalty_ids),
            ("a RoPE table", self.rope),
            ("a LoRA update", self.lora_t),
        ]
    }

    /// All of them, each RoPE table counted (`tables`: 1 or 2).
    pub fn total(&self, tables: u64) -> u64 {
        let bound: u64 = self.bound().iter().map(|(_, b)| b).sum();
        bound
            + (tables - 1) * self.rope
            + self.step
            + self.read_top
            + self.read_logits
            + 2 * self.read_choice
    }
}

/// GPU bytes a model and one session of it hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuFootprint {
    /// Matrices as the file stores them (the GPU's packing is within a few percent).
    pub weights: u64,
    /// The KV cache at the session's context.
    pub kv: u64,
    /// Activations, RoPE tables, candidates and read-back buffers.
    pub scratch: u64,
}

impl GpuFootprint {
    /// The footprint of `gguf` (of shape `c`) with a session of `opts`, or
    /// `DeviceLimits` when a buffer it needs whole is over `max_binding` bytes.
    pub fn check(
        gguf: &Gguf,
        c: &Config,
        opts: &SessionOptions,
        max_binding: u64,
    ) -> Result<GpuFootprint> {
        let opts = fit(c, opts.clone(), max_binding);
        for t in gguf.tensors.iter().filter(|t| t.dims.len() == 2) {
            // A part holds at least two rows (`matmul::plan_parts`).
            let rows = t.dims[1].max(1);
            let two_rows = t.n_bytes.div_ceil(rows).saturating_mul(2);
            if two_rows > max_binding {
                let msg = over(&format!("two rows of {}", t.name), two_rows, max_binding);
                return Err(Error::device_limits(msg));
            }
        }
        if let Some((what, bytes)) = first_over(c, &opts, max_binding)? {
            let msg = over(&what, bytes, max_binding);
            return Err(match most_context(c, &opts, max_binding)? {
                Some(fits) => Error::device_limits(format!(
                    "{msg} at maxContext {}: a maxContext of at most {fits} fits",
                    opts.max_context
                )),
                None => Error::device_limits(msg),
            });
        }
        // One RoPE table a kind of layer, as `GpuSession::new` makes them.
        let tables = match c.first_of_each_kind() {
            (Some(_), Some(_)) => 2,
            _ => 1,
        };
        let kv = (0..c.n_layers)
            .map(|l| Ok(layer_cache(c, &opts, l)?.bytes()))
            .sum::<Result<u64>>()?;
        let weights = gguf
            .tensors
            .iter()
            .filter(|t| t.dims.len() == 2)
            .map(|t| t.n_bytes)
            .fold(0u64, u64::saturating_add);
        Ok(GpuFootprint {
            weights,
            kv,
            scratch: Sizes::of(c, &opts, max_binding).total(tables) + TopK::bytes_for(c.vocab_size),
        })
    }

    pub fn total(&self) -> u64 {
        self.weights + self.kv + self.scratch
    }
}

fn layer_cache(c: &Config, opts: &SessionOptions, layer: usize) -> Result<CacheSize> {
    if c.is_conv(layer) {
        return Ok(CacheSize::conv(c));
    }
    let window = c.block(layer).cache_window();
    CacheSize::of(c, opts.kv, opts.max_context, window, opts.chunk)
}

/// The first buffer bound whole that is over `max_binding` with `opts`.
fn first_over(
    c: &Config,
    opts: &SessionOptions,
    max_binding: u64,
) -> Result<Option<(String, u64)>> {
    let sizes = Sizes::of(c, opts, max_binding);
    let mut bound: Vec<(String, u64)> = sizes
        .bound()
        .iter()
        .map(|&(what, b)| (what.to_string(), b))
        .collect();
    bound.extend(
        TopK::buffers(c.vocab_size)
            .into_iter()
            .map(|(what, b)| (what.to_string(), b)),
    );
    for l in 0..c.n_layers {
        let s = layer_cache(c, opts, l)?;
        bound.push((format!("layer {l}'s K (or V) cache"), s.values));
        bound.push((format!("layer {l}'s K (or V) scales"), s.scales));
    }
    Ok(bound.into_iter().find(|&(_, b)| b > max_binding))
}

/// The longest context whose buffers all fit (None: not even one token's).
fn most_context(c: &Config, opts: &SessionOptions, max_binding: u64) -> Result<Option<usize>> {
    let fits = |n: usize| -> Result<bool> {
        let o = SessionOptions {
            max_context: n,
            ..opts.clone()
        };
        Ok(first_over(c, &o, max_binding)?.is_none())
    };
    if !fits(1)? {
        return Ok(None);
    }
    // Sizes grow with the context: the last n that fits, by bisection.
    let (mut lo, mut hi) = (1, opts.max_context);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

fn over(what: &str, bytes: u64, max_binding: u64) -> String {
    format!(
        "{what} needs one buffer of {}, over this GPU's maxStorageBufferBindingSize of {}",
        mib(bytes),
        mib(max_binding)
    )
}

fn mib(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::kv::KvFormat;

    /// AFM-on-device's shape.
    fn afm() -> Config {
        Config {
            n_layers: 30,
            n_heads: 24,
            n_kv_heads: 8,
            head_dim: 128,
            hidden: 3072,
            ffn_dim: 8192,
            vocab_size: 49152,
            rope_dim: 128,
            context_length: 1 << 17,
            ..Config::default()
        }
    }

    fn opts(max_context: usize, kv: KvFormat) -> SessionOptions {
        SessionOptions {
            max_context,
            kv,
            ..Default::default()
        }
    }

    #[test]
    fn prefill_chunks_shrink_to_one_binding() {
        let c = afm();
        // gate|up: 2 × 8192 floats a token.
        assert_eq!(fit(&c, opts(4096, KvFormat::Int8), 128 << 20).chunk, 64);
        assert_eq!(fit(&c, opts(4096, KvFormat::Int8), 1 << 20).chunk, 16);
        assert_eq!(fit(&c, opts(4096, KvFormat::Int8), 1 << 16).chunk, 1);
        assert_eq!(
            fit(&c, opts(1 << 20, KvFormat::Int8), 1 << 30).max_context,
            1 << 17
        );
    }

    #[test]
    fn the_longest_context_is_the_first_one_over() {
        let c = afm();
        let mib128 = 128 << 20;
        // int8: a layer's K is 1 KiB a position (128 MiB holds 131072); f32: 4 KiB.
        let o = fit(&c, opts(1 << 17, KvFormat::Int8), mib128);
        assert_eq!(first_over(&c, &o, mib128).unwrap(), None);
        let o = fit(&c, opts(65536, KvFormat::F32), mib128);
        let (what, bytes) = first_over(&c, &o, mib128).unwrap().expect("over");
        assert_eq!(
            (what.as_str(), bytes),
            ("layer 0's K (or V) cache", 256 << 20)
        );
        assert_eq!(most_context(&c, &o, mib128).unwrap(), Some(32768));
        // Nothing fits where one token's logits do not.
        assert_eq!(most_context(&c, &o, 1 << 16).unwrap(), None);
    }
}
