//! RMSNorm, RoPE (+QK-norm), SwiGLU, the KV cache writes, attention (flash-decoding
//! and tiled prefill) and top-k sampling against the CPU reference, over awkward
//! shapes: one token, one KV head, many query heads per KV head, KV lengths crossing
//! split boundaries, long contexts.

mod common;

use common::gpu::{ctx, max_diff, values};
use pippin::kernels::{attention, elementwise, sample};
use pippin::model::reference::{self, AttnShape};
use pippin::model::{Arch, Config, RopeStyle};
use pippin::quant::kv::{round_trip, KvFormat};
use pippin::sampler::{Sampler, SamplerOptions};

fn config(
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    style: RopeStyle,
    rope_dim: usize,
) -> Config {
    Config {
        arch: Arch::Llama,
        n_layers: 1,
        n_heads,
        n_kv_heads,
        head_dim,
        hidden: n_heads * head_dim,
        ffn_dim: 64,
        vocab_size: 64,
        rms_eps: 1e-5,
        rope_theta: 10_000.0,
        rope_dim,
        rope_style: style,
        rope_freq_factors: false,
        context_length: 4096,
        tied_embeddings: true,
        qk_norm: false,
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
        c.run(|p| {
            elementwise::rmsnorm(&c.k, p, &step, &wb, &xb, &yb, len, 1e-5, rows, false).unwrap()
        });
        let want = reference::rmsnorm(&x, &w, 1e-5);
        assert!(
            max_diff(&c.read(&yb, len * rows), &want) < 1e-5,
            "len {len}"
        );
        let last = c.zeros(len);
        c.run(|p| {
            elementwise::rmsnorm(&c.k, p, &step, &wb, &xb, &last, len, 1e-5, rows, true).unwrap()
        });
        assert!(max_diff(&c.read(&last, len), &want[(rows - 1) * len..]) < 1e-5);
    }
}

#[test]
fn rope_both_styles_partial_dims_and_qk_norm() {
    let c = ctx();
    let cases = [
        (config(9, 3, 64, RopeStyle::Adjacent, 64), 0, false),
        (config(4, 1, 32, RopeStyle::HalfSplit, 32), 1000, true),
        (config(2, 2, 64, RopeStyle::HalfSplit, 32), 7, false),
        (config(3, 1, 96, RopeStyle::Adjacent, 64), 4000, true),
    ];
    for (cfg, pos0, qk_norm) in cases {
        let t = 3;
        let stride = cfg.q_dim() + 2 * cfg.kv_dim();
        let qkv = values(t * stride, 11);
        let (qn, kn) = (values(cfg.head_dim, 12), values(cfg.head_dim, 13));
        let freqs = reference::rope_freqs(&cfg, None);
        let table = c.buf(&elementwise::rope_table(&cfg, &freqs, pos0 + t));
        let (qb, qnb, knb) = (c.buf(&qkv), c.buf(&qn), c.buf(&kn));
        let step = c.step(t, pos0);
        let norms = qk_norm.then_some((&qnb, &knb));
        c.run(|p| elementwise::rope(&c.k, p, &step, &cfg, &table, &qb, norms, t).unwrap());
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
            reference::rope(
                &mut q,
                cfg.q_dim(),
                cfg.head_dim,
                cfg.rope_style,
                &freqs,
                pos0 + ti,
            );
            reference::rope(
                &mut k,
                cfg.kv_dim(),
                cfg.head_dim,
                cfg.rope_style,
                &freqs,
                pos0 + ti,
            );
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

#[test]
fn swiglu_matches() {
    let c = ctx();
    for (f, t) in [(1536, 1), (7, 3), (100, 11)] {
        let gu = values(t * 2 * f, 4)
            .iter()
            .map(|v| v * 8.0)
            .collect::<Vec<_>>();
        let (gb, ab) = (c.buf(&gu), c.zeros(t * f));
        let step = c.step(t, 0);
        c.run(|p| elementwise::swiglu(&c.k, p, &step, &gb, &ab, f, t).unwrap());
        let want: Vec<f32> = gu
            .chunks(2 * f)
            .flat_map(|r| reference::swiglu(&r[..f], &r[f..]))
            .collect();
        assert!(max_diff(&c.read(&ab, t * f), &want) < 1e-5);
    }
}

/// Writes `kv_len` tokens of K/V through kv_write, then runs attention for the last
/// `t` tokens (decode when t = 1, else prefill); returns (gpu, cpu on the round-tripped
/// cache, cpu in f32).
fn attention_case(
    cfg: &Config,
    format: KvFormat,
    kv_len: usize,
    t: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let c = ctx();
    let stride = cfg.q_dim() + 2 * cfg.kv_dim();
    let qkv = values(kv_len * stride, (kv_len * 7 + t) as u64);
    let cache = attention::LayerCache::new(&c.gpu, cfg, format, kv_len).unwrap();
    let (qkv_b, out) = (c.buf(&qkv), c.zeros(t * cfg.q_dim()));
    // The prefix and the new tokens are written as two steps, as the engine does.
    let prefix = kv_len - t;
    for (n, pos0) in [(prefix, 0), (t, prefix)] {
        if n == 0 {
            continue;
        }
        let rows = c.buf(&qkv[pos0 * stride..(pos0 + n) * stride]);
        let step = c.step(n, pos0);
        c.run(|p| attention::kv_write(&c.k, p, &step, cfg, format, &rows, &cache, n).unwrap());
    }
    let q_rows = c.buf(&qkv[prefix * stride..]);
    let step = c.step(t, prefix);
    let part = c.zeros(cfg.n_heads * kv_len.div_ceil(64) * (cfg.head_dim + 2));
    c.run(|p| {
        if t == 1 {
            attention::decode(
                &c.k, p, &step, cfg, format, &q_rows, &cache, &part, &out, kv_len,
            )
            .unwrap()
        } else {
            attention::prefill(&c.k, p, &step, cfg, format, &q_rows, &cache, &out, t).unwrap()
        }
    });
    let _ = &qkv_b;
    let got = c.read(&out, t * cfg.q_dim());
    let split = |round: bool| {
        let (mut q, mut k, mut v) = (vec![], vec![], vec![]);
        for (i, row) in qkv.chunks(stride).enumerate() {
            if i >= prefix {
                q.extend_from_slice(&row[..cfg.q_dim()]);
            }
            for (dst, part) in [
                (&mut k, &row[cfg.q_dim()..cfg.q_dim() + cfg.kv_dim()]),
                (&mut v, &row[cfg.q_dim() + cfg.kv_dim()..]),
            ] {
                for head in part.chunks(cfg.head_dim) {
                    dst.extend(if round {
                        round_trip(format, head)
                    } else {
                        head.to_vec()
                    });
                }
            }
        }
        let s = AttnShape {
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
        };
        reference::attention(&q, &k, &v, kv_len, s)
    };
    (got, split(true), split(false))
}

#[test]
fn decode_attention_over_split_boundaries_and_groups() {
    for (h, kvh, hd) in [(9, 3, 64), (8, 1, 32), (2, 2, 128), (16, 1, 64)] {
        let cfg = config(h, kvh, hd, RopeStyle::Adjacent, hd);
        for kv_len in [1, 63, 64, 65, 200] {
            let (got, want, _) = attention_case(&cfg, KvFormat::F32, kv_len, 1);
            let d = max_diff(&got, &want);
            assert!(d < 1e-5, "heads {h}/{kvh} hd {hd} kv_len {kv_len}: {d}");
        }
    }
}

#[test]
fn decode_attention_long_context() {
    let cfg = config(4, 2, 64, RopeStyle::Adjacent, 64);
    let (got, want, _) = attention_case(&cfg, KvFormat::F32, 3000, 1);
    assert!(max_diff(&got, &want) < 1e-5);
}

#[test]
fn prefill_attention_tiles_with_a_cached_prefix() {
    for (h, kvh, hd) in [(9, 3, 64), (4, 1, 32), (2, 2, 128)] {
        let cfg = config(h, kvh, hd, RopeStyle::Adjacent, hd);
        for (kv_len, t) in [(5, 5), (20, 20), (57, 20), (40, 3), (17, 2)] {
            let (got, want, _) = attention_case(&cfg, KvFormat::F32, kv_len, t);
            let d = max_diff(&got, &want);
            assert!(
                d < 1e-5,
                "heads {h}/{kvh} hd {hd} kv_len {kv_len} t {t}: {d}"
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
    let c = ctx();
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
        let top = sample::TopK::new(&c.gpu, vocab).unwrap();
        let lb = c.buf(&logits);
        c.run(|p| top.encode(&c.k, p, &lb, kk).unwrap());
        let bytes = pollster::block_on(c.gpu.read(&top.out, 0, (kk * 8) as u64)).unwrap();
        let got = sample::decode_pairs(&bytes, vocab);
        let mut want: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
        want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        want.truncate(kk);
        assert_eq!(got, want, "vocab {vocab} k {kk}");
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
    c.run(|p| sample::penalty(&c.k, p, &ib, &lb, 1.7).unwrap());
    let mut want = logits.clone();
    sampler.penalize(&mut want, &history);
    assert_ne!(want, logits);
    assert_eq!(c.read(&lb, 100), want);
}
