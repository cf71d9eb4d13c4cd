// Repetition penalty on the GPU logits before sampling: each listed token (distinct,
// the last few of the history) is divided by PENALTY if positive, multiplied if not.

@group(0) @binding(0) var<storage, read> ids: array<u32>; // count, then ids
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;

override PENALTY: f32;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32) {
    for (var i = lid; i < ids[0]; i += 64u) {
        let t = ids[i + 1u];
        let l = logits[t];
        logits[t] = select(l * PENALTY, l / PENALTY, l > 0.0);
    }
}
