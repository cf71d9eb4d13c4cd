// y = W·x for TOKENS tokens, where the adapter has subgroups of a fixed size: one
// subgroup per row, its lanes split the row's blocks and subgroupAdd sums them; no
// workgroup memory and no barriers. Same weight decoding and results as
// matmul_gemv.wgsl; each token's sum as a one-token dispatch makes it.
#include "weights.wgsl"
#include "step.wgsl"

@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> part: Part; // which rows of the matrix this dispatch holds

override K: u32;
override Y_OFFSET: u32 = 0u;
override ACCUMULATE: bool = false;
override SCALE: f32 = 1.0;   // y (+)= SCALE · W·x (Granite's residual and logit multipliers)
override CAP: f32 = 0.0;     // > 0: y = CAP·tanh(y/CAP) (Gemma 2's final logit soft-cap)
override SG: u32 = 32u;   // the adapter's (fixed) subgroup size
override WG: u32 = 256u;  // a multiple of SG
override TOKENS: u32 = 1u;  // 1, or MAX_TOKENS: then the step's n_tokens (at most it) run
override X_STRIDE: u32 = 0u; // floats between tokens' rows of x (several tokens)
override Y_STRIDE: u32 = 0u; // and of y

const MAX_TOKENS: u32 = 8u;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    // Subgroups are consecutive invocations of the workgroup: lid / SG is this one's.
    let row = (wid.x + wid.y * nwg.x) * (WG / SG) + lid / SG;
    // Tokens this dispatch runs: one (a constant, so the loops fold away), or the step's.
    let n_run = select(min(TOKENS, step.n_tokens), 1u, TOKENS == 1u);
    let nb = K / 32u;
    var acc: array<f32, MAX_TOKENS>;
    for (var t = 0u; t < TOKENS; t++) {
        acc[t] = 0.0;
    }
    if row < part.rows {
        for (var b = lane; b < nb; b += SG) {
            for (var p = 0u; p < 4u; p++) {
                let w = weight8(row, nb, b, p);
                for (var t = 0u; t < TOKENS; t++) {
                    if t >= n_run {
                        break;
                    }
                    let xo = t * (X_STRIDE / 4u) + b * 8u + p * 2u;
                    acc[t] += dot(w.a, x[xo]) + dot(w.b, x[xo + 1u]);
                }
            }
        }
    }
    for (var t = 0u; t < TOKENS; t++) {
        if t >= n_run {
            break;
        }
        let sum = subgroupAdd(acc[t]);
        if lane == 0u && row < part.rows {
            let o = t * Y_STRIDE + Y_OFFSET + part.row0 + row;
            if ACCUMULATE {
                y[o] += out_value(sum);
            } else {
                y[o] = out_value(sum);
            }
        }
    }
}

// The product as it is written: scaled, then soft-capped. The clamp keeps tanh finite
// where a compiler computes it from exponentials (tanh(10) is 1 in f32).
fn out_value(v: f32) -> f32 {
    let r = SCALE * v;
    if CAP > 0.0 {
        return CAP * tanh(clamp(r / CAP, -10.0, 10.0));
    }
    return r;
}
