// Writes the new tokens' keys and values (from the fused qkv rows, after RoPE) into
// one layer's KV cache, quantizing on the way. Position p goes to slot p % SLOTS: a
// sliding-window layer keeps a ring of its window (plus a chunk), others every position.
// KV_FORMAT 0: f32; 1: f16, two per word; 2: int8, four per word, one f32 scale per
// (token, KV head); 3: int4, eight per word, one f32 scale per group of 32.

#include "step.wgsl"
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(3) var<storage, read_write> v_cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> k_scales: array<f32>;
@group(0) @binding(5) var<storage, read_write> v_scales: array<f32>;

override KV_FORMAT: u32 = 2u;
override HD: u32;          // a multiple of 32, at most 256
override NH: u32;
override NKV: u32;
override QKV_STRIDE: u32;
override SLOTS: u32;       // positions the cache holds

var<workgroup> vals: array<f32, 256>;
var<workgroup> amax: array<f32, 64>;
var<workgroup> gscale: array<f32, 8>;

fn store(is_v: bool, word: u32, value: u32) {
    if is_v {
        v_cache[word] = value;
    } else {
        k_cache[word] = value;
    }
}

fn store_scale(is_v: bool, i: u32, s: f32) {
    if is_v {
        v_scales[i] = s;
    } else {
        k_scales[i] = s;
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wid.x;
    let kvh = wid.y;
    let is_v = wid.z == 1u;
    let src = t * QKV_STRIDE + (NH + select(0u, NKV, is_v) + kvh) * HD;
    let slot = (step.pos0 + t) % SLOTS;
    let e0 = (slot * NKV + kvh) * HD; // first element in the cache
    var m = 0.0;
    for (var i = lid; i < HD; i += 64u) {
        vals[i] = qkv[src + i];
        m = max(m, abs(vals[i]));
    }
    amax[lid] = m;
    workgroupBarrier();
    switch KV_FORMAT {
        case 0u: {
            for (var i = lid; i < HD; i += 64u) {
                store(is_v, e0 + i, bitcast<u32>(vals[i]));
            }
        }
        case 1u: {
            for (var i = lid; i < HD / 2u; i += 64u) {
                store(is_v, e0 / 2u + i, pack2x16float(vec2<f32>(vals[2u * i], vals[2u * i + 1u])));
            }
        }
        case 2u: {
            if lid == 0u {
                var mx = 0.0;
                for (var j = 0u; j < 64u; j++) {
                    mx = max(mx, amax[j]);
                }
                gscale[0] = mx / 127.0;
                store_scale(is_v, slot * NKV + kvh, mx / 127.0);
            }
            workgroupBarrier();
            let s = gscale[0];
            let inv = select(0.0, 1.0 / s, s > 0.0);
            for (var i = lid; i < HD / 4u; i += 64u) {
                let q = vec4<i32>(round(vec4<f32>(vals[4u * i], vals[4u * i + 1u], vals[4u * i + 2u], vals[4u * i + 3u]) * inv));
                let packed = (u32(q.x) & 255u) | ((u32(q.y) & 255u) << 8u) | ((u32(q.z) & 255u) << 16u) | ((u32(q.w) & 255u) << 24u);
                store(is_v, e0 / 4u + i, packed);
            }
        }
        default: {
            // int4: symmetric, q in -7..7 stored as q + 8.
            if lid < HD / 32u {
                var mx = 0.0;
                for (var j = 0u; j < 32u; j++) {
                    mx = max(mx, abs(vals[lid * 32u + j]));
                }
                gscale[lid] = mx / 7.0;
                store_scale(is_v, e0 / 32u + lid, mx / 7.0);
            }
            workgroupBarrier();
            for (var i = lid; i < HD / 8u; i += 64u) {
                let s = gscale[i / 4u];
                let inv = select(0.0, 1.0 / s, s > 0.0);
                var packed = 0u;
                for (var j = 0u; j < 8u; j++) {
                    let q = clamp(i32(round(vals[8u * i + j] * inv)), -7, 7) + 8;
                    packed |= u32(q) << (4u * j);
                }
                store(is_v, e0 / 8u + i, packed);
            }
        }
    }
}
