// SwiGLU: a = silu(gate) · up, from the fused [gate | up] rows of each token.

#include "step.wgsl"
@group(0) @binding(1) var<storage, read> gu: array<f32>;       // [n_tokens][2F]
@group(0) @binding(2) var<storage, read_write> a: array<f32>;  // [n_tokens][F]

override F: u32;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if i >= step.n_tokens * F {
        return;
    }
    let t = i / F;
    let j = i % F;
    let g = gu[t * 2u * F + j];
    a[i] = g / (1.0 + exp(-g)) * gu[t * 2u * F + F + j];
}
