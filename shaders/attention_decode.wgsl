// Flash-decoding for one new token: the visible keys (all of them, or the last WINDOW
// for a sliding-window layer) are split in chunks of 64 positions, one workgroup per
// (KV head, chunk). Each K and V value is dequantized once and used for all G query
// heads that share the KV head; each chunk leaves its running max, sum and weighted V
// (online softmax) for attention_reduce.wgsl to combine. Splits past the visible keys
// leave an empty partial (max -1e30), which the reduce weighs by zero.
#include "kv_cache.wgsl"
#include "step.wgsl"

@group(0) @binding(5) var<storage, read> qkv: array<f32>;
@group(0) @binding(6) var<storage, read_write> part: array<f32>; // [NH][n_splits][HD + 2]

override G: u32;          // query heads per KV head, G * HD <= 2048 and G <= 16
override QKV_STRIDE: u32;
override SCALE: f32;      // scores are q·k · SCALE
override SOFTCAP: f32;    // > 0: scores become SOFTCAP·tanh(score/SOFTCAP) (Gemma 2)
override WINDOW: u32 = 0u; // keys visible behind the query, itself included (0: all)

const CHUNK: u32 = 64u;
const NEG: f32 = -1e30;

var<workgroup> qs: array<f32, 2048>;
var<workgroup> s: array<f32, 1024>; // [G][CHUNK]
var<workgroup> stats: array<f32, 32>; // (max, sum) per head

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let kvh = wid.x;
    let split = wid.y;
    let q_base = (step.n_tokens - 1u) * QKV_STRIDE + kvh * G * HD;
    for (var i = lid; i < G * HD; i += 64u) {
        qs[i] = qkv[q_base + i] * SCALE;
    }
    workgroupBarrier();
    var lo = 0u;
    if WINDOW > 0u && step.kv_len > WINDOW {
        lo = step.kv_len - WINDOW;
    }
    let start = lo + split * CHUNK;
    let p = start + lid;
    var acc: array<f32, 16>;
    if p < step.kv_len {
        for (var d = 0u; d < HD; d++) {
            let k = k_at(p, kvh, d);
            for (var g = 0u; g < G; g++) {
                acc[g] += qs[g * HD + d] * k;
            }
        }
    }
    for (var g = 0u; g < G; g++) {
        s[g * CHUNK + lid] = select(NEG, capped(acc[g]), p < step.kv_len);
    }
    workgroupBarrier();
    if lid < G {
        var m = NEG;
        for (var j = 0u; j < CHUNK; j++) {
            m = max(m, s[lid * CHUNK + j]);
        }
        var l = 0.0;
        for (var j = 0u; j < CHUNK; j++) {
            let e = exp(s[lid * CHUNK + j] - m);
            s[lid * CHUNK + j] = e;
            l += e;
        }
        stats[2u * lid] = m;
        stats[2u * lid + 1u] = l;
    }
    workgroupBarrier();
    var n = 0u;
    if start < step.kv_len {
        n = min(CHUNK, step.kv_len - start);
    }
    // Reset by hand for each d: a `var` declared in the loop body should start at zero
    // every iteration, but not every compiler does it (Chromium's SwiftShader path
    // kept the previous d's sums with heads of 256).
    var o: array<f32, 16>;
    for (var d = lid; d < HD; d += 64u) {
        for (var g = 0u; g < G; g++) {
            o[g] = 0.0;
        }
        for (var j = 0u; j < n; j++) {
            let v = v_at(start + j, kvh, d);
            for (var g = 0u; g < G; g++) {
                o[g] += s[g * CHUNK + j] * v;
            }
        }
        for (var g = 0u; g < G; g++) {
            let h = kvh * G + g;
            part[(h * step.n_splits + split) * (HD + 2u) + 2u + d] = o[g];
        }
    }
    if lid < G {
        let h = kvh * G + lid;
        let at = (h * step.n_splits + split) * (HD + 2u);
        part[at] = stats[2u * lid];
        part[at + 1u] = stats[2u * lid + 1u];
    }
}

// A score as softmax reads it: soft-capped where the model caps them (Gemma 2). The
// clamp keeps tanh finite where a compiler computes it from exponentials.
fn capped(score: f32) -> f32 {
    if SOFTCAP > 0.0 {
        return SOFTCAP * tanh(clamp(score / SOFTCAP, -10.0, 10.0));
    }
    return score;
}
