//! The CPU backend's int8 attention on one case, beside its reference: shared by the
//! native test (plain loops) and the browser's (SIMD128), so both check the same thing.

use crate::engine::cpu::kv::Int8Kv;
use crate::model::reference::{attention, AttnShape, KvStore};
use crate::quant::kv::{round_trip, KvFormat};
use crate::rng::Rng;

/// `t` queries over `kv_len` positions, the last `t` of them appended second (as a
/// prefill after a cached prompt), 9 heads on 3 KV heads of 64, a sliding `window`:
/// (the int8 cache's attention, the f32 reference over the same keys and values rounded
/// as the cache stores them), for a tolerance check.
pub fn int8_attention_case(t: usize, kv_len: usize, window: usize) -> (Vec<f32>, Vec<f32>) {
    let (heads, kv_heads, hd) = (9, 3, 64);
    let s = AttnShape {
        n_heads: heads,
        n_kv_heads: kv_heads,
        head_dim: hd,
        scale: 0.125,
        softcap: 0.0,
        window,
    };
    let values = |n: usize, seed: u64| -> Vec<f32> {
        let mut r = Rng::new(seed);
        (0..n).map(|_| r.next_f32() * 2.0 - 1.0).collect()
    };
    let kv_dim = kv_heads * hd;
    let (k, v) = (values(kv_len * kv_dim, 1), values(kv_len * kv_dim, 2));
    let q = values(t * heads * hd, 3);
    let mut cache = Int8Kv::with_shape(1, kv_heads, hd);
    let split = kv_len - t;
    cache.append(0, &k[..split * kv_dim], &v[..split * kv_dim]);
    cache.advance(split);
    cache.append(0, &k[split * kv_dim..], &v[split * kv_dim..]);
    cache.advance(t);
    let round = |x: &[f32]| -> Vec<f32> {
        x.chunks(hd)
            .flat_map(|h| round_trip(KvFormat::Int8, h))
            .collect()
    };
    let want = attention(&q, &round(&k), &round(&v), kv_len, s);
    (cache.attend(0, &q, s), want)
}
