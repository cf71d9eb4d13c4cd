// Repetition penalty on the GPU logits before sampling: each listed token (distinct,
// the last few of the history) is divided by step.penalty if positive, multiplied if
// not. A count of 0 makes it a no-op, so decode always records it. A chained decode
// step (`step.penalize_input`) also penalizes its input token, which the step before
// chose on the GPU (the CPU lists the rest of the window), unless it is listed.

#include "step.wgsl"
@group(0) @binding(1) var<storage, read> ids: array<u32>; // count, then ids
@group(0) @binding(2) var<storage, read_write> logits: array<f32>;
@group(0) @binding(3) var<storage, read> tokens: array<u32>; // the step's input first

fn penalize(t: u32) {
    let l = logits[t];
    logits[t] = select(l * step.penalty, l / step.penalty, l > 0.0);
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32) {
    let n = ids[0];
    for (var i = lid; i < n; i += 64u) {
        penalize(ids[i + 1u]);
    }
    if step.penalize_input != 0u && lid == 0u {
        let t = tokens[0];
        var listed = false;
        for (var i = 0u; i < n; i++) {
            listed = listed || ids[i + 1u] == t;
        }
        if !listed && t < arrayLength(&logits) {
            penalize(t);
        }
    }
}
