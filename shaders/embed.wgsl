// Embedding gather: row tokens[t] of the (quantized) table, dequantized to f32. A table
// split across buffers is gathered part by part: each part writes the tokens it holds.
#include "weights.wgsl"
#include "step.wgsl"

@group(0) @binding(3) var<storage, read> tokens: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> part: Part; // which rows of the matrix this dispatch holds

override HIDDEN: u32;   // row length, a multiple of 32
override SCALE: f32 = 1.0; // Gemma scales its embeddings by √hidden

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wid.x;
    let tok = tokens[t];
    if tok < part.row0 || tok >= part.row0 + part.rows {
        return;
    }
    let nb = HIDDEN / 32u;
    for (var j = lid; j < nb * 4u; j += 64u) {
        let b = j / 4u;
        let p = j % 4u;
        let w = weight8(tok - part.row0, nb, b, p);
        let o = t * HIDDEN + b * 32u + p * 8u;
        for (var i = 0u; i < 4u; i++) {
            out[o + i] = w.a[i] * SCALE;
            out[o + 4u + i] = w.b[i] * SCALE;
        }
    }
}
