//! `pippin bench`: per-kernel time, GB/s of weights read and GFLOP/s for the matmul
//! shapes of a model, against a naive one-thread-per-row GEMV of the same weights in
//! the same run; then prefill and decode tokens/s of the whole model.

use pippin::engine::{Backend, Engine, GpuModel, Want};
use pippin::kernels::matmul::{self, GpuMatrix, Io};
use pippin::kernels::Step;
use pippin::Result;
use web_time::Instant;

pub struct KernelRow {
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    pub tokens: usize,
    pub format: String,
    pub weight_bytes: u64,
    pub ms: f64,
    /// The naive GEMV on the same weights (decode rows only).
    pub naive_ms: Option<f64>,
}

impl KernelRow {
    pub fn gbps(&self) -> f64 {
        self.weight_bytes as f64 / (self.ms * 1e-3) / 1e9
    }
    pub fn gflops(&self) -> f64 {
        2.0 * (self.rows * self.cols * self.tokens) as f64 / (self.ms * 1e-3) / 1e9
    }
}

/// Runs `f` (which records kernels) `reps` times in one submission; ms per repetition.
fn time(
    m: &GpuModel,
    reps: usize,
    f: &dyn Fn(&mut wgpu::ComputePass) -> Result<()>,
) -> Result<f64> {
    let g = &m.gpu;
    let run = |n: usize| -> Result<f64> {
        let mut enc = g.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for _ in 0..n {
                f(&mut pass)?;
            }
        }
        let t = Instant::now();
        g.queue.submit([enc.finish()]);
        let _ = pollster::block_on(g.read(&g.storage("sync", 4)?, 0, 4))?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    run(1)?; // compile and warm up
    Ok(run(reps)? / reps as f64)
}

/// The matmuls of layer 0 and the output head, as decode (1 token) and as a prefill
/// chunk of `chunk` tokens.
pub fn kernels(m: &GpuModel, reps: usize, chunk: usize) -> Result<Vec<KernelRow>> {
    let c = &m.config;
    let l = &m.layers[0];
    let mats: [(&str, &GpuMatrix); 8] = [
        ("attn_q", &l.wq),
        ("attn_k", &l.wk),
        ("attn_v", &l.wv),
        ("attn_output", &l.wo),
        ("ffn_gate", &l.gate),
        ("ffn_up", &l.up),
        ("ffn_down", &l.down),
        ("output", m.head()),
    ];
    let g = &m.gpu;
    let widest = c.ffn_dim.max(c.hidden).max(c.q_dim());
    let x = g.upload_f32("bench x", &vec![0.01; chunk * widest])?;
    let y = g.storage("bench y", (chunk * c.vocab_size.max(widest) * 4) as u64)?;
    let mut rows = Vec::new();
    for (name, w) in mats {
        for tokens in [1, chunk] {
            let step = g.uniform("step", bytemuck::bytes_of(&Step::new(tokens, 0)));
            let io = Io {
                x: &x,
                x_stride: w.cols,
                y: &y,
                y_stride: w.rows,
                y_offset: 0,
                accumulate: false,
            };
            let ms = time(m, reps, &|pass| {
                matmul::matmul(&m.kernels, pass, &step, w, &io, tokens)
            })?;
            let naive_ms = if tokens == 1 && w.parts.len() == 1 {
                Some(time(m, reps, &|pass| {
                    matmul::naive(&m.kernels, pass, w, &x, &y)
                })?)
            } else {
                None
            };
            rows.push(KernelRow {
                name: name.to_string(),
                rows: w.rows,
                cols: w.cols,
                tokens,
                format: format!("{:?}", w.format),
                weight_bytes: w.bytes(),
                ms,
                naive_ms,
            });
        }
    }
    Ok(rows)
}

/// Prefill tokens/s over a `prompt`-token prompt and decode tokens/s over `steps`, on
/// the engine's session (its context must hold prompt + steps + 1).
pub fn model(e: &mut Engine, prompt: usize, steps: usize) -> Result<(f64, f64)> {
    let tokens: Vec<u32> = (0..prompt as u32).map(|i| 300 + i * 7 % 1000).collect();
    let greedy = || Want {
        top_k: Some(1),
        penalty: 1.0,
        penalty_ids: &[],
    };
    let mut s = e.backend()?;
    // Warm-up: compiles every pipeline both paths use.
    pollster::block_on(s.forward(&tokens[..2], greedy()))?;
    pollster::block_on(s.forward(&tokens[..1], greedy()))?;
    s.truncate(0);
    let t = Instant::now();
    pollster::block_on(s.forward(&tokens, greedy()))?;
    let prefill = prompt as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..steps {
        pollster::block_on(s.forward(&[42], greedy()))?;
    }
    Ok((prefill, steps as f64 / t.elapsed().as_secs_f64()))
}
