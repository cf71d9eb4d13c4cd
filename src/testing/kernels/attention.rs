//! Attention over the GPU's KV cache against the reference: keys and values written
//! through `kv_write` in the engine's chunks, then decode (flash-decoding splits),
//! prefill (tiles) or the one-pass decode (QK-norm, RoPE, the cache write and the
//! attention in one dispatch).

use super::{values, Ctx};
use crate::kernels::attention::{self, CacheIo, LayerCache};
use crate::kernels::elementwise;
use crate::model::reference::{self, AttnShape};
use crate::model::Config;
use crate::quant::kv::{round_trip, KvFormat};

/// A layer's attention: its shape, the cache's format, the positions cached and the
/// sliding window (0: none); the prefix is written in chunks of `chunk` (a windowed
/// cache is a ring of window + chunk slots, as the engine's).
#[derive(Clone, Copy)]
pub struct Case<'a> {
    pub cfg: &'a Config,
    pub format: KvFormat,
    pub kv_len: usize,
    pub window: usize,
    pub chunk: usize,
}

impl Case<'_> {
    fn cache(&self, c: &Ctx) -> LayerCache {
        let (cfg, f) = (self.cfg, self.format);
        let cache = LayerCache::with_window(&c.gpu, cfg, f, self.kv_len, self.window, self.chunk)
            .expect("a layer cache");
        if self.window > 0 && self.kv_len > self.window + self.chunk {
            assert!(cache.slots < self.kv_len, "the ring must wrap in this case");
        }
        cache
    }

    /// Rows `p0..p0 + n` of `rows` (qkv rows of `stride`) into `cache` in one step.
    fn write(&self, c: &Ctx, cache: &LayerCache, rows: &[f32], (p0, n): (usize, usize)) {
        let stride = rows.len() / self.kv_len;
        let b = c.buf(&rows[p0 * stride..(p0 + n) * stride]);
        let step = c.step(n, p0);
        c.run(&step, |p| {
            let io = CacheIo::new(self.cfg, self.format, &b, cache);
            attention::kv_write(p, &io, n).expect("kv_write")
        });
    }

    /// The first `prefix` rows into `cache`, `chunk` at a time.
    fn write_prefix(&self, c: &Ctx, cache: &LayerCache, rows: &[f32], prefix: usize) {
        for p0 in (0..prefix).step_by(self.chunk) {
            self.write(c, cache, rows, (p0, (prefix - p0).min(self.chunk)));
        }
    }

    /// The keys and values of `rows` as the reference takes them: rounded as the
    /// cache stores them (`round`), or exact.
    fn keys_values(&self, rows: &[f32], round: bool) -> (Vec<f32>, Vec<f32>) {
        let cfg = self.cfg;
        let (qd, kd) = (cfg.q_dim(), cfg.kv_dim());
        let (mut k, mut v) = (vec![], vec![]);
        for row in rows.chunks(qd + 2 * kd) {
            for (dst, part) in [(&mut k, &row[qd..qd + kd]), (&mut v, &row[qd + kd..])] {
                for head in part.chunks(cfg.head_dim) {
                    dst.extend(match round {
                        true => round_trip(self.format, head),
                        false => head.to_vec(),
                    });
                }
            }
        }
        (k, v)
    }

    /// The reference's attention of `q` (the last rows' queries) over `rows`' keys
    /// and values.
    fn reference(&self, q: &[f32], rows: &[f32], round: bool) -> Vec<f32> {
        let (k, v) = self.keys_values(rows, round);
        let s = AttnShape::of(self.cfg, self.window);
        reference::attention(q, &k, &v, self.kv_len, s)
    }
}

/// Writes the case's `kv_len` tokens of K/V, then runs attention for the last `t`
/// (decode when t = 1, else prefill): (gpu, the reference on the round-tripped cache,
/// the reference in f32).
pub async fn decode_or_prefill(c: &Ctx, a: Case<'_>, t: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let cfg = a.cfg;
    let (qd, stride) = (cfg.q_dim(), cfg.q_dim() + 2 * cfg.kv_dim());
    let qkv = values(a.kv_len * stride, (a.kv_len * 7 + t) as u64);
    let cache = a.cache(c);
    let prefix = a.kv_len - t;
    a.write_prefix(c, &cache, &qkv, prefix);
    a.write(c, &cache, &qkv, (prefix, t));
    let (q_rows, out) = (c.buf(&qkv[prefix * stride..]), c.zeros(t * qd));
    let part = c.zeros(cfg.n_heads * a.kv_len.div_ceil(64) * (cfg.head_dim + 2));
    let step = c.step(t, prefix);
    c.run(&step, |p| {
        let io = CacheIo::new(cfg, a.format, &q_rows, &cache);
        match t {
            1 => attention::decode(p, &io, &part, &out, a.kv_len),
            _ => attention::prefill(p, &io, &out, t),
        }
        .expect("attention")
    });
    let got = c.read(&out, t * qd).await;
    let q: Vec<f32> = qkv[prefix * stride..]
        .chunks(stride)
        .flat_map(|r| &r[..qd])
        .copied()
        .collect();
    (
        got,
        a.reference(&q, &qkv, true),
        a.reference(&q, &qkv, false),
    )
}

/// The last of the case's tokens in one dispatch (`attention_decode_fused.wgsl`): its
/// row is raw; the kernel norms (`qk_norm`) and rotates (`rotate`: a layer without
/// RoPE, SmolLM3's NoPE layers, rotates nothing) its q and k, writes k and v into the
/// cache and attends. The CPU does the same with the reference functions; the prefix
/// is written normed and rotated by `kv_write`. (gpu, the reference on the
/// round-tripped cache).
pub async fn one_pass_decode(
    c: &Ctx,
    a: Case<'_>,
    qk_norm: bool,
    rotate: bool,
) -> (Vec<f32>, Vec<f32>) {
    let cfg = a.cfg;
    let (qd, kd, hd) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
    let stride = qd + 2 * kd;
    let raw = values(a.kv_len * stride, (a.kv_len * 13 + hd) as u64);
    let (qn, kn) = (values(hd, 5), values(hd, 6));
    let freqs = cfg.rope_freqs(None, 0);
    let rotated = if rotate { &freqs[..] } else { &[] };
    // Every row normalized and rotated, as the reference model computes them.
    let mut rows = raw.clone();
    for (pos, row) in rows.chunks_mut(stride).enumerate() {
        for (part, w) in [(0..qd, &qn), (qd..qd + kd, &kn)] {
            let mut v = row[part.clone()].to_vec();
            if qk_norm {
                v = reference::rmsnorm(&v, w, cfg.rms_eps);
            }
            let (len, style, mscale) = (v.len(), cfg.rope_style, cfg.rope_mscale);
            reference::rope(&mut v, len, hd, style, rotated, pos, mscale);
            row[part].copy_from_slice(&v);
        }
    }
    let cache = a.cache(c);
    let prefix = a.kv_len - 1;
    a.write_prefix(c, &cache, &rows, prefix);
    let table = c.buf(&elementwise::rope_table(cfg, &freqs, a.kv_len));
    let (last, norms) = (c.buf(&raw[prefix * stride..]), c.buf(&[qn, kn].concat()));
    let out = c.zeros(qd);
    let step = c.step(1, prefix);
    c.run(&step, |p| {
        let io = CacheIo::new(cfg, a.format, &last, &cache);
        let qk = qk_norm.then_some(&norms);
        attention::decode_fused(p, &io, (&table, rotate), qk, &out).expect("decode_fused")
    });
    let got = c.read(&out, qd).await;
    let q = &rows[prefix * stride..][..qd];
    (got, a.reference(q, &rows, true))
}
