// Included by the attention kernels: reading one layer's quantized KV cache (layout
// and formats as written by kv_write.wgsl), dequantized value by value. Position p
// lives in slot p % SLOTS (a ring for sliding-window layers).

override KV_FORMAT: u32 = 2u;
override HD: u32;
override NKV: u32;
override SLOTS: u32;

@group(0) @binding(1) var<storage, read> k_cache: array<u32>;
@group(0) @binding(2) var<storage, read> v_cache: array<u32>;
@group(0) @binding(3) var<storage, read> k_scales: array<f32>;
@group(0) @binding(4) var<storage, read> v_scales: array<f32>;

// Word holding element e.
fn kv_word(e: u32) -> u32 {
    switch KV_FORMAT {
        case 0u: { return e; }
        case 1u: { return e / 2u; }
        case 2u: { return e / 4u; }
        default: { return e / 8u; }
    }
}

// Index of element e's scale (int8: per token and head; int4: per 32).
fn kv_scale_index(e: u32) -> u32 {
    return select(e / 32u, e / HD, KV_FORMAT == 2u);
}

fn kv_decode(word: u32, e: u32, scale: f32) -> f32 {
    switch KV_FORMAT {
        case 0u: { return bitcast<f32>(word); }
        case 1u: {
            let h = unpack2x16float(word);
            return select(h.x, h.y, (e & 1u) == 1u);
        }
        case 2u: { return f32(extractBits(bitcast<i32>(word), (e % 4u) * 8u, 8u)) * scale; }
        default: { return f32(i32(extractBits(word, (e % 8u) * 4u, 4u)) - 8) * scale; }
    }
}

fn k_at(pos: u32, kvh: u32, d: u32) -> f32 {
    let e = ((pos % SLOTS) * NKV + kvh) * HD + d;
    var s = 0.0;
    if KV_FORMAT >= 2u {
        s = k_scales[kv_scale_index(e)];
    }
    return kv_decode(k_cache[kv_word(e)], e, s);
}

fn v_at(pos: u32, kvh: u32, d: u32) -> f32 {
    let e = ((pos % SLOTS) * NKV + kvh) * HD + d;
    var s = 0.0;
    if KV_FORMAT >= 2u {
        s = v_scales[kv_scale_index(e)];
    }
    return kv_decode(v_cache[kv_word(e)], e, s);
}
