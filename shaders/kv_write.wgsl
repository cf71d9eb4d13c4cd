// Writes the new tokens' keys and values (from the fused qkv rows, after RoPE) into
// one layer's KV cache, quantizing on the way (`store_head` of kv_cache.wgsl): one
// workgroup per (token, KV head, K or V).

#include "kv_cache.wgsl"
#include "step.wgsl"
@group(0) @binding(5) var<storage, read> qkv: array<f32>;

override NH: u32;
override QKV_STRIDE: u32;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wid.x;
    let kvh = wid.y;
    let is_v = wid.z == 1u;
    let src = t * QKV_STRIDE + (NH + select(0u, NKV, is_v) + kvh) * HD;
    for (var i = lid; i < HD; i += 64u) {
        kv_vals[i] = qkv[src + i];
    }
    workgroupBarrier();
    store_head(is_v, step.pos0 + t, kvh, lid);
}
