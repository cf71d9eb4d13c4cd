//! Test support shared by the native tests and the browser's `pkg-tests`: the one
//! comparison every test uses, tiny synthetic model files (`synthetic`), and cases
//! both the native and the browser tests run (`int8_attention_case`).
//!
//! The one comparison every test uses (here, in `tests/` and in the browser's
//! `pkg-tests`): NaN- and length-aware, so a kernel that writes NaN, or nothing, can
//! never pass a tolerance check. `f32::max` drops NaN (`NaN.max(1.0) == 1.0`) and
//! `zip` stops at the shorter slice; neither is used here.

mod attention;
pub mod kernels;
pub mod synthetic;
#[cfg(not(target_arch = "wasm32"))]
mod team;

pub use attention::int8_attention_case;
#[cfg(not(target_arch = "wasm32"))]
pub use team::ThreadTeam;

/// The largest |a[i] − b[i]|, or NaN when any pair is NaN or infinite. Panics when the
/// lengths differ or there is nothing to compare, naming `what`.
///
/// NaN makes any `d < tol` (and `d > tol`) check fail, so call sites stay
/// `assert!(max_abs_diff(..) < tol)`.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    worst(a, b).map_or(f32::NAN, |(_, d)| d)
}

/// The index and size of the largest difference; `None` when a value is not finite.
fn worst(a: &[f32], b: &[f32]) -> Option<(usize, f32)> {
    assert_eq!(
        a.len(),
        b.len(),
        "comparing {} values with {}: lengths differ",
        a.len(),
        b.len()
    );
    assert!(
        !a.is_empty(),
        "comparing two empty slices: nothing was produced"
    );
    let mut worst = (0, 0f32);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let d = (x - y).abs();
        if !d.is_finite() {
            return None;
        }
        if d > worst.1 {
            worst = (i, d);
        }
    }
    Some(worst)
}

/// Panics unless `got` and `want` have the same length, are all finite, and differ by
/// at most `tol` everywhere; the message names `what`, the worst index and its values.
#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: got {} values, want {}",
        got.len(),
        want.len()
    );
    match worst(got, want) {
        None => {
            let i = got
                .iter()
                .zip(want)
                .position(|(x, y)| !(x - y).is_finite())
                .unwrap_or(0);
            panic!(
                "{what}: value {i} is not finite (got {}, want {})",
                got[i], want[i]
            );
        }
        Some((i, d)) if d > tol => panic!(
            "{what}: max difference {d} at {i} (got {}, want {}) is over {tol}",
            got[i], want[i]
        ),
        Some(_) => {}
    }
}

/// Panics unless every value is finite.
#[track_caller]
pub fn assert_finite(what: &str, x: &[f32]) {
    assert!(!x.is_empty(), "{what}: no values");
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        panic!("{what}: value {i} is {}", x[i]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::catch_unwind;

    #[test]
    fn nan_is_never_close() {
        assert!(max_abs_diff(&[f32::NAN, 1.0], &[0.0, 1.0]).is_nan());
        assert!(max_abs_diff(&[1.0, 2.0], &[1.0, f32::NAN]).is_nan());
        // The way call sites use it: `d < tol` must be false, whatever tol is.
        let passes = |d: f32| d < 1.0;
        assert!(!passes(max_abs_diff(&[f32::NAN], &[f32::NAN])));
        assert!(!passes(max_abs_diff(&[f32::INFINITY], &[f32::INFINITY])));
        assert!(catch_unwind(|| assert_close("nan", &[f32::NAN; 4], &[0.0; 4], 1e9)).is_err());
    }

    #[test]
    fn lengths_must_match_and_be_nonzero() {
        assert!(catch_unwind(|| max_abs_diff(&[], &[1.0])).is_err());
        assert!(catch_unwind(|| max_abs_diff(&[], &[])).is_err());
        assert!(catch_unwind(|| assert_close("short", &[1.0], &[1.0, 2.0], 1.0)).is_err());
    }

    #[test]
    fn close_values_pass_and_far_ones_fail() {
        assert_eq!(max_abs_diff(&[1.0, 2.0, 3.0], &[1.0, 2.5, 3.0]), 0.5);
        assert_close("ok", &[1.0, 2.0], &[1.0, 2.0001], 1e-3);
        assert!(catch_unwind(|| assert_close("far", &[1.0, 2.0], &[1.0, 2.1], 1e-3)).is_err());
        assert!(catch_unwind(|| assert_finite("inf", &[1.0, f32::INFINITY])).is_err());
    }
}
