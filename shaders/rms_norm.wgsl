// RMSNorm of each token's row: y = x / sqrt(mean(x²) + eps) · w.
// With LAST_ONLY, only the last token's row is normalized (into row 0): the output
// head needs no other. With ACCUMULATE, y += the normalized row (Gemma's norms of the
// attention and MLP outputs, fused with the residual add).

#include "step.wgsl"
#include "workgroup_sum.wgsl"
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

override LEN: u32;
override EPS: f32;
override LAST_ONLY: bool = false;
override ACCUMULATE: bool = false;


@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row_in = select(wid.x, step.n_tokens - 1u, LAST_ONLY);
    let xi = row_in * LEN;
    let yi = wid.x * LEN;
    var ss = 0.0;
    for (var i = lid; i < LEN; i += 256u) {
        ss += x[xi + i] * x[xi + i];
    }
    let scale = inverseSqrt(workgroup_sum(lid, ss, 256u) / f32(LEN) + EPS);
    for (var i = lid; i < LEN; i += 256u) {
        let v = x[xi + i] * scale * w[i];
        if ACCUMULATE {
            y[yi + i] += v;
        } else {
            y[yi + i] = v;
        }
    }
}
