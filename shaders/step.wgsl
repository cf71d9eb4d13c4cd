// Included by every kernel that runs per step: the values that change each step
// (shapes are `override` constants), bound as a uniform at binding 0: `struct Step`,
// which build.rs writes into "formats.wgsl" from `kernels::Step`. Per-call choices
// (how many candidates to keep, the repetition penalty, how the next token is picked)
// are here too, never pipeline constants: changing them creates nothing.
#include "formats.wgsl"

@group(0) @binding(0) var<uniform> step: Step;

// The (token, column) of rows of `width` that thread `gid` of a grid of 256-wide
// workgroups handles (a grid two-dimensional past 65535 groups); the token is
// `step.n_tokens` or more for a thread past the end.
fn token_column(gid: vec3<u32>, nwg: vec3<u32>, width: u32) -> vec2<u32> {
    let i = gid.x + gid.y * nwg.x * 256u;
    return vec2(i / width, i % width);
}
