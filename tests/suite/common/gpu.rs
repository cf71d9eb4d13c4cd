//! A shared GPU (lavapipe on CPU-only machines) and helpers to run one kernel: the
//! browser's context (`pippin::testing::kernels::Ctx`), read-backs blocking here.
#![allow(dead_code)]

use pippin::gpu::Caps;
use pippin::testing::kernels;
use std::ops::Deref;
use std::sync::OnceLock;

pub use kernels::values;

/// The shared test context, whose read-backs block (the shared cases' `Ctx` is
/// reached through `Deref`, or `&**c`).
pub struct Ctx(kernels::Ctx);

impl Deref for Ctx {
    type Target = kernels::Ctx;
    fn deref(&self) -> &kernels::Ctx {
        &self.0
    }
}

impl Ctx {
    fn with(caps: Caps) -> Ctx {
        let c = pollster::block_on(kernels::Ctx::new(caps));
        Ctx(c.expect("a GPU adapter (install mesa-vulkan-drivers)"))
    }

    /// The first `n` floats of `b`.
    pub fn read(&self, b: &wgpu::Buffer, n: usize) -> Vec<f32> {
        pollster::block_on(self.0.read(b, n))
    }
}

/// The baseline path: no shader-f16, no subgroups (what the browser's software adapter has).
pub fn ctx() -> &'static Ctx {
    static C: OnceLock<Ctx> = OnceLock::new();
    C.get_or_init(|| Ctx::with(Caps::default()))
}

/// The adapter with every optional feature it has (subgroups, shader-f16).
pub fn ctx_all() -> &'static Ctx {
    static C: OnceLock<Ctx> = OnceLock::new();
    C.get_or_init(|| Ctx::with(Caps::all()))
}

/// NaN- and length-aware (see `pippin::testing`): NaN fails every `<` and `>` check.
#[allow(unused_imports)]
pub use pippin::testing::max_abs_diff as max_diff;
