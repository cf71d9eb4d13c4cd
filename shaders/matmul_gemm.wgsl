// Y = X·Wᵀ for a chunk of tokens (prefill): a workgroup computes a tile of 64 rows ×
// 16 tokens; each 32-wide slice of K is dequantized once into workgroup memory and
// used by all 16 tokens. f32 accumulation.
#include "weights.wgsl"
#include "step.wgsl"
#include "matmul_out.wgsl"

@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(5) var<uniform> part: Part; // which rows of the matrix this dispatch holds

override K: u32;            // inputs, a multiple of 32
override X_STRIDE: u32;     // floats between tokens in x

const BN: u32 = 64u;  // rows per tile
const BT: u32 = 16u;  // tokens per tile
const LD: u32 = 33u;  // padded row length in workgroup memory

var<workgroup> ws: array<f32, 2112>; // BN * LD
var<workgroup> xs: array<f32, 528>;  // BT * LD

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row0 = wid.x * BN;
    let tok0 = wid.y * BT;
    let nb = K / 32u;
    let tr = lid % 16u;  // rows tr, tr+16, tr+32, tr+48
    let tt = lid / 16u;  // token
    var acc = vec4<f32>(0.0);
    for (var b = 0u; b < nb; b++) {
        // 64 rows × 4 parts of 8: one part per thread.
        let r = lid / 4u;
        let p = lid % 4u;
        var w = W8(vec4<f32>(0.0), vec4<f32>(0.0));
        if row0 + r < part.rows {
            w = weight8(row0 + r, nb, b, p);
        }
        let wo = r * LD + p * 8u;
        for (var i = 0u; i < 4u; i++) {
            ws[wo + i] = w.a[i];
            ws[wo + 4u + i] = w.b[i];
        }
        // 16 tokens × 32 values: two per thread.
        for (var j = 0u; j < 2u; j++) {
            let idx = lid * 2u + j;
            let t = idx / 32u;
            let k = idx % 32u;
            var v = 0.0;
            if tok0 + t < step.n_tokens {
                v = x[(tok0 + t) * X_STRIDE + b * 32u + k];
            }
            xs[t * LD + k] = v;
        }
        workgroupBarrier();
        for (var k = 0u; k < 32u; k++) {
            let xv = xs[tt * LD + k];
            acc += vec4<f32>(ws[tr * LD + k], ws[(tr + 16u) * LD + k],
                             ws[(tr + 32u) * LD + k], ws[(tr + 48u) * LD + k]) * xv;
        }
        workgroupBarrier();
    }
    let t = tok0 + tt;
    if t >= step.n_tokens {
        return;
    }
    for (var i = 0u; i < 4u; i++) {
        let row = row0 + tr + 16u * i;
        if row < part.rows {
            let o = t * Y_STRIDE + Y_OFFSET + part.row0 + row;
            store(o, acc[i]);
        }
    }
}
