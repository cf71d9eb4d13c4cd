// Included by the matmul kernels: where a product lands in y and how it is written —
// scaled, soft-capped, then added (a fused residual) or stored — and where each of
// several tokens' rows of x starts.

@group(0) @binding(4) var<storage, read_write> y: array<f32>;

override Y_STRIDE: u32 = 0u; // floats between tokens' rows of y
override Y_OFFSET: u32 = 0u; // where row 0 of the matrix lands in y
override ACCUMULATE: bool = false; // y += W·x (fuses the residual add)
override SCALE: f32 = 1.0;   // y (+)= SCALE · W·x (Granite's residual and logit multipliers)
override CAP: f32 = 0.0;     // > 0: y = CAP·tanh(y/CAP) (Gemma 2's final logit soft-cap)

// The product as it is written: scaled, then soft-capped. The clamp keeps tanh finite
// where a compiler computes it from exponentials (tanh(10) is 1 in f32).
fn out_value(v: f32) -> f32 {
    let r = SCALE * v;
    if CAP > 0.0 {
        return CAP * tanh(clamp(r / CAP, -10.0, 10.0));
    }
    return r;
}

// Writes product `v` to y[at].
fn store(at: u32, v: f32) {
    if ACCUMULATE {
        y[at] += out_value(v);
    } else {
        y[at] = out_value(v);
    }
}

// Where each token's row of x starts (vec4s): token 0's for those past `n_run`.
fn token_rows(n_run: u32) -> array<u32, 8> {
    var o: array<u32, 8>;
    for (var t = 0u; t < 8u; t++) {
        o[t] = select(0u, t * (X_STRIDE / 4u), t < n_run);
    }
    return o;
}
