// The step.top_k largest logits with their token ids, so decode reads back a few pairs
// and not the logits (top_k = 1 is argmax). Pass 1 (FIRST): each workgroup takes CH
// logits and keeps its best top_k in a slot of MAX_K; pass 2: one workgroup takes all
// the slots' candidates. Each round picks the best item below the previous pick in the
// order (value descending, id ascending), so no item needs to be stored or sorted.
// Guided generation (step.masked): pass 1 skips the tokens whose bit in `mask` is
// clear, so they are never candidates (fewer allowed tokens than k leave filler).

#include "step.wgsl"
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> cand_in: array<vec2<u32>>;   // (id, f32 bits)
@group(0) @binding(3) var<storage, read_write> cand_out: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read> mask: array<u32>;  // bit t % 32 of word t / 32

override FIRST: bool = true;
override N: u32;          // items in all: logits (pass 1) or candidate slots (pass 2)
override CH: u32;         // items per workgroup
override MAX_K: u32 = 64u; // slot stride of pass 1's output

const NEG: f32 = -3.4e38;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

// Item j, or a filler that ranks last (a pass-1 slot past its top_k).
fn item(j: u32) -> vec2<u32> {
    if FIRST {
        if step.masked != 0u && (mask[j / 32u] & (1u << (j % 32u))) == 0u {
            return vec2<u32>(0xffffffffu, bitcast<u32>(NEG));
        }
        return vec2<u32>(j, bitcast<u32>(logits[j]));
    }
    if j % MAX_K >= ksel() {
        return vec2<u32>(0xffffffffu, bitcast<u32>(NEG));
    }
    return cand_in[j];
}

fn ksel() -> u32 {
    return clamp(step.top_k, 1u, MAX_K);
}

// a ranks above b: larger value, then smaller id.
fn above(av: f32, ai: u32, bv: f32, bi: u32) -> bool {
    return av > bv || (av == bv && ai < bi);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let lo = wid.x * CH;
    let hi = min(lo + CH, N);
    var prev_v = 3.4e38;
    var prev_i = 0u;
    var has_prev = false;
    for (var r = 0u; r < ksel(); r++) {
        var bv = NEG;
        var bi = 0xffffffffu;
        for (var j = lo + lid; j < hi; j += 256u) {
            let it = item(j);
            var v = bitcast<f32>(it.y);
            if v != v {
                v = NEG; // NaN ranks last
            }
            let below_prev = !has_prev || above(prev_v, prev_i, v, it.x);
            if below_prev && above(v, it.x, bv, bi) {
                bv = v;
                bi = it.x;
            }
        }
        best_v[lid] = bv;
        best_i[lid] = bi;
        workgroupBarrier();
        for (var s = 128u; s > 0u; s >>= 1u) {
            if lid < s && above(best_v[lid + s], best_i[lid + s], best_v[lid], best_i[lid]) {
                best_v[lid] = best_v[lid + s];
                best_i[lid] = best_i[lid + s];
            }
            workgroupBarrier();
        }
        prev_v = best_v[0];
        prev_i = best_i[0];
        has_prev = true;
        if lid == 0u {
            cand_out[wid.x * MAX_K + r] = vec2<u32>(prev_i, bitcast<u32>(prev_v));
        }
        workgroupBarrier();
    }
}
