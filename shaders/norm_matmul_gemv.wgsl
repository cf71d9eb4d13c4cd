// y = W · rmsnorm(x) for TOKENS tokens (decode; a speculative check's few): the
// RMSNorm that feeds a matrix, folded into its GEMV; each token's results are those of
// a one-token dispatch, bit for bit. Each workgroup sums x² itself (K floats: cheaper than a dispatch) and stages
// rmsnorm(x) in workgroup memory, which every row's dot product then reads (rows wider
// than the stage, 3072, normalize on the fly).
// With GLU the matrix is [gate; up] (2·N rows) and output row r is act(gate_r)·up_r:
// the gated MLP's first half in one dispatch. With WRITE_NORMED, workgroup 0 also
// writes rmsnorm(x) out (what a LoRA update's A·x reads). TPR threads share a row,
// as in matmul_gemv.wgsl; f32 accumulation. Several tokens are normalized on the fly.
#include "weights.wgsl"
#include "step.wgsl"

@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> norm_w: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> normed: array<vec4<f32>>;
@group(0) @binding(7) var<uniform> part: Part; // which rows of the matrix this dispatch holds

override K: u32;            // inputs (row length), a multiple of 32
override Y_OFFSET: u32 = 0u;
override ACCUMULATE: bool = false;
override SCALE: f32 = 1.0;   // y (+)= SCALE · W·x (Granite's residual and logit multipliers)
override CAP: f32 = 0.0;     // > 0: y = CAP·tanh(y/CAP) (Gemma 2's final logit soft-cap)
override TPR: u32 = 16u;    // threads per row: a power of two dividing WG
override WG: u32 = 256u;
override EPS: f32 = 1e-5;
override GLU: u32 = 0u;     // 0: none; 1: SiLU (SwiGLU); 2: GELU, tanh (GeGLU)
override WRITE_NORMED: bool = false;
override TOKENS: u32 = 1u;  // 1, or MAX_TOKENS: then the step's n_tokens (at most it) run
override X_STRIDE: u32 = 0u; // floats between tokens' rows of x and of normed
override Y_STRIDE: u32 = 0u; // and of y

const MAX_TOKENS: u32 = 8u;

const STAGE: u32 = 768u; // vec4s: 12 KiB, under WebGPU's 16 KiB with the partials
var<workgroup> partial: array<f32, 256>;
var<workgroup> partial_up: array<f32, 256>;
var<workgroup> xs: array<vec4<f32>, STAGE>;

fn act(g: f32) -> f32 {
    if GLU == 2u {
        let u = clamp(0.7978846 * g * (1.0 + 0.044715 * g * g), -15.0, 15.0);
        return 0.5 * g * (1.0 + tanh(u));
    }
    return g / (1.0 + exp(-g));
}

// Sums partial[0..WG) into partial[0].
fn reduce_all(lid: u32) {
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if lid < s {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // Tokens this dispatch runs: one (a constant, so the loops fold away), or the step's.
    let n_run = select(min(TOKENS, step.n_tokens), 1u, TOKENS == 1u);
    // 1 / rms(x) of each token, from its whole row.
    let xs4 = X_STRIDE / 4u;
    var inv_rms: array<f32, MAX_TOKENS>;
    for (var t = 0u; t < TOKENS; t++) {
        if t >= n_run {
            break;
        }
        var ss = 0.0;
        for (var i = lid; i < K / 4u; i += WG) {
            let v = x[t * xs4 + i];
            ss += dot(v, v);
        }
        partial[lid] = ss;
        workgroupBarrier();
        reduce_all(lid);
        inv_rms[t] = inverseSqrt(partial[0] / f32(K) + EPS);
        workgroupBarrier();
    }
    let staged = TOKENS == 1u && K / 4u <= STAGE;
    if staged {
        for (var i = lid; i < K / 4u; i += WG) {
            xs[i] = x[i] * norm_w[i] * inv_rms[0];
        }
        workgroupBarrier();
    }
    let first = wid.x + wid.y * nwg.x == 0u;
    if WRITE_NORMED && first {
        for (var t = 0u; t < TOKENS; t++) {
            if t >= n_run {
                break;
            }
            for (var i = lid; i < K / 4u; i += WG) {
                normed[t * xs4 + i] = x[t * xs4 + i] * norm_w[i] * inv_rms[t];
            }
        }
    }

    // Output rows (with GLU: gate rows; the matrix has twice as many).
    let n = select(part.rows, part.rows / 2u, GLU != 0u);
    let row = (wid.x + wid.y * nwg.x) * (WG / TPR) + lid / TPR;
    let lane = lid % TPR;
    let nb = K / 32u;
    var acc: array<f32, MAX_TOKENS>;
    var acc_up: array<f32, MAX_TOKENS>;
    for (var t = 0u; t < TOKENS; t++) {
        acc[t] = 0.0;
        acc_up[t] = 0.0;
    }
    if row < n {
        for (var b = lane; b < nb; b += TPR) {
            for (var p = 0u; p < 4u; p++) {
                let w = weight8(row, nb, b, p);
                var u: W8;
                if GLU != 0u {
                    u = weight8(row + n, nb, b, p);
                }
                for (var t = 0u; t < TOKENS; t++) {
                    if t >= n_run {
                        break;
                    }
                    let xo = b * 8u + p * 2u;
                    var xa: vec4<f32>;
                    var xb: vec4<f32>;
                    if staged {
                        xa = xs[xo];
                        xb = xs[xo + 1u];
                    } else {
                        let r = t * xs4 + xo;
                        xa = x[r] * norm_w[xo] * inv_rms[t];
                        xb = x[r + 1u] * norm_w[xo + 1u] * inv_rms[t];
                    }
                    acc[t] += dot(w.a, xa) + dot(w.b, xb);
                    if GLU != 0u {
                        acc_up[t] += dot(u.a, xa) + dot(u.b, xb);
                    }
                }
            }
        }
    }
    for (var t = 0u; t < TOKENS; t++) {
        if t >= n_run {
            break;
        }
        partial[lid] = acc[t];
        partial_up[lid] = acc_up[t];
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
                v = act(v) * partial_up[lid];
            }
            let o = t * Y_STRIDE + Y_OFFSET + part.row0 + row;
            if ACCUMULATE {
                y[o] += out_value(v);
            } else {
                y[o] = out_value(v);
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
