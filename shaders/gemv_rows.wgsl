// Included by the GEMV kernels: x (one token's row, or up to 8 tokens' rows) and a
// thread's share of one row of W·x. The including kernel defines `dots1(w, xo)`, one
// token's sum for a block part (from x or from x staged in workgroup memory), and
// TOKENS. Each token's sum is made in the order a one-token dispatch makes it.

@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;

// One token's share of a block part, read from x at vec4 `xo`.
fn dots_x(w: W8, xo: u32) -> f32 {
    return dot(w.a, x[xo]) + dot(w.b, x[xo + 1u]);
}

// Row `row`'s blocks lane, lane + lanes, …: tokens 0-3 in [0], tokens 4-7 in [1]
// (vec4 lanes, registers: an array indexed by token spills on some compilers).
fn row_dots(row: u32, nb: u32, lane: u32, lanes: u32, o: array<u32, 8>, n_run: u32) -> mat2x4<f32> {
    var r: mat2x4<f32>;
    for (var b = lane; b < nb; b += lanes) {
        for (var p = 0u; p < 4u; p++) {
            let w = weight8(row, nb, b, p);
            let xo = b * 8u + p * 2u;
            if TOKENS == 1u {
                r[0].x += dots1(w, xo);
            } else {
                r[0] += vec4(dots_x(w, o[0] + xo), dots_x(w, o[1] + xo),
                             dots_x(w, o[2] + xo), dots_x(w, o[3] + xo));
                if TOKENS == 8u && n_run > 4u {
                    r[1] += vec4(dots_x(w, o[4] + xo), dots_x(w, o[5] + xo),
                                 dots_x(w, o[6] + xo), dots_x(w, o[7] + xo));
                }
            }
        }
    }
    return r;
}
