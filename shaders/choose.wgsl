// The next token, picked on the GPU from top-k's candidates (best first) exactly as
// `sampler::Sampler::pick` does on the CPU: greedy, or temperature, top-p and min-p
// then a draw with the step's uniform value `step.u`. It is written to tokens[0],
// where the next decode step's embedding reads it, so that step can be submitted
// before this one's result is read back (pipelined decode). One thread: at most 64
// candidates.

#include "step.wgsl"
@group(0) @binding(1) var<storage, read> cand: array<vec2<u32>>; // (id, f32 bits)
@group(0) @binding(2) var<storage, read_write> tokens: array<u32>;

override VOCAB: u32;
override MAX_K: u32 = 64u;

@compute @workgroup_size(1)
fn main() {
    // The real candidates: a vocabulary smaller than k leaves filler ids past it.
    var ids: array<u32, 64>;
    var l: array<f32, 64>;
    var n = 0u;
    for (var i = 0u; i < min(step.top_k, MAX_K); i++) {
        let c = cand[i];
        if c.x < VOCAB {
            ids[n] = c.x;
            l[n] = bitcast<f32>(c.y);
            n++;
        }
    }
    if n == 0u {
        tokens[0] = 0u;
        return;
    }
    if step.temperature == 0.0 {
        tokens[0] = ids[0];
        return;
    }
    // Softmax of logit / temperature, relative to the best (the first).
    var p: array<f32, 64>;
    let top = l[0] / step.temperature;
    var sum = 0.0;
    for (var i = 0u; i < n; i++) {
        p[i] = exp(l[i] / step.temperature - top);
        sum += p[i];
    }
    for (var i = 0u; i < n; i++) {
        p[i] /= sum;
    }
    // Top-p: the shortest prefix reaching it; min-p: those at least min_p × the best
    // (a prefix, since p is in decreasing order).
    var m = n;
    if step.top_p < 1.0 {
        var acc = 0.0;
        for (var i = 0u; i < n; i++) {
            acc += p[i];
            if acc >= step.top_p {
                m = i + 1u;
                break;
            }
        }
    }
    if step.min_p > 0.0 {
        let floor = p[0] * step.min_p;
        var kept = 0u;
        for (var i = 0u; i < m; i++) {
            if p[i] >= floor {
                kept++;
            }
        }
        m = kept;
    }
    var total = 0.0;
    for (var i = 0u; i < m; i++) {
        total += p[i];
    }
    let r = step.u * total;
    var acc = 0.0;
    var chosen = ids[m - 1u];
    for (var i = 0u; i < m; i++) {
        acc += p[i];
        if r < acc {
            chosen = ids[i];
            break;
        }
    }
    tokens[0] = chosen;
}
