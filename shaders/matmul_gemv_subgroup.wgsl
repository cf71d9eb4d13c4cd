// y = W·x for one token, where the adapter has subgroups of a fixed size: one subgroup
// per row, its lanes split the row's blocks and subgroupAdd sums them; no workgroup
// memory and no barriers. Same weight decoding and results as matmul_gemv.wgsl.
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

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    // Subgroups are consecutive invocations of the workgroup: lid / SG is this one's.
    let row = (wid.x + wid.y * nwg.x) * (WG / SG) + lid / SG;
    let nb = K / 32u;
    var acc = 0.0;
    if row < part.rows {
        for (var b = lane; b < nb; b += SG) {
            for (var p = 0u; p < 4u; p++) {
                let w = weight8(row, nb, b, p);
                let xo = b * 8u + p * 2u;
                acc += dot(w.a, x[xo]) + dot(w.b, x[xo + 1u]);
            }
        }
    }
    let sum = subgroupAdd(acc);
    if lane == 0u && row < part.rows {
        let o = Y_OFFSET + part.row0 + row;
        if ACCUMULATE {
            y[o] += out_value(sum);
        } else {
            y[o] = out_value(sum);
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
