// y = W · rmsnorm(x) for one token (decode) or up to 8 (a speculative check): the
// RMSNorm that feeds a matrix, folded into its GEMV; each token's results are those of
// a one-token dispatch, bit for bit (token accumulators as in matmul_gemv.wgsl). Each workgroup sums x² itself (K floats: cheaper than a dispatch) and stages
// rmsnorm(x) in workgroup memory, which every row's dot product then reads (rows wider
// than the stage, 3072, normalize on the fly).
// With GLU the matrix is [gate; up] (2·N rows) and output row r is act(gate_r)·up_r:
// the gated MLP's first half in one dispatch. With WRITE_NORMED, workgroup 0 also
// writes rmsnorm(x) out (what a LoRA update's A·x reads). TPR threads share a row,
// as in matmul_gemv.wgsl; f32 accumulation. Several tokens are normalized on the fly.
#include "weights.wgsl"
#include "step.wgsl"
#include "matmul_out.wgsl"
#include "activation.wgsl"

@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> norm_w: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> normed: array<vec4<f32>>;
@group(0) @binding(7) var<uniform> part: Part; // which rows of the matrix this dispatch holds

override K: u32;            // inputs (row length), a multiple of 32
override TPR: u32 = 16u;    // threads per row: a power of two dividing WG
override WG: u32 = 256u;
override EPS: f32 = 1e-5;
override GLU: u32 = 0u;     // 0: none; else the ACT_* id of the activation
override WRITE_NORMED: bool = false;
override TOKENS: u32 = 1u;  // 1, 4 or 8: up to that many of the step's n_tokens run
override X_STRIDE: u32 = 0u; // floats between tokens' rows of x and of normed

const STAGE: u32 = 768u; // vec4s: 12 KiB, under WebGPU's 16 KiB with the partials
var<workgroup> partial: array<f32, 256>;
var<workgroup> partial_up: array<f32, 256>;
var<workgroup> xs: array<vec4<f32>, STAGE>;


// Sums partial[0..WG) into partial[0].
fn reduce_all(lid: u32) {
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if lid < s {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
}

// A token's share of a block part, its row of x at `o` normalized on the fly by
// `inv`: (gate or only row, up) — the sums a one-token dispatch adds.
fn dots(w: W8, u: W8, o: u32, xo: u32, inv: f32) -> vec2<f32> {
    let xa = x[o + xo] * norm_w[xo] * inv;
    let xb = x[o + xo + 1u] * norm_w[xo + 1u] * inv;
    var r = vec2(dot(w.a, xa) + dot(w.b, xb), 0.0);
    if GLU != 0u {
        r.y = dot(u.a, xa) + dot(u.b, xb);
    }
    return r;
}

// Four tokens' dots (rows o[t0..t0+4]): the matrix row's in .x, the up row's in .y.
fn dots4(w: W8, u: W8, o: array<u32, 8>, t0: u32, xo: u32, inv: vec4<f32>) -> mat2x4<f32> {
    var r: mat2x4<f32>;
    for (var t = 0u; t < 4u; t++) {
        let d = dots(w, u, o[t0 + t], xo, inv[t]);
        r[0][t] = d.x;
        r[1][t] = d.y;
    }
    return r;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // Tokens this dispatch runs; rows of x past them read token 0's (never written).
    let n_run = select(min(TOKENS, step.n_tokens), 1u, TOKENS == 1u);
    let o = token_rows(n_run);
    // 1 / rms(x) of each token, from its whole row.
    var inv = array<f32, 8>(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0);
    for (var t = 0u; t < n_run; t++) {
        var ss = 0.0;
        for (var i = lid; i < K / 4u; i += WG) {
            let v = x[o[t] + i];
            ss += dot(v, v);
        }
        partial[lid] = ss;
        workgroupBarrier();
        reduce_all(lid);
        inv[t] = inverseSqrt(partial[0] / f32(K) + EPS);
        workgroupBarrier();
    }
    let inv_lo = vec4(inv[0], inv[1], inv[2], inv[3]);
    let inv_hi = vec4(inv[4], inv[5], inv[6], inv[7]);
    let staged = TOKENS == 1u && K / 4u <= STAGE;
    if staged {
        for (var i = lid; i < K / 4u; i += WG) {
            xs[i] = x[i] * norm_w[i] * inv_lo.x;
        }
        workgroupBarrier();
    }
    let first = wid.x + wid.y * nwg.x == 0u;
    if WRITE_NORMED && first {
        for (var t = 0u; t < n_run; t++) {
            let it = select(inv_hi[t % 4u], inv_lo[t % 4u], t < 4u);
            for (var i = lid; i < K / 4u; i += WG) {
                normed[o[t] + i] = x[o[t] + i] * norm_w[i] * it;
            }
        }
    }

    // Output rows (with GLU: gate rows; the matrix has twice as many).
    let n = select(part.rows, part.rows / 2u, GLU != 0u);
    let row = (wid.x + wid.y * nwg.x) * (WG / TPR) + lid / TPR;
    let lane = lid % TPR;
    let nb = K / 32u;
    var lo = vec4<f32>(0.0); // tokens 0-3
    var hi = vec4<f32>(0.0); // tokens 4-7
    var up_lo = vec4<f32>(0.0);
    var up_hi = vec4<f32>(0.0);
    if row < n {
        for (var b = lane; b < nb; b += TPR) {
            for (var p = 0u; p < 4u; p++) {
                let w = weight8(row, nb, b, p);
                var u: W8;
                if GLU != 0u {
                    u = weight8(row + n, nb, b, p);
                }
                let xo = b * 8u + p * 2u;
                if staged {
                    let xa = xs[xo];
                    let xb = xs[xo + 1u];
                    lo.x += dot(w.a, xa) + dot(w.b, xb);
                    if GLU != 0u {
                        up_lo.x += dot(u.a, xa) + dot(u.b, xb);
                    }
                } else if TOKENS == 1u {
                    let d = dots(w, u, 0u, xo, inv_lo.x);
                    lo.x += d.x;
                    up_lo.x += d.y;
                } else {
                    let d = dots4(w, u, o, 0u, xo, inv_lo);
                    lo += d[0];
                    up_lo += d[1];
                    if TOKENS == 8u && n_run > 4u {
                        let e = dots4(w, u, o, 4u, xo, inv_hi);
                        hi += e[0];
                        up_hi += e[1];
                    }
                }
            }
        }
    }
    for (var t = 0u; t < n_run; t++) {
        partial[lid] = select(hi[t % 4u], lo[t % 4u], t < 4u);
        partial_up[lid] = select(up_hi[t % 4u], up_lo[t % 4u], t < 4u);
        workgroupBarrier();
        for (var s = TPR / 2u; s > 0u; s >>= 1u) {
            if lane < s {
                partial[lid] += partial[lid + s];
                partial_up[lid] += partial_up[lid + s];
            }
            workgroupBarrier();
        }
        if lane == 0u && row < n {
            var v = partial[lid];
            if GLU != 0u {
                v = activation(GLU, v) * partial_up[lid];
            }
            let at = t * Y_STRIDE + Y_OFFSET + part.row0 + row;
            store(at, v);
        }
    }
}
