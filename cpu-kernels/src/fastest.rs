//! The fastest loop of each kind this build has: wasm SIMD128 where it is compiled in
//! (the npm package's build), the plain loops elsewhere (their reference). The one
//! place that asks where it runs, so the engine never does; `#[inline]` so that
//! natively these vanish into the caller's loop, as the engine's own loops had.

pub use crate::blocks32::Format;
use crate::{Acts, Lanes};

/// `row · x` in plain loops, on every target: the reference of the SIMD versions.
pub fn plain_dot(f: Format, row: &[u8], x: Acts) -> f32 {
    f.plain_dot(row, x)
}

/// `row · x` for one token's activations.
#[inline]
pub fn dot(f: Format, row: &[u8], x: Acts) -> f32 {
    // With SIMD128 every format has a SIMD kernel: the plain loops are not linked in.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return match f {
        Format::K(k) => crate::simd::kquants::dot(k, row, x),
        _ => crate::simd::blocks::dot(f, row, x),
    };
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    plain_dot(f, row, x)
}

/// `row · x_t` into `out[t]` for the first `out.len()` tokens of `x` (rows of `cols`):
/// with SIMD each block of 32 is unpacked once for four tokens (when `lanes` holds
/// `x`'s scales by fours: `wants_lanes`), each K-quant super-block once for up to
/// eight (`simd::kquants::dots`). Each token's sum is `dot`'s, bit for bit
/// (the same products added in the same order; speculative decoding relies on it).
#[inline]
pub fn dots(f: Format, row: &[u8], x: Acts, lanes: Lanes, cols: usize, out: &mut [f32]) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    match f {
        Format::K(k) if out.len() > 1 => return crate::simd::kquants::dots(k, row, x, cols, out),
        Format::K(_) => {}
        _ if out.len() > 1 && !lanes.d.is_empty() => {
            return crate::simd::blocks::dots(f, row, x, lanes, cols, out)
        }
        _ => {}
    }
    let _ = lanes;
    for (t, o) in out.iter_mut().enumerate() {
        *o = dot(f, row, x.token(t, cols));
    }
}

/// Whether `dots` reads `f`'s activations by groups of four tokens (`crate::lanes`):
/// the SIMD blocks of 32 only (the K-quants' kernel takes each token's own scales, the
/// plain loops take tokens one by one).
#[inline]
pub fn wants_lanes(f: Format) -> bool {
    cfg!(all(target_arch = "wasm32", target_feature = "simd128")) && !matches!(f, Format::K(_))
}

// The loops with one signature on every target: the module this build has.
/// `palette(bits, words, lv, x)`: `row · x` for a palettized row (`bits`-bit indices
/// packed in `words`) into the table `lv`, in integers.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub use crate::simd::palette::dot as palette;
/// `dot_f32(a, b)` = `Σ a·b`; `axpy_f32(y, a, x)`: `y += a·x`; `dot8` and `axpy8` the
/// same for int8 `b` / `x`.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub use crate::simd::{
    f32::{axpy as axpy_f32, dot as dot_f32},
    int8::{axpy8, dot8},
};
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
pub use crate::{
    floats::{axpy as axpy_f32, axpy8, dot as dot_f32, dot8},
    palette::dot as palette,
};
