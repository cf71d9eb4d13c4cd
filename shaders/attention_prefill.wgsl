// Causal attention for a chunk of new tokens over the cached prefix and themselves,
// tiled: a workgroup takes BQ queries of one head, walks the keys BK at a time through
// workgroup memory and keeps an online softmax (FlashAttention); K/V are dequantized
// from the quantized cache as tiles are loaded. A sliding-window layer starts at the
// first key its first query sees and masks keys WINDOW or more behind each query.
#include "kv_cache.wgsl"
#include "step.wgsl"

@group(0) @binding(5) var<storage, read> qkv: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>; // [n_tokens][NH * HD]

override G: u32;          // query heads per KV head
override NH: u32;
override QKV_STRIDE: u32;
override SCALE: f32;
override SOFTCAP: f32;    // > 0: scores become SOFTCAP·tanh(score/SOFTCAP) (Gemma 2)
override WINDOW: u32 = 0u;
// Tiles sized so BQ·HD ≤ 1024 and BK·HD ≤ 2048 (HD ≤ 256); the launcher uses BQ too.
override BQ: u32 = select(8u, 4u, HD > 128u);   // queries per workgroup
override BK: u32 = select(16u, 8u, HD > 128u);  // keys per tile

const NEG: f32 = -1e30;

var<workgroup> qs: array<f32, 1024>;  // [BQ][HD]
var<workgroup> kv: array<f32, 2048>;  // [BK][HD]
var<workgroup> s: array<f32, 128>;    // [BQ][BK]

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let q0 = wid.x * BQ;
    let h = wid.y;
    let kvh = h / G;
    let tpq = 128u / BQ;       // threads per query
    let qi = lid / tpq;        // this thread's query row
    let c = lid % tpq;         // its key in a tile (c < BK), and its slice of the head
    let dpt = HD / tpq;        // output values per thread: DPT from c * dpt
    for (var i = lid; i < BQ * HD; i += 128u) {
        let t = q0 + i / HD;
        var v = 0.0;
        if t < step.n_tokens {
            v = qkv[t * QKV_STRIDE + h * HD + i % HD] * SCALE;
        }
        qs[i] = v;
    }
    let last_q = min(q0 + BQ, step.n_tokens) - 1u;
    let n_keys = step.pos0 + last_q + 1u;
    let q_pos = step.pos0 + q0 + qi;
    let q_ok = q0 + qi < step.n_tokens;
    var first = 0u;
    if WINDOW > 0u && step.pos0 + q0 + 1u > WINDOW {
        first = step.pos0 + q0 + 1u - WINDOW;
    }
    var m = NEG;
    var l = 0.0;
    var o: array<f32, 8>;
    var pj: array<f32, 16>;
    for (var k0 = first; k0 < n_keys; k0 += BK) {
        workgroupBarrier();
        load_tile(k0, n_keys, kvh, lid, false);
        workgroupBarrier();
        // One score per thread: query qi, key c.
        if c < BK {
            let p = k0 + c;
            var sc = NEG;
            if q_ok && p <= q_pos && (WINDOW == 0u || p + WINDOW > q_pos) {
                sc = 0.0;
                for (var d = 0u; d < HD; d++) {
                    sc += qs[qi * HD + d] * kv[c * HD + d];
                }
                sc = capped(sc);
            }
            s[qi * BK + c] = sc;
        }
        workgroupBarrier();
        var mx = m;
        for (var j = 0u; j < BK; j++) {
            mx = max(mx, s[qi * BK + j]);
        }
        let corr = exp(m - mx);
        l *= corr;
        for (var j = 0u; j < BK; j++) {
            pj[j] = select(0.0, exp(s[qi * BK + j] - mx), s[qi * BK + j] > NEG);
            l += pj[j];
        }
        for (var k = 0u; k < dpt; k++) {
            o[k] *= corr;
        }
        m = mx;
        workgroupBarrier();
        load_tile(k0, n_keys, kvh, lid, true);
        workgroupBarrier();
        for (var j = 0u; j < BK; j++) {
            for (var k = 0u; k < dpt; k++) {
                o[k] += pj[j] * kv[j * HD + c * dpt + k];
            }
        }
    }
    if q_ok {
        let base = (q0 + qi) * NH * HD + h * HD + c * dpt;
        for (var k = 0u; k < dpt; k++) {
            out[base + k] = o[k] / l;
        }
    }
}

// The keys (or values) of positions k0..k0 + BK of KV head `kvh` into the tile `kv`,
// zeros past the last key.
fn load_tile(k0: u32, n_keys: u32, kvh: u32, lid: u32, values: bool) {
    for (var i = lid; i < BK * HD; i += 128u) {
        let p = k0 + i / HD;
        var v = 0.0;
        if p < n_keys {
            if values {
                v = v_at(p, kvh, i % HD);
            } else {
                v = k_at(p, kvh, i % HD);
            }
        }
        kv[i] = v;
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
