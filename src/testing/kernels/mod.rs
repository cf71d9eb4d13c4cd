//! One kernel at a time on a real adapter against its CPU reference: the context the
//! native suite (lavapipe) and the browser's `pkg-tests` (WebGPU in Chromium) both
//! use, and the case bodies both run (`matmul`, `attention`, `sample`,
//! `short_conv`), each suite with its own shapes. Async: the browser cannot block on
//! a read-back; the native suite runs them with `pollster::block_on`.

pub mod attention;
pub mod matmul;
pub mod sample;

use super::assert_close;
use crate::gpu::{Caps, Gpu};
use crate::kernels::short_conv::{self, ConvIo};
use crate::kernels::{Kernels, Pass, Step, Tuning};
use crate::model::short_conv::ConvState;
use crate::rng::Rng;
use crate::Result;

pub struct Ctx {
    pub gpu: Gpu,
    /// The kernels this adapter picks (the software set on lavapipe and SwiftShader).
    pub k: Kernels,
    /// The kernels real GPUs get (rows shared by threads, the tiled GEMM), forced.
    pub gpu_k: Kernels,
}

impl Ctx {
    /// The first adapter, with the optional features of `caps` it has.
    pub async fn new(caps: Caps) -> Result<Ctx> {
        let gpu = Gpu::new(caps).await?;
        let k = Kernels::new(&gpu);
        let gpu_k = Kernels::with_tuning(&gpu, Tuning::gpu(0));
        Ok(Ctx { gpu, k, gpu_k })
    }

    /// The uniform of a step of `n_tokens` from position `pos0`.
    pub fn step(&self, n_tokens: usize, pos0: usize) -> wgpu::Buffer {
        self.step_of(Step::new(n_tokens, pos0))
    }

    /// The uniform `s` (a step's sampling settings set).
    pub fn step_of(&self, s: Step) -> wgpu::Buffer {
        self.gpu.uniform("step", bytemuck::bytes_of(&s))
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

    /// The first `n` floats of `b`.
    pub async fn read(&self, b: &wgpu::Buffer, n: usize) -> Vec<f32> {
        self.gpu.read_f32(b, 0, n as u64).await.expect("read-back")
    }

    /// The first `n` bytes of `b`.
    pub async fn bytes(&self, b: &wgpu::Buffer, n: usize) -> Vec<u8> {
        self.gpu.read(b, 0, n as u64).await.expect("read-back")
    }

    pub fn buf(&self, x: &[f32]) -> wgpu::Buffer {
        self.gpu.upload_f32("test", x).expect("upload")
    }

    /// `n` floats of zeros.
    pub fn zeros(&self, n: usize) -> wgpu::Buffer {
        self.gpu
            .storage("test out", (n * 4) as u64)
            .expect("a buffer")
    }
}

/// Deterministic values in about [-1, 1].
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.next_f32() * 2.0 - 1.0).collect()
}

/// LFM2's gated short convolution (`hidden` channels, rows of `stride` holding B|C|x,
/// `taps` taps, a ring of `slots` states) over steps of `steps` tokens each from
/// position 0, the state carried between them, against `ConvState` with C's gate.
pub async fn short_conv(c: &Ctx, shape: (usize, usize, usize, usize), steps: &[usize]) {
    let (hidden, stride, taps, slots) = shape;
    let tap_w = values(hidden * taps, 11);
    let (tb, state) = (c.buf(&tap_w), c.zeros(slots * hidden));
    let mut want_state = ConvState::new(1);
    let mut pos0 = 0;
    for (i, &n) in steps.iter().enumerate() {
        let bcx = values(n * stride, 20 + i as u64);
        let (bb, yb) = (c.buf(&bcx), c.zeros(n * hidden));
        let step = c.step(n, pos0);
        let io = ConvIo {
            bcx: &bb,
            stride,
            taps: &tb,
            state: &state,
            slots,
            y: &yb,
        };
        c.run(&step, |p| {
            short_conv::short_conv(p, (hidden, taps), &io, n).expect("short_conv")
        });
        let want = want_state.gated(0, pos0, &bcx, stride, &tap_w, taps);
        assert_close(
            &format!("hidden {hidden} taps {taps} slots {slots} step {i}"),
            &c.read(&yb, n * hidden).await,
            &want,
            1e-5,
        );
        pos0 += n;
    }
}
