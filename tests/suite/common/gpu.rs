//! A shared GPU (lavapipe on CPU-only machines) and helpers to run one kernel.
#![allow(dead_code)]

use pippin::gpu::{Caps, Gpu};
use pippin::kernels::{Kernels, Pass, Step};
use std::sync::OnceLock;

pub struct Ctx {
    pub gpu: Gpu,
    pub k: Kernels,
}

/// The baseline path: no shader-f16, no subgroups (what the browser's software adapter has).
pub fn ctx() -> &'static Ctx {
    static C: OnceLock<Ctx> = OnceLock::new();
    C.get_or_init(|| {
        let gpu = pollster::block_on(Gpu::new(Caps::default()))
            .expect("a GPU adapter (install mesa-vulkan-drivers)");
        let k = Kernels::new(&gpu);
        Ctx { gpu, k }
    })
}

/// The adapter with every optional feature it has (subgroups, shader-f16).
pub fn ctx_all() -> &'static Ctx {
    static C: OnceLock<Ctx> = OnceLock::new();
    C.get_or_init(|| {
        let gpu = pollster::block_on(Gpu::new(pippin::gpu::Caps::all())).expect("a GPU adapter");
        let k = Kernels::new(&gpu);
        Ctx { gpu, k }
    })
}

impl Ctx {
    pub fn step(&self, n_tokens: usize, pos0: usize) -> wgpu::Buffer {
        self.gpu
            .uniform("step", bytemuck::bytes_of(&Step::new(n_tokens, pos0)))
    }

    /// Records kernels with `f` in one pass for the step in `step` and submits.
    pub fn run(&self, step: &wgpu::Buffer, f: impl FnOnce(&mut Pass)) {
        self.run_on(&self.k, step, f)
    }

    /// As `run`, with kernels `k`.
    pub fn run_on(&self, k: &Kernels, step: &wgpu::Buffer, f: impl FnOnce(&mut Pass)) {
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            f(&mut Pass::new(k, step, &mut pass));
        }
        self.gpu.queue.submit([enc.finish()]);
    }

    pub fn read(&self, b: &wgpu::Buffer, n: usize) -> Vec<f32> {
        pollster::block_on(self.gpu.read_f32(b, 0, n as u64)).expect("read-back")
    }

    pub fn buf(&self, x: &[f32]) -> wgpu::Buffer {
        self.gpu.upload_f32("test", x).unwrap()
    }

    pub fn zeros(&self, n: usize) -> wgpu::Buffer {
        self.gpu.storage("test out", (n * 4) as u64).unwrap()
    }
}

/// Deterministic values in about [-1, 1].
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut r = pippin::sampler::Rng::new(seed);
    (0..n).map(|_| r.next_f32() * 2.0 - 1.0).collect()
}

/// NaN- and length-aware (see `pippin::testing`): NaN fails every `<` and `>` check.
#[allow(unused_imports)]
pub use pippin::testing::max_abs_diff as max_diff;
