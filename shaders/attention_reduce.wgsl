// Combines the per-chunk partial results of attention_decode.wgsl into each query
// head's output: rescale each chunk by exp(max_chunk - max_all), sum, normalize.

#include "step.wgsl"
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>; // [n_tokens][NH * HD]

override HD: u32;
override NH: u32;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let row = h * step.n_splits * (HD + 2u);
    var m = -1e30;
    for (var sp = 0u; sp < step.n_splits; sp++) {
        m = max(m, part[row + sp * (HD + 2u)]);
    }
    var l = 0.0;
    for (var sp = 0u; sp < step.n_splits; sp++) {
        let at = row + sp * (HD + 2u);
        l += part[at + 1u] * exp(part[at] - m);
    }
    let o_base = (step.n_tokens - 1u) * NH * HD + h * HD;
    for (var d = lid; d < HD; d += 64u) {
        var o = 0.0;
        for (var sp = 0u; sp < step.n_splits; sp++) {
            let at = row + sp * (HD + 2u);
            o += part[at + 2u + d] * exp(part[at] - m);
        }
        out[o_base + d] = o / l;
    }
}
