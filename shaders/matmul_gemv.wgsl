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
#include "gemv_rows.wgsl"
@group(0) @binding(5) var<uniform> part: Part; // which rows of the matrix this dispatch holds

override K: u32;            // inputs (row length), a multiple of 32
override TPR: u32 = 16u;    // threads per row: a power of two dividing WG
override WG: u32 = 256u;
override TOKENS: u32 = 1u;  // 1, 4 or 8: up to that many of the step's n_tokens run
override X_STRIDE: u32 = 0u; // floats between tokens' rows of x (several tokens)

const STAGE: u32 = 768u; // vec4s: 12 KiB, under WebGPU's 16 KiB with the partials
var<workgroup> partial: array<f32, 256>;
var<workgroup> xs: array<vec4<f32>, STAGE>;

// One token's share of a block part, from x staged in workgroup memory where it fits.
fn dots1(w: W8, xo: u32) -> f32 {
    if K / 4u <= STAGE {
        return dot(w.a, xs[xo]) + dot(w.b, xs[xo + 1u]);
    }
    return dots_x(w, xo);
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
    var d = mat2x4<f32>();
    if row < part.rows {
        d = row_dots(row, nb, lane, TPR, o, n_run);
    }
    for (var t = 0u; t < n_run; t++) {
        partial[lid] = select(d[1], d[0], t < 4u)[t % 4u];
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
