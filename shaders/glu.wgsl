// The gated MLP's middle: a = act(gate) · up, from the fused [gate | up] rows of each
// token. ACT 0: SiLU (SwiGLU: Llama, Qwen); 1: GELU, tanh approximation (GeGLU: Gemma).

#include "step.wgsl"
@group(0) @binding(1) var<storage, read> gu: array<f32>;       // [n_tokens][2F]
@group(0) @binding(2) var<storage, read_write> a: array<f32>;  // [n_tokens][F]

override F: u32;
override ACT: u32 = 0u;

fn act(g: f32) -> f32 {
    if ACT == 1u {
        // tanh overflows to NaN in some implementations for large |x|: clamp its input.
        let u = clamp(0.7978846 * g * (1.0 + 0.044715 * g * g), -15.0, 15.0);
        return 0.5 * g * (1.0 + tanh(u));
    }
    return g / (1.0 + exp(-g));
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let at = token_column(gid, nwg, F);
    if at.x >= step.n_tokens { return; }
    let gate_up = at.x * 2u * F + at.y;
    a[at.x * F + at.y] = act(gu[gate_up]) * gu[gate_up + F];
}
