//! Kernel parity in the browser: the same WGSL kernels on the page's WebGPU adapter
//! (SwiftShader in headless Chromium: no shader-f16, no subgroups through wgpu)
//! against the CPU reference compiled into the same wasm.
#![cfg(target_arch = "wasm32")]

use pippin::gpu::{Caps, Gpu};
use pippin::kernels::attention::{self, CacheIo, LayerCache};
use pippin::kernels::matmul::{self, GpuMatrix, Io, NormIn};
use pippin::kernels::short_conv::{self, ConvIo};
use pippin::kernels::{elementwise, sample, Kernels, Pass, Step, Tuning};
use pippin::model::reference::{self, AttnShape};
use pippin::model::short_conv::ConvState;
use pippin::model::{Activation, Arch, Config, RopeStyle};
use pippin::quant::gpu_layout::pack_palette;
use pippin::quant::kv::{round_trip, KvFormat};
use pippin::quant::palette::palettize;
use pippin::quant::{dequantize, encode, GgmlType};
use pippin::sampler::{Rng, Sampler, SamplerOptions};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.next_f32() * 2.0 - 1.0).collect()
}

/// NaN- and length-aware (see `pippin::testing`): NaN fails every `<` check.
use pippin::testing::max_abs_diff as max_diff;

struct Ctx {
    gpu: Gpu,
    /// The kernels this adapter picks (the software set on SwiftShader).
    k: Kernels,
    /// The kernels real GPUs get, forced here.
    gpu_k: Kernels,
}

async fn ctx() -> Ctx {
    let gpu = Gpu::new(Caps::default()).await.expect("WebGPU adapter");
    let k = Kernels::new(&gpu);
    let gpu_k = Kernels::with_tuning(&gpu, Tuning::gpu(0));
    Ctx { gpu, k, gpu_k }
}

impl Ctx {
    /// Records kernels with `f` in one pass for the step in `step`, submits (and, for
    /// a read after it, waits).
    fn run(&self, step: &wgpu::Buffer, f: impl FnOnce(&mut Pass)) {
        self.run_on(&self.k, step, f)
    }

    /// As `run`, with kernels `k`.
    fn run_on(&self, k: &Kernels, step: &wgpu::Buffer, f: impl FnOnce(&mut Pass)) {
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            f(&mut Pass::new(k, step, &mut pass));
        }
        self.gpu.queue.submit([enc.finish()]);
    }
    async fn read(&self, b: &wgpu::Buffer, n: usize) -> Vec<f32> {
        self.gpu.read_f32(b, 0, n as u64).await.expect("read-back")
    }
    fn buf(&self, x: &[f32]) -> wgpu::Buffer {
        self.gpu.upload_f32("x", x).unwrap()
    }
    fn step(&self, n: usize, pos0: usize) -> wgpu::Buffer {
        self.gpu
            .uniform("step", bytemuck::bytes_of(&Step::new(n, pos0)))
    }
}

const CAP: f32 = 3.0;

/// y = W·x, soft-capped by CAP, on the GPU against the CPU on `deq` (W as the CPU
/// reference sees it), with the adapter's kernels and with the real-GPU set.
async fn check_matmul(c: &Ctx, m: &GpuMatrix, deq: &[f32], t: usize, what: &str) {
    let (rows, cols) = (m.rows, m.cols);
    let x = values(t * cols, 4);
    let product = reference::matmul(&x, deq, cols);
    let scale = product.iter().fold(1f32, |m, v| m.max(v.abs()));
    // Every case soft-capped (Gemma 2's final logits; a cap of 3 bends most of these).
    let want: Vec<f32> = product
        .iter()
        .map(|&v| reference::softcap(v, CAP))
        .collect();
    for (kernels, set) in [(&c.k, "adapter's"), (&c.gpu_k, "GPU")] {
        let (xb, yb) = (
            c.buf(&x),
            c.gpu.storage("y", (t * rows * 4) as u64).unwrap(),
        );
        let step = c.step(t, 0);
        c.run_on(kernels, &step, |p| {
            let io = Io {
                cap: CAP,
                ..Io::new((&xb, cols), (&yb, rows))
            };
            matmul::matmul(p, m, &io, t).unwrap()
        });
        let d = max_diff(&c.read(&yb, t * rows).await, &want);
        assert!(
            d < 5e-5 * scale,
            "{what} {rows}x{cols} t={t} ({set} kernels): {d}"
        );
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
    // Qwen2's biases onto the leading 100 floats of rows of 130.
    let (width, stride) = (100, 130);
    let (y0, bias) = (values(stride * rows, 6), values(width, 7));
    let (yb, bb) = (c.buf(&y0), c.buf(&bias));
    c.run(&step, |p| {
        elementwise::bias_add(p, &bb, &yb, width, stride, rows).unwrap()
    });
    let mut want = y0.clone();
    for row in want.chunks_exact_mut(stride) {
        reference::add_rows(&mut row[..width], &bias);
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
    let c = ctx().await;
    let (hidden, stride, taps, slots) = (100, 305, 3, 4);
    let tap_w = values(hidden * taps, 11);
    let tb = c.buf(&tap_w);
    let state = c.gpu.storage("state", (slots * hidden * 4) as u64).unwrap();
    let mut want_state = ConvState::new(1);
    let mut pos0 = 0;
    for (i, n) in [7, 1, 1].into_iter().enumerate() {
        let bcx = values(n * stride, 20 + i as u64);
        let bb = c.buf(&bcx);
        let yb = c.gpu.storage("y", (n * hidden * 4) as u64).unwrap();
        let step = c.step(n, pos0);
        let io = ConvIo {
            bcx: &bb,
            stride,
            taps: &tb,
            state: &state,
            slots,
            y: &yb,
        };
        c.run(&step, |p| {
            short_conv::short_conv(p, hidden, taps, &io).unwrap()
        });
        let want = want_state.gated(0, pos0, &bcx, stride, &tap_w, taps);
        let d = max_diff(&c.read(&yb, n * hidden).await, &want);
        assert!(d < 1e-5, "step {i}: {d}");
        pos0 += n;
    }
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

async fn attention_case(c: &Ctx, cfg: &Config, window: usize, kv_len: usize, t: usize) {
    let (hd, stride) = (cfg.head_dim, cfg.q_dim() + 2 * cfg.kv_dim());
    let qkv = values(kv_len * stride, kv_len as u64);
    // A ring of window + 16 slots: the prefix goes in 16-token chunks as the engine's.
    let cache = LayerCache::with_window(&c.gpu, cfg, KvFormat::Int8, kv_len, window, 16).unwrap();
    let prefix = kv_len - t;
    let mut chunks: Vec<(usize, usize)> = (0..prefix)
        .step_by(16)
        .map(|p0| ((prefix - p0).min(16), p0))
        .collect();
    chunks.push((t, prefix));
    for (n, p0) in chunks {
        let rows = c.buf(&qkv[p0 * stride..(p0 + n) * stride]);
        let step = c.step(n, p0);
        c.run(&step, |p| {
            attention::kv_write(p, &CacheIo::new(cfg, KvFormat::Int8, &rows, &cache), n).unwrap()
        });
    }
    let q_rows = c.buf(&qkv[prefix * stride..]);
    let out = c.gpu.storage("out", (t * cfg.q_dim() * 4) as u64).unwrap();
    let splits = kv_len.div_ceil(64);
    let part = c
        .gpu
        .storage("part", (cfg.n_heads * splits * (hd + 2) * 4) as u64)
        .unwrap();
    let step = c.step(t, prefix);
    c.run(&step, |p| {
        if t == 1 {
            let f = KvFormat::Int8;
            attention::decode(
                p,
                &CacheIo::new(cfg, f, &q_rows, &cache),
                &part,
                &out,
                kv_len,
            )
            .unwrap()
        } else {
            attention::prefill(
                p,
                &CacheIo::new(cfg, KvFormat::Int8, &q_rows, &cache),
                &out,
                t,
            )
            .unwrap()
        }
    });
    let (mut q, mut k, mut v) = (vec![], vec![], vec![]);
    for (i, row) in qkv.chunks(stride).enumerate() {
        if i >= prefix {
            q.extend_from_slice(&row[..cfg.q_dim()]);
        }
        for h in row[cfg.q_dim()..cfg.q_dim() + cfg.kv_dim()].chunks(hd) {
            k.extend(round_trip(KvFormat::Int8, h));
        }
        for h in row[cfg.q_dim() + cfg.kv_dim()..].chunks(hd) {
            v.extend(round_trip(KvFormat::Int8, h));
        }
    }
    let s = AttnShape::of(cfg, window);
    let want = reference::attention(&q, &k, &v, kv_len, s);
    let d = max_diff(&c.read(&out, t * cfg.q_dim()).await, &want);
    assert!(
        d < 1e-4,
        "head dim {hd} window {window} kv_len {kv_len} t {t}: {d}"
    );
}

#[wasm_bindgen_test]
async fn topk_selects_the_largest() {
    let c = ctx().await;
    let vocab = 3000;
    let logits = values(vocab, 9);
    let top = sample::TopK::new(&c.gpu, vocab).unwrap();
    let lb = c.buf(&logits);
    let step = c.gpu.uniform(
        "step",
        bytemuck::bytes_of(&Step {
            top_k: 8,
            ..Step::new(1, 0)
        }),
    );
    c.run(&step, |p| top.encode(p, &lb).unwrap());
    let bytes = c.gpu.read(&top.out, 0, 64).await.unwrap();
    let got = sample::decode_pairs(&bytes, vocab);
    let mut want: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1));
    want.truncate(8);
    assert_eq!(got, want);
}

/// Guided generation's mask in Chromium: only allowed tokens are candidates.
#[wasm_bindgen_test]
async fn topk_keeps_only_masked_in_tokens() {
    let c = ctx().await;
    let (vocab, kk) = (3000, 16);
    let logits = values(vocab, 11);
    let allowed = |t: usize| t % 5 == 1;
    let mut mask = vec![0u32; vocab.div_ceil(32)];
    for t in (0..vocab).filter(|&t| allowed(t)) {
        mask[t / 32] |= 1 << (t % 32);
    }
    let top = sample::TopK::new(&c.gpu, vocab).unwrap();
    top.write_mask(&c.gpu, &mask);
    let lb = c.buf(&logits);
    let step = c.gpu.uniform(
        "step",
        bytemuck::bytes_of(&Step {
            top_k: kk as u32,
            masked: 1,
            ..Step::new(1, 0)
        }),
    );
    c.run(&step, |p| top.encode(p, &lb).unwrap());
    let bytes = c.gpu.read(&top.out, 0, (kk * 8) as u64).await.unwrap();
    let got = sample::decode_pairs(&bytes, vocab);
    let mut want: Vec<(u32, f32)> = (0..vocab)
        .filter(|&t| allowed(t))
        .map(|t| (t as u32, logits[t]))
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    want.truncate(kk);
    assert_eq!(got, want);
}

/// The GPU's pick (`choose.wgsl`) is the sampler's for the same candidates and draw
/// (pipelined decode relies on it), skipping draws within 1e-5 of a boundary.
#[wasm_bindgen_test]
async fn gpu_pick_matches_the_sampler() {
    let c = ctx().await;
    let vocab = 700;
    let logits: Vec<f32> = values(vocab, 12).iter().map(|v| v * 4.0).collect();
    let top = sample::TopK::new(&c.gpu, vocab).unwrap();
    let (lb, tokens) = (c.buf(&logits), c.gpu.storage("tokens", 16).unwrap());
    let (kk, temperature, top_p, min_p) = (40, 0.8, 0.9, 0.02);
    let sampler = Sampler::new(SamplerOptions {
        temperature,
        top_k: kk,
        top_p,
        min_p,
        ..Default::default()
    });
    let mut compared = 0;
    for i in 0..12 {
        let u = i as f32 / 12.0 + 0.01;
        let step = c.gpu.uniform(
            "step",
            bytemuck::bytes_of(&Step {
                top_k: kk as u32,
                temperature,
                top_p,
                min_p,
                u,
                ..Step::new(1, 0)
            }),
        );
        c.run(&step, |p| {
            top.encode(p, &lb).unwrap();
            top.choose(p, &tokens).unwrap();
        });
        let got = c.gpu.read(&tokens, 0, 4).await.unwrap();
        let got = u32::from_le_bytes([got[0], got[1], got[2], got[3]]);
        let cands = c.gpu.read(&top.out, 0, (kk * 8) as u64).await.unwrap();
        let cands = sample::decode_pairs(&cands, vocab);
        let want = sampler.pick(cands.clone(), u);
        let near =
            sampler.pick(cands.clone(), u - 1e-5) != want || sampler.pick(cands, u + 1e-5) != want;
        if !near {
            assert_eq!(got, want, "u {u}");
            compared += 1;
        }
    }
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
        let x: Vec<f32> = values(cols, 8).iter().map(|v| v * 30.0).collect();
        let g: Vec<f32> = values(cols, 9).iter().map(|v| 1.0 + v * 0.5).collect();
        let (xb, gb) = (c.buf(&x), c.buf(&g));
        let yb = c.gpu.storage("y", (rows * 4) as u64).unwrap();
        let nb = c.gpu.storage("normed", (cols * 4) as u64).unwrap();
        let step = c.step(1, 0);
        // The real-GPU set (16 threads a row) on every other case.
        let k = if rows % 2 == 0 { &c.gpu_k } else { &c.k };
        c.run_on(k, &step, |p| {
            let io = Io::new((&xb, cols), (&yb, rows));
            let norm = NormIn::new(&gb, 1e-6, glu, &nb);
            matmul::norm_gemv(p, &m, &io, &norm, 1).unwrap()
        });
        let xn = reference::rmsnorm(&x, &g, 1e-6);
        assert!(
            max_diff(&c.read(&nb, cols).await, &xn) < 1e-4,
            "{ty} normed"
        );
        let full = reference::matmul(&xn, &deq, cols);
        let want = match glu {
            Some(act) => reference::glu(act, &full[..rows], &full[rows..]),
            None => full,
        };
        let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
        let d = max_diff(&c.read(&yb, rows).await, &want);
        assert!(d < 1e-4 * scale, "{ty} {rows}x{cols} {glu:?}: {d}");
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
    let (qd, kd, hd) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
    let stride = qd + 2 * kd;
    let raw = values(kv_len * stride, kv_len as u64 + 3);
    let (qn, kn) = (values(hd, 5), values(hd, 6));
    let freqs = cfg.rope_freqs(None, 0);
    let mut rows = raw.clone();
    for (pos, row) in rows.chunks_mut(stride).enumerate() {
        for (part, w) in [(0..qd, &qn), (qd..qd + kd, &kn)] {
            let mut v = row[part.clone()].to_vec();
            if qk_norm {
                v = reference::rmsnorm(&v, w, cfg.rms_eps);
            }
            let len = v.len();
            let freqs = if rotate { &freqs[..] } else { &[] };
            reference::rope(&mut v, len, hd, cfg.rope_style, freqs, pos, 1.0);
            row[part].copy_from_slice(&v);
        }
    }
    let cache = LayerCache::with_window(&c.gpu, cfg, format, kv_len, window, 16).unwrap();
    let prefix = kv_len - 1;
    for p0 in (0..prefix).step_by(16) {
        let n = (prefix - p0).min(16);
        let b = c.buf(&rows[p0 * stride..(p0 + n) * stride]);
        let step = c.step(n, p0);
        c.run(&step, |p| {
            attention::kv_write(p, &CacheIo::new(cfg, format, &b, &cache), n).unwrap()
        });
    }
    let table = c.buf(&elementwise::rope_table(cfg, &freqs, kv_len));
    let (last, norms) = (c.buf(&raw[prefix * stride..]), c.buf(&[qn, kn].concat()));
    let out = c.gpu.storage("out", (qd * 4) as u64).unwrap();
    let step = c.step(1, prefix);
    c.run(&step, |p| {
        let qk = qk_norm.then_some(&norms);
        let (t, r) = (&table, rotate);
        attention::decode_fused(
            p,
            &CacheIo::new(cfg, format, &last, &cache),
            (t, r),
            qk,
            &out,
        )
        .unwrap()
    });
    let (mut k, mut v) = (vec![], vec![]);
    for row in rows.chunks(stride) {
        for (dst, part) in [(&mut k, &row[qd..qd + kd]), (&mut v, &row[qd + kd..])] {
            dst.extend(part.chunks(hd).flat_map(|h| round_trip(format, h)));
        }
    }
    let s = AttnShape::of(cfg, window);
    let want = reference::attention(&rows[prefix * stride..][..qd], &k, &v, kv_len, s);
    let d = max_diff(&c.read(&out, qd).await, &want);
    let tol = if format == KvFormat::F32 { 1e-4 } else { 2e-3 };
    assert!(
        d < tol,
        "head dim {hd} window {window} kv_len {kv_len} {format:?}: {d}"
    );
}
