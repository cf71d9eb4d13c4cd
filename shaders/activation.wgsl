// Included by the kernels that apply the gated MLP's activation: act(g) for an ACT_*
// id of `Activation` (src/model/config.rs; build.rs writes them into "formats.wgsl").

#include "formats.wgsl"

fn activation(id: u32, g: f32) -> f32 {
    if id == ACT_GELU_TANH {
        // tanh overflows to NaN in some implementations for large |x|: clamp its input.
        let u = clamp(0.7978846 * g * (1.0 + 0.044715 * g * g), -15.0, 15.0);
        return 0.5 * g * (1.0 + tanh(u));
    }
    return g / (1.0 + exp(-g));
}
