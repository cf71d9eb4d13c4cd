// LFM2's gated short convolution over a step's tokens: from each token's [B | C | x]
// row, y = C ⊙ Σ_j taps[j] · (B ⊙ x) of the position TAPS-1-j back (this one for
// j = TAPS-1). One invocation owns a channel: it reads the B ⊙ x of the positions
// before the step from the state (a ring of SLOTS rows, zeros before position 0),
// walks the step's tokens in order, and writes their B ⊙ x back into the ring —
// no other invocation touches its channel, so no barrier is needed.

#include "step.wgsl"
@group(0) @binding(1) var<storage, read> bcx: array<f32>;          // [n_tokens][STRIDE]
@group(0) @binding(2) var<storage, read> taps: array<f32>;         // [H][TAPS]
@group(0) @binding(3) var<storage, read_write> state: array<f32>;  // [SLOTS][H]
@group(0) @binding(4) var<storage, read_write> y: array<f32>;      // [n_tokens][H]

override H: u32;
override STRIDE: u32;
override TAPS: u32;
override SLOTS: u32;

const MAX_TAPS: u32 = 8u;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let ch = gid.x + gid.y * nwg.x * 64u;
    if ch >= H {
        return;
    }
    // win[j]: B ⊙ x of the position TAPS-1-j back from the next token.
    var win: array<f32, MAX_TAPS>;
    for (var j = 0u; j + 1u < TAPS; j++) {
        let back = TAPS - 1u - j;
        if step.pos0 >= back {
            win[j] = state[((step.pos0 - back) % SLOTS) * H + ch];
        }
    }
    for (var t = 0u; t < step.n_tokens; t++) {
        let row = t * STRIDE;
        let bx = bcx[row + ch] * bcx[row + 2u * H + ch];
        win[TAPS - 1u] = bx;
        var acc = 0.0;
        for (var j = 0u; j < TAPS; j++) {
            acc += taps[ch * TAPS + j] * win[j];
        }
        y[t * H + ch] = bcx[row + H + ch] * acc;
        for (var j = 0u; j + 1u < TAPS; j++) {
            win[j] = win[j + 1u];
        }
        state[((step.pos0 + t) % SLOTS) * H + ch] = bx;
    }
}
