//! Kernel parity in the browser: the same WGSL kernels on the page's WebGPU adapter
//! (SwiftShader in headless Chromium: no shader-f16, no subgroups through wgpu)
//! against the CPU reference compiled into the same wasm. The case bodies are the
//! native suite's (`pippin::testing::kernels`), over this file's shapes.
#![cfg(target_arch = "wasm32")]

use pippin::gpu::Caps;
use pippin::kernels::elementwise;
use pippin::kernels::matmul::GpuMatrix;
use pippin::model::reference;
use pippin::model::{Activation, Arch, Config, RopeStyle};
use pippin::quant::gpu_layout::pack_palette;
use pippin::quant::kv::KvFormat;
use pippin::quant::palette::palettize;
use pippin::quant::{dequantize, encode, GgmlType};
use pippin::sampler::SamplerOptions;
use pippin::testing::kernels::attention::{self, Case};
use pippin::testing::kernels::matmul as matmul_case;
use pippin::testing::kernels::{self, sample, values, Ctx};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// NaN- and length-aware (see `pippin::testing`): NaN fails every `<` check.
use pippin::testing::max_abs_diff as max_diff;

async fn ctx() -> Ctx {
    Ctx::new(Caps::default()).await.expect("WebGPU adapter")
}

/// y = W·x soft-capped (`matmul_case::product`) against the CPU on `deq` (W as the
/// CPU reference sees it), with the adapter's kernels and with the real-GPU set.
async fn check_matmul(c: &Ctx, m: &GpuMatrix, deq: &[f32], t: usize, what: &str) {
    for (k, set) in [(&c.k, "adapter's"), (&c.gpu_k, "GPU")] {
        let what = format!("{what} ({set} kernels)");
        matmul_case::product(c, k, (m, deq), t, false, &what).await;
    }
}

const SHAPES: [(usize, usize, usize); 3] = [(37, 96, 1), (70, 64, 5), (129, 160, 17)];

#[wasm_bindgen_test]
async fn matmul_formats_gemv_and_gemm() {
    let c = ctx().await;
    for (ty, bytes_of) in [
        (GgmlType::Q4_1, encode::q4_1 as fn(&[f32]) -> Vec<u8>),
        (GgmlType::Q8_0, encode::q8_0),
        (GgmlType::Q4_0, encode::q4_0),
        (GgmlType::F16, encode::f16s),
    ] {
        for (rows, cols, t) in SHAPES {
            let bytes = bytes_of(&values(rows * cols, 3));
            let m = GpuMatrix::upload(&c.gpu, "w", ty, &bytes, rows, cols).unwrap();
            let deq = dequantize(ty, &bytes, rows * cols).unwrap();
            check_matmul(&c, &m, &deq, t, &ty.to_string()).await;
        }
    }
}

/// The formats of downloaded files, as random valid blocks (every bit pattern of
/// values and sub-scales, f16 scales subnormal one time in four: SwiftShader flushes
/// subnormals in unpack2x16float, and Q6_K's d is subnormal in nearly every block).
#[wasm_bindgen_test]
async fn matmul_k_quants_and_5_bit_formats() {
    let c = ctx().await;
    use GgmlType::*;
    for ty in [Q5_0, Q5_1, Iq4Nl, Q2K, Q3K, Q4K, Q5K, Q6K, F16] {
        for (rows, cols, t) in [(37, 256, 1), (70, 512, 5), (9, 256, 17)] {
            let bytes = encode::random_blocks(ty, rows * cols, (rows + cols) as u64);
            let m = GpuMatrix::upload(&c.gpu, "w", ty, &bytes, rows, cols).unwrap();
            let deq = dequantize(ty, &bytes, rows * cols).unwrap();
            check_matmul(&c, &m, &deq, t, &ty.to_string()).await;
        }
    }
    // Q6_K as Gemma 3's files have it: d subnormal in every block.
    let (rows, cols) = (33, 512);
    let mut bytes = encode::random_blocks(GgmlType::Q6K, rows * cols, 5);
    for b in bytes.chunks_exact_mut(210) {
        b[208..210].copy_from_slice(&0x0123u16.to_le_bytes()); // an f16 subnormal
    }
    let m = GpuMatrix::upload(&c.gpu, "w", GgmlType::Q6K, &bytes, rows, cols).unwrap();
    let deq = dequantize(GgmlType::Q6K, &bytes, rows * cols).unwrap();
    assert!(deq.iter().any(|v| *v != 0.0));
    check_matmul(&c, &m, &deq, 1, "Q6_K, subnormal d").await;
}

#[wasm_bindgen_test]
async fn palettized_matmul_2_and_4_bit() {
    let c = ctx().await;
    for (bits, lut_rows) in [(4, 16), (2, 16), (4, 5), (2, 3), (2, 1)] {
        for (rows, cols, t) in SHAPES {
            let p = palettize(&values(rows * cols, 3), rows, cols, bits, lut_rows, 1, None);
            let packed = pack_palette(&p).unwrap();
            // Small parts: tables must follow their rows across a split.
            let m = GpuMatrix::from_packed_split(&c.gpu, "w", packed, rows, cols, 40 * 64).unwrap();
            let what = format!("{bits}-bit palette, {lut_rows} rows a table");
            check_matmul(&c, &m, &p.dequantize(), t, &what).await;
        }
    }
}

#[wasm_bindgen_test]
async fn rmsnorm_gated_activations_and_biases() {
    let c = ctx().await;
    let (len, rows) = (576, 3);
    let (x, w) = (values(len * rows, 1), values(len, 2));
    let (xb, wb, yb) = (
        c.buf(&x),
        c.buf(&w),
        c.gpu.storage("y", (len * rows * 4) as u64).unwrap(),
    );
    let step = c.step(rows, 0);
    c.run(&step, |p| {
        let out = elementwise::NormOut::default();
        elementwise::rmsnorm(p, &wb, &xb, &yb, len, 1e-5, rows, out).unwrap()
    });
    assert!(
        max_diff(
            &c.read(&yb, len * rows).await,
            &reference::rmsnorm(&x, &w, 1e-5)
        ) < 1e-5
    );
    let f = 100;
    let gu = values(2 * f * rows, 5);
    let (gb, ab) = (
        c.buf(&gu),
        c.gpu.storage("a", (f * rows * 4) as u64).unwrap(),
    );
    for act in [Activation::Silu, Activation::GeluTanh] {
        c.run(&step, |p| {
            elementwise::glu(p, act, &gb, &ab, f, rows).unwrap()
        });
        let want: Vec<f32> = gu
            .chunks(2 * f)
            .flat_map(|r| reference::glu(act, &r[..f], &r[f..]))
            .collect();
        assert!(
            max_diff(&c.read(&ab, f * rows).await, &want) < 1e-5,
            "{act:?}"
        );
    }
    // Biases onto the leading 100 floats of rows of 130, × 0.5.
    let (width, stride) = (100, 130);
    let (y0, bias) = (values(stride * rows, 6), values(width, 7));
    let (yb, bb) = (c.buf(&y0), c.buf(&bias));
    c.run(&step, |p| {
        elementwise::bias_add(p, &bb, &yb, (width, stride), 0.5, rows).unwrap()
    });
    let half: Vec<f32> = bias.iter().map(|b| 0.5 * b).collect();
    let mut want = y0.clone();
    for row in want.chunks_exact_mut(stride) {
        reference::add_rows(&mut row[..width], &half);
    }
    assert!(
        max_diff(&c.read(&yb, stride * rows).await, &want) < 1e-6,
        "bias_add"
    );
}

/// LFM2's gated short convolution: a prompt of 7 tokens then two single-token steps,
/// the state carried in a ring that wraps, against `ConvState` with C's gate.
#[wasm_bindgen_test]
async fn short_conv_over_a_ring_state() {
    kernels::short_conv(&ctx().await, (100, 305, 3, 4), &[7, 1, 1]).await;
}

/// The attention shapes of the tests: SmolLM2's (9 query heads of 64 on 3 KV heads,
/// adjacent RoPE pairs), Gemma 3's (4 query heads of 256 on one KV head, its own
/// scale, half-split RoPE) and Gemma 2's soft-capped scores (a cap that bends most of
/// these).
fn attention_shapes() -> [Config; 3] {
    let smollm2 = Config {
        arch: Arch::Llama,
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        hidden: 576,
        rope_dim: 64,
        rope_style: RopeStyle::Adjacent,
        context_length: 512,
        attn_scale: 0.125,
        ..Config::default()
    };
    let gemma = Config {
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 256,
        hidden: 640,
        rope_dim: 256,
        rope_style: RopeStyle::HalfSplit,
        attn_scale: 0.0625,
        ..smollm2.clone()
    };
    let capped = Config {
        attn_softcap: 0.25,
        ..gemma.clone()
    };
    [smollm2, gemma, capped]
}

/// Decode and prefill attention over an int8 cache: SmolLM2's shape, and Gemma 3's
/// (4 query heads of 256 on one KV head, its own scale) with and without a sliding
/// window over a ring cache.
#[wasm_bindgen_test]
async fn attention_decode_and_prefill_over_int8_kv() {
    let c = ctx().await;
    let [smollm2, gemma, capped] = attention_shapes();
    for (cfg, window) in [(&smollm2, 0), (&gemma, 0), (&gemma, 20), (&capped, 20)] {
        for (kv_len, t) in [(70, 1), (40, 9), (130, 1), (100, 13)] {
            attention_case(&c, cfg, window, kv_len, t).await;
        }
    }
}

/// `t` tokens' attention after `kv_len - t` cached, the prefix written in chunks of 16
/// (a windowed cache is a ring of window + 16 slots).
async fn attention_case(c: &Ctx, cfg: &Config, window: usize, kv_len: usize, t: usize) {
    let a = Case {
        cfg,
        format: KvFormat::Int8,
        kv_len,
        window,
        chunk: 16,
    };
    let (got, want, _) = attention::decode_or_prefill(c, a, t).await;
    let (hd, d) = (cfg.head_dim, max_diff(&got, &want));
    assert!(
        d < 1e-4,
        "head dim {hd} window {window} kv_len {kv_len} t {t}: {d}"
    );
}

#[wasm_bindgen_test]
async fn topk_selects_the_largest() {
    let logits = values(3000, 9);
    let (got, want) = sample::top_k(&ctx().await, &logits, 8, None).await;
    assert_eq!(want.len(), 8);
    assert_eq!(got, want);
}

/// Guided generation's mask in Chromium: only allowed tokens are candidates.
#[wasm_bindgen_test]
async fn topk_keeps_only_masked_in_tokens() {
    let vocab = 3000;
    let logits = values(vocab, 11);
    let mut mask = vec![0u32; vocab.div_ceil(32)];
    for t in (0..vocab).filter(|t| t % 5 == 1) {
        mask[t / 32] |= 1 << (t % 32);
    }
    let (got, want) = sample::top_k(&ctx().await, &logits, 16, Some(&mask)).await;
    assert_eq!(want.len(), 16);
    assert_eq!(got, want);
}

/// The GPU's pick (`choose.wgsl`) is the sampler's for the same candidates and draw
/// (pipelined decode relies on it), skipping draws within 1e-5 of a boundary.
#[wasm_bindgen_test]
async fn gpu_pick_matches_the_sampler() {
    let logits: Vec<f32> = values(700, 12).iter().map(|v| v * 4.0).collect();
    let opts = SamplerOptions {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.02,
        ..Default::default()
    };
    let compared = sample::pick(&ctx().await, &logits, opts, 12).await;
    assert!(compared >= 10, "only {compared} draws compared");
}

/// RMSNorm folded into the GEMV, with and without the gated epilogue ([gate; up]
/// rows), rows staged and (wider than the stage) not.
#[wasm_bindgen_test]
async fn norm_folded_into_gemv_and_glu() {
    let c = ctx().await;
    for (ty, rows, cols, glu) in [
        (GgmlType::Q4_1, 37, 576, None),
        (GgmlType::Q8_0, 70, 4096, None),
        (GgmlType::Q4K, 9, 256, Some(Activation::Silu)),
        (GgmlType::Q6K, 33, 512, Some(Activation::GeluTanh)),
        (GgmlType::Q5_0, 64, 96, Some(Activation::Silu)),
    ] {
        let w_rows = if glu.is_some() { 2 * rows } else { rows };
        let bytes = encode::random_blocks(ty, w_rows * cols, (rows * cols) as u64);
        let m = GpuMatrix::upload(&c.gpu, "w", ty, &bytes, w_rows, cols).unwrap();
        let deq = dequantize(ty, &bytes, w_rows * cols).unwrap();
        // The real-GPU set (16 threads a row) on every other case.
        let k = if rows % 2 == 0 { &c.gpu_k } else { &c.k };
        let what = ty.to_string();
        matmul_case::norm_product(&c, k, (&m, &deq), glu, false, &what).await;
    }
}

/// One-pass decode attention: the raw row's QK-norm and RoPE, its quantized K and V
/// written, attention over the cache (SmolLM2's and Gemma 3's shapes, a window).
#[wasm_bindgen_test]
async fn one_pass_decode_attention() {
    let c = ctx().await;
    let [smollm2, gemma, capped] = attention_shapes();
    // A layer without RoPE (SmolLM3's NoPE layers), then Gemma 2's soft-capped scores.
    for (cfg, window, qk_norm, kv_len, rotate) in [
        (&smollm2, 0, false, 1, true),
        (&smollm2, 0, false, 130, true),
        (&gemma, 0, true, 65, true),
        (&gemma, 20, true, 100, true),
        (&gemma, 0, true, 40, false),
        (&capped, 20, false, 100, true),
    ] {
        for format in [KvFormat::F32, KvFormat::Int8] {
            fused_case(&c, cfg, format, window, qk_norm, kv_len, rotate).await;
        }
    }
}

async fn fused_case(
    c: &Ctx,
    cfg: &Config,
    format: KvFormat,
    window: usize,
    qk_norm: bool,
    kv_len: usize,
    rotate: bool,
) {
    let a = Case {
        cfg,
        format,
        kv_len,
        window,
        chunk: 16,
    };
    let (got, want) = attention::one_pass_decode(c, a, qk_norm, rotate).await;
    let (hd, d) = (cfg.head_dim, max_diff(&got, &want));
    let tol = if format == KvFormat::F32 { 1e-4 } else { 2e-3 };
    assert!(
        d < tol,
        "head dim {hd} window {window} kv_len {kv_len} {format:?}: {d}"
    );
}
