// New tokens' attention, all of it in one dispatch: one workgroup per KV head takes,
// token after token (one for a decode step, a few for a speculative check: each
// token's result is what a one-token step gives, bit for bit; a workgroup writes and
// reads only its own head's cache, so a token sees the ones before it), its G query
// heads and its new key and value from the token's qkv row, applies the
// QK-norm (when the model has one) and RoPE, writes the key and value into the
// quantized cache, and attends over every visible position (the last WINDOW for a
// sliding-window layer) in chunks of 64 with an online softmax — no split, no reduce
// pass. The same arithmetic as rope.wgsl + kv_write.wgsl + attention_decode.wgsl,
// for contexts where one workgroup per KV head keeps the GPU busy enough.
#include "kv_cache.wgsl"
#include "step.wgsl"
#include "workgroup_sum.wgsl"

@group(0) @binding(5) var<storage, read> qkv: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>; // [token][NH * HD]
@group(0) @binding(7) var<storage, read> table: array<vec2<f32>>; // (cos, sin) [pos][HALF]
@group(0) @binding(8) var<storage, read> qk_norm: array<f32>;    // q's HD, then k's HD

override G: u32;          // query heads per KV head, G * HD <= 2048
override NH: u32;
override QKV_STRIDE: u32;
override SCALE: f32;      // scores are q·k · SCALE
override SOFTCAP: f32;    // > 0: scores become SOFTCAP·tanh(score/SOFTCAP) (Gemma 2)
override WINDOW: u32 = 0u;
override HALF: u32;       // rotated pairs per head
override ROTATE: bool = true; // false: a layer without RoPE (SmolLM3's NoPE layers)
override STYLE: u32 = 0u; // 0: adjacent pairs; 1: half split
override QK_NORM: bool = false;
override EPS: f32 = 1e-6;

const CHUNK: u32 = 64u;
const NEG: f32 = -1e30;

var<workgroup> qs: array<f32, 2048>;    // [G][HD], normalized, rotated, scaled
var<workgroup> s: array<f32, 1024>;     // [G][CHUNK] scores, then weights
var<workgroup> stats: array<f32, 48>;   // per head: running max, sum, correction

// RMS-normalizes `len` values of `buf` (qs from `at`, or kv_vals) with weights `w0`.
fn norm_head(in_qs: bool, at: u32, w0: u32, lid: u32) {
    var ss = 0.0;
    for (var i = lid; i < HD; i += 64u) {
        let v = select(kv_vals[i], qs[at + i], in_qs);
        ss += v * v;
    }
    let scale = inverseSqrt(workgroup_sum(lid, ss, 64u) / f32(HD) + EPS);
    for (var i = lid; i < HD; i += 64u) {
        if in_qs {
            qs[at + i] = qs[at + i] * scale * qk_norm[w0 + i];
        } else {
            kv_vals[i] = kv_vals[i] * scale * qk_norm[w0 + i];
        }
    }
    workgroupBarrier();
}

// The rotated value of element i of a head (`v` itself, `other` its pair partner).
fn rotated(i: u32, v: f32, other: f32, pos: u32) -> f32 {
    if !ROTATE {
        return v;
    }
    var pair = i / 2u;
    var first = (i & 1u) == 0u;
    if STYLE == 1u {
        pair = i % HALF;
        first = i < HALF;
    }
    if pair >= HALF || (STYLE == 1u && i >= 2u * HALF) {
        return v;
    }
    let cs = table[pos * HALF + pair];
    return select(other * cs.y + v * cs.x, v * cs.x - other * cs.y, first);
}

fn partner(i: u32) -> u32 {
    if STYLE == 1u {
        return select(i - HALF, i + HALF, i < HALF);
    }
    return i ^ 1u;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    for (var t = 0u; t < step.n_tokens; t++) {
        attend(wid.x, t, lid);
    }
}

// Token `t` of the step, KV head `kvh`.
fn attend(kvh: u32, t: u32, lid: u32) {
    let pos = step.pos0 + t;
    let row = t * QKV_STRIDE;
    // The queries and the new key.
    for (var i = lid; i < G * HD; i += 64u) {
        qs[i] = qkv[row + kvh * G * HD + i];
    }
    for (var i = lid; i < HD; i += 64u) {
        kv_vals[i] = qkv[row + (NH + kvh) * HD + i];
    }
    workgroupBarrier();
    if QK_NORM {
        for (var g = 0u; g < G; g++) {
            norm_head(true, g * HD, 0u, lid);
        }
        norm_head(false, 0u, HD, lid);
    }
    // RoPE, in two steps so no value is overwritten before its partner reads it.
    var rq: array<f32, 64>; // (HD / 64) × G values of this thread, G * HD <= 4096
    for (var g = 0u; g < G; g++) {
        for (var k = 0u; k * 64u + lid < HD; k++) {
            let i = k * 64u + lid;
            rq[k * G + g] = rotated(i, qs[g * HD + i], qs[g * HD + partner(i)], pos);
        }
    }
    var rk: array<f32, 4>;
    for (var k = 0u; k * 64u + lid < HD; k++) {
        let i = k * 64u + lid;
        rk[k] = rotated(i, kv_vals[i], kv_vals[partner(i)], pos);
    }
    workgroupBarrier();
    for (var g = 0u; g < G; g++) {
        for (var k = 0u; k * 64u + lid < HD; k++) {
            qs[g * HD + k * 64u + lid] = rq[k * G + g] * SCALE;
        }
    }
    for (var k = 0u; k * 64u + lid < HD; k++) {
        kv_vals[k * 64u + lid] = rk[k];
    }
    workgroupBarrier();
    // The new key and value into the cache, as kv_write.wgsl writes them.
    store_head(false, pos, kvh, lid);
    for (var i = lid; i < HD; i += 64u) {
        kv_vals[i] = qkv[row + (NH + NKV + kvh) * HD + i];
    }
    workgroupBarrier();
    store_head(true, pos, kvh, lid);
    storageBarrier();
    workgroupBarrier();

    // Attention over the visible positions, 64 at a time.
    let kv_len = pos + 1u;
    var lo = 0u;
    if WINDOW > 0u && kv_len > WINDOW {
        lo = kv_len - WINDOW;
    }
    if lid < G {
        stats[3u * lid] = NEG;
        stats[3u * lid + 1u] = 0.0;
    }
    var o: array<f32, 64>; // [k][g]: this thread's d = k * 64 + lid of each head
    for (var i = 0u; i < 64u; i++) {
        o[i] = 0.0;
    }
    // Declared once and reset by hand: not every compiler re-zeroes a `var` declared
    // in a loop body (Chromium's did not).
    var acc: array<f32, 16>;
    for (var start = lo; start < kv_len; start += CHUNK) {
        let p = start + lid;
        for (var g = 0u; g < G; g++) {
            acc[g] = 0.0;
        }
        if p < kv_len {
            for (var d = 0u; d < HD; d++) {
                let kd = k_at(p, kvh, d);
                for (var g = 0u; g < G; g++) {
                    acc[g] += qs[g * HD + d] * kd;
                }
            }
        }
        for (var g = 0u; g < G; g++) {
            s[g * CHUNK + lid] = select(NEG, capped(acc[g]), p < kv_len);
        }
        workgroupBarrier();
        if lid < G {
            let m_old = stats[3u * lid];
            var m = m_old;
            for (var j = 0u; j < CHUNK; j++) {
                m = max(m, s[lid * CHUNK + j]);
            }
            var l = 0.0;
            for (var j = 0u; j < CHUNK; j++) {
                let e = select(0.0, exp(s[lid * CHUNK + j] - m), s[lid * CHUNK + j] > NEG);
                s[lid * CHUNK + j] = e;
                l += e;
            }
            let corr = exp(m_old - m);
            stats[3u * lid] = m;
            stats[3u * lid + 1u] = stats[3u * lid + 1u] * corr + l;
            stats[3u * lid + 2u] = corr;
        }
        workgroupBarrier();
        let n = min(CHUNK, kv_len - start);
        for (var k = 0u; k * 64u + lid < HD; k++) {
            let d = k * 64u + lid;
            for (var g = 0u; g < G; g++) {
                o[k * G + g] *= stats[3u * g + 2u];
            }
            for (var j = 0u; j < n; j++) {
                let v = v_at(start + j, kvh, d);
                for (var g = 0u; g < G; g++) {
                    o[k * G + g] += s[g * CHUNK + j] * v;
                }
            }
        }
        workgroupBarrier();
    }
    for (var k = 0u; k * 64u + lid < HD; k++) {
        for (var g = 0u; g < G; g++) {
            out[t * NH * HD + (kvh * G + g) * HD + k * 64u + lid] = o[k * G + g] / stats[3u * g + 1u];
        }
    }
    workgroupBarrier();
}

// A score as softmax reads it: soft-capped where the model caps them (Gemma 2). The
// clamp keeps tanh finite where a compiler computes it from exponentials.
fn capped(score: f32) -> f32 {
    if SOFTCAP > 0.0 {
        return SOFTCAP * tanh(clamp(score / SOFTCAP, -10.0, 10.0));
    }
    return score;
}
