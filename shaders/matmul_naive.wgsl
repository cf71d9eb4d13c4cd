// The baseline the benchmark compares against: one thread per output row walks the
// whole row (y = W·x, one token). Same weight decoding as matmul_gemv.wgsl.
#include "weights.wgsl"

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

override K: u32;
override N: u32;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = gid.x + gid.y * nwg.x * 64u;
    if row >= N {
        return;
    }
    let nb = K / 32u;
    var acc = 0.0;
    for (var b = 0u; b < nb; b++) {
        for (var p = 0u; p < 4u; p++) {
            let w = weight8(row, nb, b, p);
            acc += dot(w.a, x[b * 8u + p * 2u]) + dot(w.b, x[b * 8u + p * 2u + 1u]);
        }
    }
    y[row] = acc;
}
