// y = W·x for one token or up to 8 (a speculative check), where the adapter has
// subgroups of a fixed size: one subgroup per row, its lanes split the row's blocks
// and subgroupAdd sums them; no workgroup memory and no barriers. Same weight decoding,
// results and token accumulators as matmul_gemv.wgsl (each token's sum as a one-token
// dispatch makes it).
#include "weights.wgsl"
#include "step.wgsl"
#include "matmul_out.wgsl"
#include "gemv_rows.wgsl"
@group(0) @binding(5) var<uniform> part: Part; // which rows of the matrix this dispatch holds

override K: u32;
override SG: u32 = 32u;   // the adapter's (fixed) subgroup size
override WG: u32 = 256u;  // a multiple of SG
override TOKENS: u32 = 1u;  // 1, 4 or 8: up to that many of the step's n_tokens run
override X_STRIDE: u32 = 0u; // floats between tokens' rows of x (several tokens)

fn dots1(w: W8, xo: u32) -> f32 {
    return dots_x(w, xo);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    // Subgroups are consecutive invocations of the workgroup: lid / SG is this one's.
    let row = (wid.x + wid.y * nwg.x) * (WG / SG) + lid / SG;
    let nb = K / 32u;
    // Tokens this dispatch runs; rows of x past them read token 0's (never written).
    let n_run = select(min(TOKENS, step.n_tokens), 1u, TOKENS == 1u);
    let o = token_rows(n_run);
    var d = mat2x4<f32>();
    if row < part.rows {
        d = row_dots(row, nb, lane, SG, o, n_run);
    }
    for (var t = 0u; t < n_run; t++) {
        let sum = subgroupAdd(select(d[1], d[0], t < 4u)[t % 4u]);
        if lane == 0u && row < part.rows {
            let at = t * Y_STRIDE + Y_OFFSET + part.row0 + row;
            store(at, sum);
        }
    }
}
