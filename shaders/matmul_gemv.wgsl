// y = W·x for one token (decode) or up to 8 (a speculative check): TPR threads share a
// row and split its blocks, then reduce in workgroup memory. Each weight is decoded
// once for all the tokens, and each token's sum is made in the same order as a
// one-token dispatch makes it: its result is that dispatch's, bit for bit. Several
// tokens' sums are the lanes of vec4 accumulators (registers: an array indexed by
// token spills to memory on some compilers, lavapipe's among them). One token's x is
// staged in workgroup memory once per workgroup and read from there by every row
// (rows wider than 3072, and several tokens, read it from the buffer).
// Weights are dequantized in registers; f32 accumulation.
#include "weights.wgsl"
#include "step.wgsl"
#include "matmul_out.wgsl"

@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(5) var<uniform> part: Part; // which rows of the matrix this dispatch holds

override K: u32;            // inputs (row length), a multiple of 32
override TPR: u32 = 16u;    // threads per row: a power of two dividing WG
override WG: u32 = 256u;
override TOKENS: u32 = 1u;  // 1, 4 or 8: up to that many of the step's n_tokens run
override X_STRIDE: u32 = 0u; // floats between tokens' rows of x (several tokens)

const STAGE: u32 = 768u; // vec4s: 12 KiB, under WebGPU's 16 KiB with the partials
var<workgroup> partial: array<f32, 256>;
var<workgroup> xs: array<vec4<f32>, STAGE>;

fn x4(i: u32, staged: bool) -> vec4<f32> {
    if staged {
        return xs[i];
    }
    return x[i];
}

// One token's share of a block part: the sum a one-token dispatch adds.
fn dots(w: W8, xo: u32, staged: bool) -> f32 {
    return dot(w.a, x4(xo, staged)) + dot(w.b, x4(xo + 1u, staged));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = (wid.x + wid.y * nwg.x) * (WG / TPR) + lid / TPR;
    let lane = lid % TPR;
    let nb = K / 32u;
    // Tokens this dispatch runs; rows of x past them read token 0's (never written).
    let n_run = select(min(TOKENS, step.n_tokens), 1u, TOKENS == 1u);
    let o = token_rows(n_run);
    let staged = TOKENS == 1u && K / 4u <= STAGE;
    if staged {
        for (var i = lid; i < K / 4u; i += WG) {
            xs[i] = x[i];
        }
        workgroupBarrier();
    }
    var lo = vec4<f32>(0.0); // tokens 0-3
    var hi = vec4<f32>(0.0); // tokens 4-7
    if row < part.rows {
        for (var b = lane; b < nb; b += TPR) {
            for (var p = 0u; p < 4u; p++) {
                let w = weight8(row, nb, b, p);
                let xo = b * 8u + p * 2u;
                if TOKENS == 1u {
                    lo.x += dots(w, xo, staged);
                } else {
                    lo += vec4(dots(w, o[0] + xo, false), dots(w, o[1] + xo, false),
                               dots(w, o[2] + xo, false), dots(w, o[3] + xo, false));
                    if TOKENS == 8u && n_run > 4u {
                        hi += vec4(dots(w, o[4] + xo, false), dots(w, o[5] + xo, false),
                                   dots(w, o[6] + xo, false), dots(w, o[7] + xo, false));
                    }
                }
            }
        }
    }
    for (var t = 0u; t < n_run; t++) {
        partial[lid] = select(hi[t % 4u], lo[t % 4u], t < 4u);
        workgroupBarrier();
        for (var s = TPR / 2u; s > 0u; s >>= 1u) {
            if lane < s {
                partial[lid] += partial[lid + s];
            }
            workgroupBarrier();
        }
        if lane == 0u && row < part.rows {
            let at = t * Y_STRIDE + Y_OFFSET + part.row0 + row;
            store(at, partial[lid]);
        }
    }
}
