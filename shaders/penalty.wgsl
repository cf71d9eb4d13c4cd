// Repetition penalty on the GPU logits before sampling: each listed token (distinct,
// the last few of the history) is divided by step.penalty if positive, multiplied if
// not. A count of 0 makes it a no-op, so decode always records it.

#include "step.wgsl"
@group(0) @binding(1) var<storage, read> ids: array<u32>; // count, then ids
@group(0) @binding(2) var<storage, read_write> logits: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32) {
    for (var i = lid; i < ids[0]; i += 64u) {
        let t = ids[i + 1u];
        let l = logits[t];
        logits[t] = select(l * step.penalty, l / step.penalty, l > 0.0);
    }
}
