// Y = X·Wᵀ for a chunk of tokens on software adapters (lavapipe, SwiftShader), which
// run a workgroup's threads as CPU SIMD lanes: there barriers and workgroup memory
// cost more than they save, so each thread takes one row and up to 8 tokens, and
// dequantizes each weight once for all of them. f32 accumulation.
#include "weights.wgsl"
#include "step.wgsl"
#include "matmul_out.wgsl"

@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(5) var<uniform> part: Part; // which rows of the matrix this dispatch holds

override K: u32;
override X_STRIDE: u32;  // floats between tokens in x, a multiple of 4

const TT: u32 = 8u;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(workgroup_id) wid: vec3<u32>) {
    let row = gid.x + gid.y * nwg.x * 64u;
    let tok0 = wid.z * TT;
    if row >= part.rows || tok0 >= step.n_tokens {
        return;
    }
    let nt = min(TT, step.n_tokens - tok0);
    let nb = K / 32u;
    var acc: array<f32, 8>;
    for (var b = 0u; b < nb; b++) {
        for (var p = 0u; p < 4u; p++) {
            let w = weight8(row, nb, b, p);
            for (var t = 0u; t < nt; t++) {
                let xo = ((tok0 + t) * X_STRIDE) / 4u + b * 8u + p * 2u;
                acc[t] += dot(w.a, x[xo]) + dot(w.b, x[xo + 1u]);
            }
        }
    }
    for (var t = 0u; t < nt; t++) {
        let o = (tok0 + t) * Y_STRIDE + Y_OFFSET + part.row0 + row;
        store(o, acc[t]);
    }
}
