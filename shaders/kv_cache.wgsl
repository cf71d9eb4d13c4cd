// Included by the kernels that read or write one layer's quantized KV cache: its
// layout and formats, read value by value (`k_at`, `v_at`) and written a head at a time
// (`store_head`). Position p lives in slot p % SLOTS (a ring for sliding-window
// layers). KV_FORMAT, one of the KV_* ids of `KvFormat` (src/quant/kv.rs, written as
// WGSL constants by build.rs): f32; f16, two per word; int8, four per word, one f32
// scale per (position, KV head); int4, eight per word, one f32 scale per 32.

#include "formats.wgsl"

override KV_FORMAT: u32 = KV_INT8;
override HD: u32;          // a multiple of 32, at most 256
override NKV: u32;
override SLOTS: u32;

@group(0) @binding(1) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(2) var<storage, read_write> v_cache: array<u32>;
@group(0) @binding(3) var<storage, read_write> k_scales: array<f32>;
@group(0) @binding(4) var<storage, read_write> v_scales: array<f32>;

// Word holding element e.
fn kv_word(e: u32) -> u32 {
    switch KV_FORMAT {
        case KV_F32: { return e; }
        case KV_F16: { return e / 2u; }
        case KV_INT8: { return e / 4u; }
        default: { return e / 8u; }
    }
}

// Index of element e's scale (int8: per token and head; int4: per 32).
fn kv_scale_index(e: u32) -> u32 {
    return select(e / 32u, e / HD, KV_FORMAT == KV_INT8);
}

fn kv_decode(word: u32, e: u32, scale: f32) -> f32 {
    switch KV_FORMAT {
        case KV_F32: { return bitcast<f32>(word); }
        case KV_F16: {
            let h = unpack2x16float(word);
            return select(h.x, h.y, (e & 1u) == 1u);
        }
        case KV_INT8: { return f32(extractBits(bitcast<i32>(word), (e % 4u) * 8u, 8u)) * scale; }
        default: { return f32(i32(extractBits(word, (e % 8u) * 4u, 4u)) - 8) * scale; }
    }
}

// Value d of KV head kvh at position pos: of V where `is_v`, else of K.
fn kv_at(is_v: bool, pos: u32, kvh: u32, d: u32) -> f32 {
    let e = ((pos % SLOTS) * NKV + kvh) * HD + d;
    var s = 0.0;
    let w = kv_word(e);
    if is_v {
        if KV_FORMAT >= KV_INT8 {
            s = v_scales[kv_scale_index(e)];
        }
        return kv_decode(v_cache[w], e, s);
    }
    if KV_FORMAT >= KV_INT8 {
        s = k_scales[kv_scale_index(e)];
    }
    return kv_decode(k_cache[w], e, s);
}

fn k_at(pos: u32, kvh: u32, d: u32) -> f32 {
    return kv_at(false, pos, kvh, d);
}

fn v_at(pos: u32, kvh: u32, d: u32) -> f32 {
    return kv_at(true, pos, kvh, d);
}

// The head being written: HD values, set by the caller before `store_head`.
var<workgroup> kv_vals: array<f32, 256>;
var<workgroup> kv_amax: array<f32, 64>;
var<workgroup> kv_gscale: array<f32, 8>;

fn store_word(is_v: bool, word: u32, value: u32) {
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

// Quantizes kv_vals into position `pos`'s slot of KV head `kvh` (K or V). Called by all
// 64 threads of the workgroup (it has barriers).
fn store_head(is_v: bool, pos: u32, kvh: u32, lid: u32) {
    let slot = pos % SLOTS;
    let e0 = (slot * NKV + kvh) * HD; // first element in the cache
    var m = 0.0;
    for (var i = lid; i < HD; i += 64u) {
        m = max(m, abs(kv_vals[i]));
    }
    kv_amax[lid] = m;
    workgroupBarrier();
    switch KV_FORMAT {
        case KV_F32: {
            for (var i = lid; i < HD; i += 64u) {
                store_word(is_v, e0 + i, bitcast<u32>(kv_vals[i]));
            }
        }
        case KV_F16: {
            for (var i = lid; i < HD / 2u; i += 64u) {
                store_word(is_v, e0 / 2u + i, pack2x16float(vec2<f32>(kv_vals[2u * i], kv_vals[2u * i + 1u])));
            }
        }
        case KV_INT8: {
            if lid == 0u {
                var mx = 0.0;
                for (var j = 0u; j < 64u; j++) {
                    mx = max(mx, kv_amax[j]);
                }
                kv_gscale[0] = mx / 127.0;
                store_scale(is_v, slot * NKV + kvh, mx / 127.0);
            }
            workgroupBarrier();
            let s = kv_gscale[0];
            let inv = select(0.0, 1.0 / s, s > 0.0);
            for (var i = lid; i < HD / 4u; i += 64u) {
                let q = vec4<i32>(round(vec4<f32>(kv_vals[4u * i], kv_vals[4u * i + 1u], kv_vals[4u * i + 2u], kv_vals[4u * i + 3u]) * inv));
                let packed = (u32(q.x) & 255u) | ((u32(q.y) & 255u) << 8u) | ((u32(q.z) & 255u) << 16u) | ((u32(q.w) & 255u) << 24u);
                store_word(is_v, e0 / 4u + i, packed);
            }
        }
        default: {
            // int4: symmetric, q in -7..7 stored as q + 8.
            if lid < HD / 32u {
                var mx = 0.0;
                for (var j = 0u; j < 32u; j++) {
                    mx = max(mx, abs(kv_vals[lid * 32u + j]));
                }
                kv_gscale[lid] = mx / 7.0;
                store_scale(is_v, e0 / 32u + lid, mx / 7.0);
            }
            workgroupBarrier();
            for (var i = lid; i < HD / 8u; i += 64u) {
                let s = kv_gscale[i / 4u];
                let inv = select(0.0, 1.0 / s, s > 0.0);
                var packed = 0u;
                for (var j = 0u; j < 8u; j++) {
                    let q = clamp(i32(round(kv_vals[8u * i + j] * inv)), -7, 7) + 8;
                    packed |= u32(q) << (4u * j);
                }
                store_word(is_v, e0 / 8u + i, packed);
            }
        }
    }
    workgroupBarrier();
}
