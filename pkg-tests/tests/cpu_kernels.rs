//! The CPU backend's wasm SIMD128 kernels (this crate is built with `+simd128`, as the
//! package is) against their plain-loop versions and the dequantized weights, over
//! awkward shapes.
#![cfg(target_arch = "wasm32")]

#[cfg(not(target_feature = "simd128"))]
compile_error!("the package's CPU kernels are built for SIMD128 (.cargo/config.toml)");

use pippin::engine::cpu::dot::{
    dot, dot_f32, dot_scalar, dots, format, has_int_dot, palette, palette_scalar, Levels, Q16,
};
use pippin::engine::QMatrix;
use pippin::model::reference::matmul;
use pippin::model::Linear;
use pippin::quant::encode::random_blocks;
use pippin::quant::{dequantize, GgmlType};
use pippin::sampler::Rng;
use pippin::testing::assert_close;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|i| (r.next_f32() * 2.0 - 1.0) * [0.0, 1e-3, 1.0, 40.0][i / 32 % 4])
        .collect()
}

/// `Σ|w||x|`: what an error of the product is measured against.
fn magnitude(w: &[f32], x: &[f32]) -> f32 {
    w.iter().zip(x).map(|(a, b)| (a * b).abs()).sum()
}

/// A SIMD dot against its plain loop (the same products, summed in another order) and
/// against the exact product of `w` and `x` within `tol` of their magnitude.
fn check_dot(what: &str, (simd, plain): (f32, f32), (w, x): (&[f32], &[f32]), tol: f32) {
    let m = magnitude(w, x);
    assert!(
        (simd - plain).abs() <= 1e-6 * m + 1e-6,
        "{what}: {simd} vs {plain}"
    );
    let exact: f32 = w.iter().zip(x).map(|(a, b)| a * b).sum();
    assert!(
        (simd - exact).abs() <= tol * m + 1e-6,
        "{what}: {simd} vs {exact}"
    );
}

#[wasm_bindgen_test]
fn simd_integer_dots_equal_the_plain_loops() {
    // Every format with an integer dot product.
    let formats = GgmlType::ALL.iter().copied().filter(|t| has_int_dot(*t));
    for (i, ty) in formats.enumerate() {
        assert!(has_int_dot(ty));
        // One block, a few, and a row of the default model's width; K-quants in
        // super-blocks of 256.
        let per = ty.block().0 as usize;
        for cols in [per, 3 * per, 576usize.next_multiple_of(per)] {
            let bytes = random_blocks(ty, cols, 3 + i as u64);
            let w = dequantize(ty, &bytes, cols).unwrap();
            let x = values(cols, 11 + i as u64);
            let q = Q16::quantize(&x);
            let (simd, plain) = (
                dot(ty, &bytes, q.row(0, cols)),
                dot_scalar(ty, &bytes, q.row(0, cols)),
            );
            // The same integers, summed in another order in f32.
            check_dot(&format!("{ty} {cols}"), (simd, plain), (&w, &x), 1e-4);
            // Eleven tokens: blocks of 32 in two groups of four and one of three,
            // K-quants in a group of eight and one of three, each block unpacked once
            // per group.
            let t = 11;
            let xs = values(t * cols, 60 + i as u64);
            let q = Q16::quantize(&xs).with_lanes(cols);
            let mut many = vec![0f32; t];
            let f = format(ty).expect("a format with an integer dot product");
            dots(f, &bytes, &q, cols, &mut many);
            for (k, &v) in many.iter().enumerate() {
                let plain = dot_scalar(ty, &bytes, q.row(k, cols));
                let m = magnitude(&w, &xs[k * cols..][..cols]);
                assert!(
                    (v - plain).abs() <= 1e-6 * m + 1e-6,
                    "{ty} {cols} token {k}: {v} vs {plain}"
                );
                // Speculative decoding checks guesses through `dots`: each token's
                // sum is the one-token kernel's, bit for bit.
                let one = dot(ty, &bytes, q.row(k, cols));
                assert!(
                    v.to_bits() == one.to_bits(),
                    "{ty} {cols} token {k}: {v} vs {one}"
                );
            }
        }
    }
    for n in [1, 7, 8, 33, 576] {
        let (a, b) = (values(n, 1), values(n, 2));
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!(
            (dot_f32(&a, &b) - plain).abs() <= 1e-5 * magnitude(&a, &b) + 1e-6,
            "{n}"
        );
    }
}

#[wasm_bindgen_test]
fn simd_palette_dots_equal_the_plain_loops() {
    for bits in [2u32, 4] {
        for cols in [32usize, 96, 576] {
            let seed = bits as u64 * 1000 + cols as u64;
            let mut r = Rng::new(seed);
            let mut half = || (r.next_f32() * 65536.0) as u32 & 0xffff;
            let words: Vec<u32> = (0..cols * bits as usize / 32)
                .map(|_| (half() << 16) | half())
                .collect();
            let lut: Vec<f32> = values(1 << bits, seed + 1)
                .iter()
                .map(|v| v * 3.0)
                .collect();
            let lv = Levels::new(&lut);
            let x = values(cols, seed + 2);
            let q = Q16::quantize(&x);
            let (simd, plain) = (
                palette(bits, &words, &lv, q.row(0, cols)),
                palette_scalar(bits, &words, &lv, q.row(0, cols)),
            );
            // The table's weights, decoded: index j is bits `bits·(j mod 32/bits)` of
            // word j / (32/bits).
            let per = 32 / bits as usize;
            let w: Vec<f32> = (0..cols)
                .map(|j| {
                    lut[((words[j / per] >> ((j % per) as u32 * bits)) & ((1 << bits) - 1))
                        as usize]
                })
                .collect();
            // Levels within 1/16382 of the table's largest.
            check_dot(&format!("{bits} {cols}"), (simd, plain), (&w, &x), 3e-4);
        }
    }
}

#[wasm_bindgen_test]
fn quantized_matrices_multiply_like_their_dequantized_weights() {
    use GgmlType::*;
    let formats = [Q4_1, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K, F16];
    for (i, ty) in formats.into_iter().enumerate() {
        let (rows, cols, t) = (67, 512, 11);
        let bytes = random_blocks(ty, rows * cols, 20 + i as u64);
        let w = dequantize(ty, &bytes, rows * cols).unwrap();
        let m = QMatrix::ggml(ty, rows, cols, bytes).unwrap();
        let x = values(t * cols, 30 + i as u64);
        let scale =
            x.iter().map(|v| v.abs()).sum::<f32>() * w.iter().fold(0f32, |a, v| a.max(v.abs()));
        let what = format!("{ty} {rows}x{cols}, {t} tokens");
        assert_close(
            &what,
            &m.apply(&x, cols),
            &matmul(&x, &w, cols),
            1e-4 * scale,
        );
    }
}

#[wasm_bindgen_test]
fn int8_attention_in_simd_reads_keys_and_values_through_their_scales() {
    for (t, kv_len, window) in [(1, 1, usize::MAX), (1, 37, usize::MAX), (5, 40, 8)] {
        let (got, want) = pippin::testing::int8_attention_case(t, kv_len, window);
        let what = format!("{t} queries over {kv_len}, window {window}");
        assert_close(&what, &got, &want, 1e-4);
    }
}
