// Included by every kernel that runs per step: the values that change each step
// (shapes are `override` constants), bound as a uniform at binding 0. Per-call choices
// (how many candidates to keep, the repetition penalty, how the next token is picked)
// are here too, never pipeline constants: changing them creates nothing.
struct Step {
    n_tokens: u32,
    pos0: u32,
    kv_len: u32,
    n_splits: u32,
    top_k: u32,
    penalty: f32,
    penalize_input: u32,
    temperature: f32,
    top_p: f32,
    min_p: f32,
    u: f32,
    masked: u32,
}

@group(0) @binding(0) var<uniform> step: Step;

// The (token, column) of rows of `width` that thread `gid` of a grid of 256-wide
// workgroups handles (a grid two-dimensional past 65535 groups); the token is
// `step.n_tokens` or more for a thread past the end.
fn token_column(gid: vec3<u32>, nwg: vec3<u32>, width: u32) -> vec2<u32> {
    let i = gid.x + gid.y * nwg.x * 256u;
    return vec2(i / width, i % width);
}
