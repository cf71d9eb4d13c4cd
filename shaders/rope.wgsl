// Rotary position embedding of every query and key head of each token, in place in the
// fused qkv rows; with QK_NORM the head is first RMS-normalized (Qwen3, AFM), which
// is fused here because both passes touch exactly the same values.
// STYLE 0 rotates adjacent pairs (2i, 2i+1): GGUF llama files are permuted for it;
// STYLE 1 rotates (i, i + ROPE_DIM/2) (NeoX / Qwen).

#include "step.wgsl"
#include "workgroup_sum.wgsl"
@group(0) @binding(1) var<storage, read> table: array<vec2<f32>>; // (cos, sin) [pos][HALF]
@group(0) @binding(2) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(3) var<storage, read> qk_norm: array<f32>; // q's HD weights, then k's

override HD: u32;         // head dimension, at most 256
override NH: u32;         // query heads
override QKV_STRIDE: u32; // floats per token in qkv
override HALF: u32;       // rotated pairs per head (rope_dim / 2)
override ROTATE: bool = true; // false: a layer without RoPE (SmolLM3's NoPE layers)
override STYLE: u32 = 0u;
override QK_NORM: bool = false;
override EPS: f32 = 1e-6;

var<workgroup> head: array<f32, 256>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wid.x;
    let h = wid.y; // 0..NH are queries, then the KV heads
    let base = t * QKV_STRIDE + h * HD;
    var ss = 0.0;
    for (var i = lid; i < HD; i += 64u) {
        let v = qkv[base + i];
        head[i] = v;
        ss += v * v;
    }
    workgroupBarrier();
    if QK_NORM {
        let scale = inverseSqrt(workgroup_sum(lid, ss, 64u) / f32(HD) + EPS);
        for (var i = lid; i < HD; i += 64u) {
            let w = qk_norm[select(HD + i, i, h < NH)];
            head[i] = head[i] * scale * w;
        }
        workgroupBarrier();
    }
    let pos = step.pos0 + t;
    for (var i = lid; i < HD; i += 64u) {
        // The pair this value belongs to, and its partner.
        var pair = i / 2u;
        var partner = i ^ 1u;
        var first = (i & 1u) == 0u;
        if STYLE == 1u {
            pair = i % HALF;
            partner = select(i - HALF, i + HALF, i < HALF);
            first = i < HALF;
        }
        var v = head[i];
        if ROTATE && pair < HALF && (STYLE == 0u || i < 2u * HALF) {
            let cs = table[pos * HALF + pair];
            let other = head[partner];
            v = select(other * cs.y + v * cs.x, v * cs.x - other * cs.y, first);
        }
        qkv[base + i] = v;
    }
}
