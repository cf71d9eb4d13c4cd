//! RMSNorm, RoPE (+QK-norm), SwiGLU, the KV cache writes, attention (flash-decoding
//! and tiled prefill) and top-k sampling against the CPU reference, over awkward
//! shapes: one token, one KV head, many query heads per KV head, KV lengths crossing
//! split boundaries, long contexts.

use crate::common;

use common::gpu::{ctx, max_diff, values};
use pippin::kernels::elementwise::NormOut;
use pippin::kernels::{attention, elementwise, sample};
use pippin::model::reference;
use pippin::model::{Activation, Arch, Config, RopeStyle};
use pippin::quant::kv::KvFormat;
use pippin::sampler::{Sampler, SamplerOptions};
use pippin::testing::assert_close;
use pippin::testing::kernels::attention::{self as cases, Case};
use pippin::testing::kernels::{self, sample as picks};
use pollster::block_on;

fn config(
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    style: RopeStyle,
    rope_dim: usize,
) -> Config {
    Config {
        arch: Arch::Llama,
        n_heads,
        n_kv_heads,
        head_dim,
        hidden: n_heads * head_dim,
        rope_dim,
        rope_style: style,
        attn_scale: 1.0 / (head_dim as f32).sqrt(),
        ..Config::default()
    }
}

#[test]
fn rmsnorm_rows_and_last_only() {
    let c = ctx();
    for (len, rows) in [(576, 3), (7, 1), (33, 5), (1000, 2)] {
        let x = values(len * rows, len as u64);
        let w = values(len, 3);
        let (xb, wb, yb) = (c.buf(&x), c.buf(&w), c.zeros(len * rows));
        let step = c.step(rows, 0);
        c.run(&step, |p| {
            let out = NormOut::default();
            elementwise::rmsnorm(p, &wb, &xb, &yb, len, 1e-5, rows, out).unwrap()
        });
        let want = reference::rmsnorm(&x, &w, 1e-5);
        assert!(
            max_diff(&c.read(&yb, len * rows), &want) < 1e-5,
            "len {len}"
        );
        let last = c.zeros(len);
        c.run(&step, |p| {
            let out = NormOut {
                last_only: true,
                accumulate: false,
            };
            elementwise::rmsnorm(p, &wb, &xb, &last, len, 1e-5, rows, out).unwrap()
        });
        assert!(max_diff(&c.read(&last, len), &want[(rows - 1) * len..]) < 1e-5);
        // Accumulating (Gemma's post norms): y = y0 + norm(x)·w.
        let y0 = values(len * rows, 77);
        let acc = c.buf(&y0);
        c.run(&step, |p| {
            let out = NormOut {
                last_only: false,
                accumulate: true,
            };
            elementwise::rmsnorm(p, &wb, &xb, &acc, len, 1e-5, rows, out).unwrap()
        });
        let sum: Vec<f32> = want.iter().zip(&y0).map(|(a, b)| a + b).collect();
        assert!(
            max_diff(&c.read(&acc, len * rows), &sum) < 1e-5,
            "accumulate {len}"
        );
    }
}

#[test]
fn rope_both_styles_partial_dims_qk_norm_and_none() {
    let c = ctx();
    // (config, first position, QK-norm, rotated: false is a NoPE layer, SmolLM3's).
    let cases = [
        (config(9, 3, 64, RopeStyle::Adjacent, 64), 0, false, true),
        (config(4, 1, 32, RopeStyle::HalfSplit, 32), 1000, true, true),
        (config(2, 2, 64, RopeStyle::HalfSplit, 32), 7, false, true),
        (config(3, 1, 96, RopeStyle::Adjacent, 64), 4000, true, true),
        (config(4, 2, 64, RopeStyle::HalfSplit, 64), 300, true, false),
        (config(2, 1, 32, RopeStyle::Adjacent, 32), 9, false, false),
        // Phi-4-mini's shape: RoPE on 3/4 of each head, LongRoPE's attention factor.
        (phi3_like(), 70, false, true),
    ];
    for (cfg, pos0, qk_norm, rotate) in cases {
        let t = 3;
        let stride = cfg.q_dim() + 2 * cfg.kv_dim();
        let qkv = values(t * stride, 11);
        let (qn, kn) = (values(cfg.head_dim, 12), values(cfg.head_dim, 13));
        let freqs = cfg.rope_freqs(None, 0);
        let table = c.buf(&elementwise::rope_table(&cfg, &freqs, pos0 + t));
        let (qb, qknb) = (c.buf(&qkv), c.buf(&[qn.clone(), kn.clone()].concat()));
        let step = c.step(t, pos0);
        let norms = qk_norm.then_some(&qknb);
        c.run(&step, |p| {
            elementwise::rope(p, &cfg, &table, rotate, &qb, norms, t).unwrap()
        });
        let got = c.read(&qb, t * stride);
        // CPU: per token, norm then rotate the q heads and the k heads; v untouched.
        for ti in 0..t {
            let row = &qkv[ti * stride..][..stride];
            let mut q = row[..cfg.q_dim()].to_vec();
            let mut k = row[cfg.q_dim()..cfg.q_dim() + cfg.kv_dim()].to_vec();
            if qk_norm {
                q = reference::rmsnorm(&q, &qn, cfg.rms_eps);
                k = reference::rmsnorm(&k, &kn, cfg.rms_eps);
            }
            let freqs = if rotate { &freqs[..] } else { &[] };
            let (qd, kd, hd, style) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim, cfg.rope_style);
            let (pos, m) = (pos0 + ti, cfg.rope_mscale);
            reference::rope(&mut q, qd, hd, style, freqs, pos, m);
            reference::rope(&mut k, kd, hd, style, freqs, pos, m);
            let g = &got[ti * stride..][..stride];
            assert!(max_diff(&g[..cfg.q_dim()], &q) < 1e-5, "{cfg:?} q");
            assert!(
                max_diff(&g[cfg.q_dim()..cfg.q_dim() + cfg.kv_dim()], &k) < 1e-5,
                "k"
            );
            assert_eq!(
                &g[cfg.q_dim() + cfg.kv_dim()..],
                &row[cfg.q_dim() + cfg.kv_dim()..],
                "v untouched"
            );
        }
    }
}

/// 8 heads of 128 over 2, RoPE on 96 dimensions of each, cos and sin × 1.19.
fn phi3_like() -> Config {
    Config {
        rope_mscale: 1.19,
        ..config(8, 2, 128, RopeStyle::HalfSplit, 96)
    }
}

/// SwiGLU and GeGLU (tanh GELU), with gate values far out in both tails.
#[test]
fn gated_activations_match() {
    let c = ctx();
    for act in [Activation::Silu, Activation::GeluTanh] {
        for (f, t) in [(1536, 1), (7, 3), (100, 11)] {
            let gu = values(t * 2 * f, 4)
                .iter()
                .map(|v| v * 12.0)
                .collect::<Vec<_>>();
            let (gb, ab) = (c.buf(&gu), c.zeros(t * f));
            let step = c.step(t, 0);
            c.run(&step, |p| elementwise::glu(p, act, &gb, &ab, f, t).unwrap());
            let want: Vec<f32> = gu
                .chunks(2 * f)
                .flat_map(|r| reference::glu(act, &r[..f], &r[f..]))
                .collect();
            assert_close(
                &format!("{act:?} f {f} t {t}"),
                &c.read(&ab, t * f),
                &want,
                1e-4,
            );
        }
    }
}

/// Biases, scaled, onto the leading `width` floats of each token's row (Qwen2's Q/K/V
/// biases onto the qkv rows; an output projection's onto the residual stream, × the
/// block's scale), past a workgroup's 256 and across tokens; the rest untouched.
#[test]
fn bias_add_onto_rows_awkward_widths() {
    let c = ctx();
    let cases = [
        (1, 1, 1, 1.0),
        (37, 40, 3, 1.0),
        (300, 300, 2, 0.25),
        (1152, 1600, 5, -1.5),
    ];
    for (width, stride, t, scale) in cases {
        let (y0, bias) = (values(t * stride, 7), values(width, 8));
        let (yb, bb) = (c.buf(&y0), c.buf(&bias));
        let step = c.step(t, 0);
        c.run(&step, |p| {
            elementwise::bias_add(p, &bb, &yb, (width, stride), scale, t).unwrap()
        });
        let scaled: Vec<f32> = bias.iter().map(|b| scale * b).collect();
        let mut want = y0.clone();
        for row in want.chunks_exact_mut(stride) {
            reference::add_rows(&mut row[..width], &scaled);
        }
        assert_close(
            &format!("width {width} stride {stride} t {t} scale {scale}"),
            &c.read(&yb, t * stride),
            &want,
            1e-6,
        );
    }
}

/// LFM2's gated short convolution over steps of several tokens and of one (the state
/// carried between them in the ring, wrapping where it is small), against
/// `ConvState` with C's gate: widths past a workgroup's 64, rows wider than B|C|x,
/// 2 to 8 taps, starting at position 0 (zeros before it).
#[test]
fn short_conv_steps_over_a_ring_state() {
    for shape in [
        (1, 3, 2, 2),
        (70, 215, 3, 3),
        (130, 390, 8, 9),
        (64, 192, 3, 67),
    ] {
        block_on(kernels::short_conv(ctx(), shape, &[5, 1, 1, 13, 1, 2]));
    }
}

fn attention_case(
    cfg: &Config,
    format: KvFormat,
    kv_len: usize,
    t: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    windowed_attention_case(cfg, format, kv_len, t, 0)
}

/// A case whose prefix goes in chunks of 64 (a windowed cache: a ring of window + 64
/// slots), as the engine's prefill chunks.
fn engine_case(cfg: &Config, format: KvFormat, kv_len: usize, window: usize) -> Case<'_> {
    Case {
        cfg,
        format,
        kv_len,
        window,
        chunk: 64,
    }
}

/// Writes `kv_len` tokens of K/V through kv_write, then runs attention for the last
/// `t` tokens (decode when t = 1, else prefill); returns (gpu, cpu on the round-tripped
/// cache, cpu in f32). With a `window`, keys are a ring of window + 64 slots (the
/// engine's sliding-window cache with 64-token chunks).
fn windowed_attention_case(
    cfg: &Config,
    format: KvFormat,
    kv_len: usize,
    t: usize,
    window: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let a = engine_case(cfg, format, kv_len, window);
    block_on(cases::decode_or_prefill(ctx(), a, t))
}

#[test]
fn decode_attention_over_split_boundaries_and_groups() {
    for (h, kvh, hd) in [(9, 3, 64), (8, 1, 32), (2, 2, 128), (16, 1, 64)] {
        let cfg = config(h, kvh, hd, RopeStyle::Adjacent, hd);
        for kv_len in [1, 63, 64, 65, 200] {
            let (got, want, _) = attention_case(&cfg, KvFormat::F32, kv_len, 1);
            assert_close(
                &format!("heads {h}/{kvh} hd {hd} kv_len {kv_len}"),
                &got,
                &want,
                1e-5,
            );
        }
    }
}

#[test]
fn decode_attention_long_context() {
    let cfg = config(4, 2, 64, RopeStyle::Adjacent, 64);
    for kv_len in [2047, 2049, 3000] {
        let (got, want, _) = attention_case(&cfg, KvFormat::F32, kv_len, 1);
        assert!(max_diff(&got, &want) < 1e-5, "kv_len {kv_len}");
    }
}

/// Gemma 3's shape: 4 query heads of 256 over one KV head, a scale of its own.
#[test]
fn attention_with_heads_of_256() {
    let mut cfg = config(4, 1, 256, RopeStyle::HalfSplit, 256);
    cfg.attn_scale = 0.0625;
    for (kv_len, t) in [(1, 1), (65, 1), (130, 1), (9, 9), (40, 13), (70, 5)] {
        for format in [KvFormat::F32, KvFormat::Int8] {
            let (got, want, _) = attention_case(&cfg, format, kv_len, t);
            assert_close(
                &format!("{format:?} kv_len {kv_len} t {t}"),
                &got,
                &want,
                1e-4,
            );
        }
    }
}

/// Sliding-window attention over a ring cache (window + 64 slots): decode and prefill,
/// windows shorter and longer than the context, the ring wrapped several times, a
/// window that is not a multiple of anything.
#[test]
fn sliding_window_attention_over_a_ring_cache() {
    for (h, kvh, hd) in [(4, 1, 256), (9, 3, 64)] {
        let cfg = config(h, kvh, hd, RopeStyle::HalfSplit, hd);
        for window in [1, 7, 64, 100] {
            for (kv_len, t) in [(5, 1), (300, 1), (301, 1), (70, 9), (400, 64), (257, 30)] {
                for format in [KvFormat::F32, KvFormat::Int8] {
                    let (got, want, _) = windowed_attention_case(&cfg, format, kv_len, t, window);
                    assert_close(&format!("heads {h}/{kvh} hd {hd} window {window} kv_len {kv_len} t {t} {format:?}"), &got, &want, 1e-4);
                }
            }
        }
    }
}

/// The last of `kv_len` tokens in one dispatch (`attention_decode_fused.wgsl`), the
/// prefix written in chunks of 64 as the engine does: (gpu, cpu on the round-tripped
/// cache).
fn fused_decode_case(
    cfg: &Config,
    format: KvFormat,
    kv_len: usize,
    window: usize,
    qk_norm: bool,
    rotate: bool,
) -> (Vec<f32>, Vec<f32>) {
    let a = engine_case(cfg, format, kv_len, window);
    block_on(cases::one_pass_decode(ctx(), a, qk_norm, rotate))
}

#[test]
fn one_pass_decode_attention_shapes_and_lengths() {
    let partial = config(8, 1, 32, RopeStyle::HalfSplit, 16);
    for (cfg, qk_norm) in [
        (config(9, 3, 64, RopeStyle::Adjacent, 64), false),
        (partial, true),
        (config(16, 1, 64, RopeStyle::Adjacent, 64), false),
        (config(2, 2, 128, RopeStyle::HalfSplit, 128), true),
        (config(3, 1, 96, RopeStyle::Adjacent, 64), false),
        (phi3_like(), false),
    ] {
        for kv_len in [1, 2, 63, 64, 65, 130] {
            let (got, want) = fused_decode_case(&cfg, KvFormat::F32, kv_len, 0, qk_norm, true);
            assert_close(
                &format!("{cfg:?} kv_len {kv_len} qk_norm {qk_norm}"),
                &got,
                &want,
                1e-4,
            );
        }
    }
    // Layers without RoPE, with and without QK-norm.
    for (cfg, qk_norm) in [
        (config(4, 2, 64, RopeStyle::HalfSplit, 64), true),
        (config(9, 3, 64, RopeStyle::Adjacent, 64), false),
    ] {
        for kv_len in [1, 65] {
            let (got, want) = fused_decode_case(&cfg, KvFormat::F32, kv_len, 0, qk_norm, false);
            assert_close(&format!("NoPE {cfg:?} kv_len {kv_len}"), &got, &want, 1e-4);
        }
    }
}

#[test]
fn one_pass_decode_attention_up_to_its_limit() {
    let cfg = config(4, 2, 64, RopeStyle::Adjacent, 64);
    for kv_len in [2047, attention::ONE_PASS_MAX] {
        assert!(attention::one_pass(kv_len));
        let (got, want) = fused_decode_case(&cfg, KvFormat::F32, kv_len, 0, false, true);
        assert_close(&format!("kv_len {kv_len}"), &got, &want, 1e-4);
    }
    assert!(!attention::one_pass(attention::ONE_PASS_MAX + 1));
}

/// Gemma 3's shape (4 heads of 256 over one KV head, QK-norm) with sliding windows
/// over a wrapped ring, and every KV format (the new token quantized by the kernel).
#[test]
fn one_pass_decode_attention_gemma_windows_and_kv_formats() {
    let mut gemma = config(4, 1, 256, RopeStyle::HalfSplit, 256);
    gemma.attn_scale = 0.0625;
    for (window, kv_len) in [(0, 70), (7, 5), (7, 300), (100, 301), (64, 129)] {
        for (format, tol) in [
            (KvFormat::F32, 1e-4),
            (KvFormat::F16, 2e-3),
            (KvFormat::Int8, 2e-3),
            (KvFormat::Int4, 2e-2),
        ] {
            let (got, want) = fused_decode_case(&gemma, format, kv_len, window, true, true);
            assert_close(
                &format!("window {window} kv_len {kv_len} {format:?}"),
                &got,
                &want,
                tol,
            );
        }
    }
    let cfg = config(9, 3, 64, RopeStyle::Adjacent, 64);
    for format in [KvFormat::F16, KvFormat::Int8, KvFormat::Int4] {
        let (got, want) = fused_decode_case(&cfg, format, 100, 0, false, true);
        assert_close(&format!("{format:?}"), &got, &want, 2e-2);
    }
}

#[test]
fn prefill_attention_tiles_with_a_cached_prefix() {
    for (h, kvh, hd) in [(9, 3, 64), (4, 1, 32), (2, 2, 128)] {
        let cfg = config(h, kvh, hd, RopeStyle::Adjacent, hd);
        for (kv_len, t) in [(5, 5), (20, 20), (57, 20), (40, 3), (17, 2)] {
            let (got, want, _) = attention_case(&cfg, KvFormat::F32, kv_len, t);
            assert_close(
                &format!("heads {h}/{kvh} hd {hd} kv_len {kv_len} t {t}"),
                &got,
                &want,
                1e-5,
            );
        }
    }
}

/// Gemma 2's soft-capped scores (cap·tanh(score/cap)) in all three attention kernels:
/// decode (split and one-pass), prefill, with a window. The cap is small enough here
/// that every score is bent (the uncapped answer is far off).
#[test]
fn soft_capped_attention_in_every_kernel() {
    for (h, kvh, hd) in [(8, 4, 256), (9, 3, 64)] {
        let mut cfg = config(h, kvh, hd, RopeStyle::HalfSplit, hd);
        cfg.attn_softcap = 0.25;
        let uncapped = Config {
            attn_softcap: 0.0,
            ..cfg.clone()
        };
        for (kv_len, t, window) in [(65, 1, 0), (40, 13, 0), (130, 1, 7), (70, 6, 9)] {
            let (got, want, _) = windowed_attention_case(&cfg, KvFormat::F32, kv_len, t, window);
            let (_, plain, _) =
                windowed_attention_case(&uncapped, KvFormat::F32, kv_len, t, window);
            let d = max_diff(&got, &want);
            let what = format!("heads {h}/{kvh} hd {hd} kv_len {kv_len} t {t} window {window}");
            assert!(d < 1e-4, "{what}: {d}");
            assert!(
                max_diff(&plain, &want) > 1e-2,
                "{what}: the cap changed nothing"
            );
        }
        for (kv_len, window) in [(1, 0), (65, 0), (300, 7)] {
            let (got, want) = fused_decode_case(&cfg, KvFormat::Int8, kv_len, window, false, true);
            assert_close(
                &format!("one pass, hd {hd} kv_len {kv_len} window {window}"),
                &got,
                &want,
                2e-3,
            );
        }
    }
}

/// Quantized caches: the GPU equals the CPU on the same quantized values, and stays
/// within the stated tolerance of f32 attention (values in [-1, 1]).
#[test]
fn quantized_kv_cache_formats() {
    let cfg = config(9, 3, 64, RopeStyle::Adjacent, 64);
    for (format, tol) in [
        (KvFormat::F16, 2e-3),
        (KvFormat::Int8, 2e-2),
        (KvFormat::Int4, 0.15),
    ] {
        for (kv_len, t) in [(70, 1), (70, 9)] {
            let (got, same, f32ref) = attention_case(&cfg, format, kv_len, t);
            let d = max_diff(&got, &same);
            assert!(
                d < 1e-4,
                "{format:?} t {t}: {d} from the CPU on the same quantized cache"
            );
            let e = max_diff(&got, &f32ref);
            assert!(
                e < tol,
                "{format:?} t {t}: {e} from f32 attention (tolerance {tol})"
            );
        }
    }
}

#[test]
fn topk_and_argmax_with_ties_and_odd_sizes() {
    for (vocab, kk) in [
        (5, 1),
        (1000, 5),
        (49152, 1),
        (49152, 64),
        (3000, 64),
        (40, 64),
    ] {
        let mut logits = values(vocab, vocab as u64);
        logits[vocab / 2] = 2.0; // a tie: the smaller id ranks first
        logits[vocab - 1] = 2.0;
        let (got, want) = block_on(picks::top_k(ctx(), &logits, kk, None));
        assert_eq!(want.len(), kk.min(vocab));
        assert_eq!(got, want, "vocab {vocab} k {kk}");
    }
}

/// Guided generation's mask in `top_k.wgsl`: only allowed tokens are candidates (as
/// the CPU filters them), fewer allowed than k leave filler that is dropped, and a
/// mask shorter than the vocabulary allows nothing past it.
#[test]
fn topk_keeps_only_masked_in_tokens() {
    for (vocab, kk, every, mask_len) in [
        (49152, 1, 3, 49152usize),
        (49152, 64, 7, 49152),
        (3000, 64, 500, 3000), // 6 allowed < k
        (1000, 5, 2, 900),     // the mask covers 900 tokens only
        (33, 64, 1, 33),
    ] {
        let logits = values(vocab, vocab as u64 + 7);
        let mut mask = vec![0u32; mask_len.div_ceil(32)];
        for t in (0..mask_len).filter(|&t| t.is_multiple_of(every)) {
            mask[t / 32] |= 1 << (t % 32);
        }
        let (got, want) = block_on(picks::top_k(ctx(), &logits, kk, Some(&mask)));
        let allowed = (0..mask_len).filter(|&t| t.is_multiple_of(every)).count();
        assert_eq!(want.len(), kk.min(allowed));
        assert_eq!(got, want, "vocab {vocab} k {kk} every {every}");
    }
}

#[test]
fn penalty_matches_the_sampler() {
    let c = ctx();
    let logits = values(100, 21);
    let history = [5u32, 0, 99, 5, 42, 7, 0];
    let sampler = Sampler::new(SamplerOptions {
        repetition_penalty: 1.7,
        repeat_last_n: 6,
        ..Default::default()
    });
    let mut ids = sampler.penalized_ids(&history);
    ids.insert(0, ids.len() as u32);
    let lb = c.buf(&logits);
    let ib = c.gpu.upload_u32("ids", &ids).unwrap();
    let step = c.gpu.uniform(
        "step",
        bytemuck::bytes_of(&pippin::kernels::Step {
            penalty: 1.7,
            ..pippin::kernels::Step::new(1, 0)
        }),
    );
    let tb = c.gpu.upload_u32("tokens", &[0]).unwrap();
    c.run(&step, |p| sample::penalty(p, &ib, &lb, &tb).unwrap());
    let mut want = logits.clone();
    sampler.penalize(&mut want, &history);
    assert_ne!(want, logits);
    assert_eq!(c.read(&lb, 100), want);
}

/// `choose.wgsl` picks what `Sampler::pick` picks from the same candidates, for
/// greedy and for temperature, top-p and min-p over draws spread over [0, 1) (draws
/// within 1e-5 of a boundary between two tokens are skipped: f32 sums may differ in
/// their last bit).
#[test]
fn gpu_pick_matches_the_sampler() {
    let logits: Vec<f32> = values(500, 31).iter().map(|v| v * 4.0).collect();
    let settings = [
        (0.0, 1.0, 0.0),
        (0.7, 1.0, 0.0),
        (1.3, 0.8, 0.0),
        (1.0, 1.0, 0.1),
        (0.9, 0.95, 0.05),
    ];
    let mut compared = 0;
    for top_k in [1, 8, 40, 64] {
        for (temperature, top_p, min_p) in settings {
            let opts = SamplerOptions {
                temperature,
                top_k,
                top_p,
                min_p,
                ..Default::default()
            };
            compared += block_on(picks::pick(ctx(), &logits, opts, 25));
        }
    }
    assert!(compared > 450, "only {compared} draws compared");
}

/// A chained step's input token (tokens[0], picked on the GPU) is penalized with the
/// listed window, once even when listed, and not at all when the step says not to.
#[test]
fn penalty_of_a_chained_input_token() {
    let c = ctx();
    let logits = values(100, 22);
    for (listed, input, on) in [
        (vec![3u32, 50], 77u32, 1u32),
        (vec![3, 77], 77, 1),
        (vec![3], 77, 0),
    ] {
        let sampler = Sampler::new(SamplerOptions {
            repetition_penalty: 1.5,
            repeat_last_n: 64,
            ..Default::default()
        });
        let mut history = listed.clone();
        if on == 1 {
            history.push(input);
        }
        let mut ids = listed.clone();
        ids.insert(0, listed.len() as u32);
        let (lb, ib) = (c.buf(&logits), c.gpu.upload_u32("ids", &ids).unwrap());
        let tb = c.gpu.upload_u32("tokens", &[input]).unwrap();
        let step = c.gpu.uniform(
            "step",
            bytemuck::bytes_of(&pippin::kernels::Step {
                penalty: 1.5,
                penalize_input: on,
                ..pippin::kernels::Step::new(1, 0)
            }),
        );
        c.run(&step, |p| sample::penalty(p, &ib, &lb, &tb).unwrap());
        let mut want = logits.clone();
        sampler.penalize(&mut want, &history);
        assert_eq!(
            c.read(&lb, 100),
            want,
            "listed {listed:?} input {input} on {on}"
        );
    }
}
