// The gated MLP's middle: a = act(gate) · up, from the fused [gate | up] rows of each
// token. ACT: an ACT_* id of `Activation` (SiLU for SwiGLU, GELU-tanh for GeGLU).

#include "step.wgsl"
#include "activation.wgsl"
@group(0) @binding(1) var<storage, read> gu: array<f32>;       // [n_tokens][2F]
@group(0) @binding(2) var<storage, read_write> a: array<f32>;  // [n_tokens][F]

override F: u32;
override ACT: u32 = ACT_SILU;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let at = token_column(gid, nwg, F);
    if at.x >= step.n_tokens { return; }
    let gate_up = at.x * 2u * F + at.y;
    a[at.x * F + at.y] = activation(ACT, gu[gate_up]) * gu[gate_up + F];
}
