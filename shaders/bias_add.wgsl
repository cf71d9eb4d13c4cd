// Adds a bias, scaled, to every token's row: y[t * STRIDE + i] += SCALE * bias[i] for
// i < WIDTH (Qwen2's Q, K and V biases onto the fused qkv rows before RoPE; an output
// projection's onto the residual stream, scaled as the block's output is).

#include "step.wgsl"
@group(0) @binding(1) var<storage, read> bias: array<f32>;     // [WIDTH]
@group(0) @binding(2) var<storage, read_write> y: array<f32>;  // [n_tokens][STRIDE]

override WIDTH: u32;
override STRIDE: u32;
override SCALE: f32 = 1.0;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let at = token_column(gid, nwg, WIDTH);
    if at.x >= step.n_tokens { return; }
    y[at.x * STRIDE + at.y] += SCALE * bias[at.y];
}
