//! `pippin bench`: per-kernel time, GB/s of weights read and GFLOP/s for the matmul
//! shapes of a model, against a naive one-thread-per-row GEMV of the same weights in
//! the same run; then the whole model: prefill and decode tokens/s, and figures that
//! hold on any machine — dispatches per decode step (and per layer), GPU objects a
//! steady-state step creates, and the CPU time of a step on wgpu's no-op backend, with
//! its recorded plan and (the "before") encoded from scratch.

use pippin::engine::{AnyBackend, Backend, Engine, GpuModel, SessionOptions, Want};
use pippin::gpu::Gpu;
use pippin::kernels::matmul::{self, GpuMatrix, Io, NormIn};
use pippin::model::Activation;

/// Whether a matrix runs with its norm folded in, and with which gated activation.
type Glu = Option<Activation>;
use pippin::kernels::stacked::Stacked;
use pippin::kernels::{Pass, Step};
use pippin::Result;
use web_time::Instant;

#[derive(serde::Serialize)]
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

/// Runs `f` (which records kernels for the step in `step`) `reps` times in one
/// submission; ms per repetition.
fn time(
    m: &GpuModel,
    step: &wgpu::Buffer,
    reps: usize,
    f: &dyn Fn(&mut Pass) -> Result<()>,
) -> Result<f64> {
    let g = &m.gpu;
    let run = |n: usize| -> Result<f64> {
        let mut enc = g.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            let mut pass = Pass::new(&m.kernels, step, &mut pass);
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

/// The matmuls of layer 0 and the output head, as decode (1 token), as a speculative
/// check (`GEMV_TOKENS`) and as a prefill chunk of `chunk` tokens.
pub fn kernels(m: &GpuModel, reps: usize, chunk: usize) -> Result<Vec<KernelRow>> {
    let c = &m.config;
    let l = &m.layers[0];
    // Stacked matrices run as one; apart, each by its own name.
    fn named<'a>(
        one: &'a str,
        apart: [&'a str; 3],
        s: &'a Stacked,
    ) -> Vec<(&'a str, &'a GpuMatrix)> {
        match s {
            Stacked::One(w) => vec![(one, w)],
            Stacked::Apart(ws) => apart.into_iter().zip(ws).collect(),
        }
    }
    // What reads a norm's output runs with the norm folded in at decode (the [gate;
    // up] matrix with its GLU epilogue), as the model runs it.
    let glu = |s: &Stacked| matches!(s, Stacked::One(_)).then_some(c.activation);
    let mut mats: Vec<(&str, &GpuMatrix, Option<Glu>)> =
        named("attn_qkv", ["attn_q", "attn_k", "attn_v"], &l.qkv)
            .into_iter()
            .map(|(n, w)| (n, w, Some(None)))
            .collect();
    mats.push(("attn_output", &l.wo, None));
    mats.extend(
        named("ffn_gate_up", ["ffn_gate", "ffn_up", ""], &l.gate_up)
            .into_iter()
            .map(|(n, w)| (n, w, Some(glu(&l.gate_up)))),
    );
    mats.extend([
        ("ffn_down", &l.down, None),
        ("output", m.head(), Some(None)),
    ]);
    let g = &m.gpu;
    let widest = c.ffn_dim.max(c.hidden).max(c.q_dim());
    let x = g.upload_f32("bench x", &vec![0.01; chunk * widest])?;
    let ones = g.upload_f32("bench norm", &vec![1.0; widest])?;
    let check = matmul::GEMV_TOKENS.min(chunk);
    let normed = g.storage("bench normed", (check * widest * 4) as u64)?;
    let y = g.storage("bench y", (chunk * c.vocab_size.max(widest) * 4) as u64)?;
    let mut rows = Vec::new();
    for (name, w, norm) in mats {
        // Decode, a speculative check (each weight decoded once for its tokens), a chunk.
        for tokens in [1, check, chunk] {
            let step = g.uniform("step", bytemuck::bytes_of(&Step::new(tokens, 0)));
            let io = Io::new((&x, w.cols), (&y, w.rows));
            let fused = norm.filter(|_| tokens <= check);
            let ms = time(m, &step, reps, &|pass| match fused {
                Some(glu) => {
                    let n = NormIn {
                        weights: &ones,
                        eps: c.rms_eps,
                        glu,
                        normed: &normed,
                        write_normed: false,
                    };
                    matmul::norm_gemv(pass, w, &io, &n, tokens)
                }
                None => matmul::matmul(pass, w, &io, tokens),
            })?;
            let name = match fused {
                Some(Some(_)) => format!("norm + {name} + GLU"),
                Some(None) => format!("norm + {name}"),
                None => name.to_string(),
            };
            let naive_ms = if tokens == 1 && w.parts.len() == 1 {
                Some(time(m, &step, reps, &|pass| {
                    matmul::naive(pass, w, &x, &y)
                })?)
            } else {
                None
            };
            rows.push(KernelRow {
                name,
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

/// Model-level rates: prefill and decode tokens/s, decode pipelined (each step
/// submitted before the last one's token is read), GPU objects per decode step.
pub struct Rates {
    pub prefill: f64,
    pub decode: f64,
    pub pipelined: f64,
    pub created: u64,
}

/// Prefill tokens/s over a `prompt`-token prompt, decode tokens/s over `steps` (one
/// at a time, then pipelined), and the GPU objects the decode steps created, on the
/// engine's session (its context must hold prompt + steps + 1).
pub fn model(e: &mut Engine, prompt: usize, steps: usize) -> Result<Rates> {
    let gpu_created = e.require_gpu()?.gpu.created.clone();
    let mut s = e.backend()?;
    let created = || gpu_created.load(std::sync::atomic::Ordering::Relaxed);
    let (prefill, decode, created) = prefill_decode(&mut s, prompt, steps, created)?;
    s.truncate(prompt);
    let t = Instant::now();
    s.submit(&[42], greedy())?;
    for _ in 1..steps {
        s.submit(&[], greedy())?;
        pollster::block_on(s.chosen())?;
    }
    pollster::block_on(s.chosen())?;
    let pipelined = steps as f64 / t.elapsed().as_secs_f64();
    Ok(Rates {
        prefill,
        decode,
        pipelined,
        created,
    })
}

/// Prefill and decode tokens/s on any backend (see `model`), and how far `count`
/// moved during the decode steps.
fn prefill_decode(
    s: &mut AnyBackend<'_>,
    prompt: usize,
    steps: usize,
    count: impl Fn() -> u64,
) -> Result<(f64, f64, u64)> {
    let tokens: Vec<u32> = (0..prompt as u32).map(|i| 300 + i * 7 % 1000).collect();
    s.truncate(0);
    // Warm-up: compiles every pipeline both paths use.
    pollster::block_on(s.forward(&tokens[..2], greedy()))?;
    pollster::block_on(s.forward(&tokens[..1], greedy()))?;
    s.truncate(0);
    let t = Instant::now();
    pollster::block_on(s.forward(&tokens, greedy()))?;
    let prefill = prompt as f64 / t.elapsed().as_secs_f64();
    let before = count();
    let t = Instant::now();
    for _ in 0..steps {
        pollster::block_on(s.forward(&[42], greedy()))?;
    }
    let decode = steps as f64 / t.elapsed().as_secs_f64();
    Ok((prefill, decode, count() - before))
}

/// The CPU backend's prefill and decode tokens/s (`pippin bench --cpu`).
pub fn cpu_model(e: &mut Engine, prompt: usize, steps: usize) -> Result<(f64, f64)> {
    let (prefill, decode, _) = prefill_decode(&mut e.backend()?, prompt, steps, || 0)?;
    Ok((prefill, decode))
}

/// The whole model's figures.
pub struct Figures {
    pub adapter: String,
    pub model: String,
    pub layers: usize,
    pub dispatches_per_step: usize,
    pub dispatches_per_layer: f64,
    /// With a decode step's kernels apart (`GpuSession::set_fused(false)`).
    pub unfused_dispatches_per_step: usize,
    pub unfused_dispatches_per_layer: f64,
    pub unfused_decode_tokens_per_s: f64,
    pub objects_per_step: f64,
    pub cpu_us_per_step: f64,
    pub cpu_us_per_step_unrecorded: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    pub pipelined_tokens_per_s: f64,
    pub prompt: usize,
    pub steps: usize,
}

fn greedy() -> Want<'static> {
    Want::top(1)
}

/// Runs the model (`model`), counts the GPU objects its steady decode steps create,
/// and times a step's CPU side on the no-op backend.
pub fn figures(
    e: &mut Engine,
    path: &std::path::Path,
    prompt: usize,
    steps: usize,
) -> Result<Figures> {
    let (total, outside) = e.decode_dispatches()?;
    let layers = e.config().n_layers;
    let rates = model(e, prompt, steps)?;
    // The same run with a decode step's kernels apart (the "before" of fusion).
    e.parts()?.1.set_fused(false);
    let (unfused_total, _) = e.decode_dispatches()?;
    let unfused_decode = model(e, prompt, steps)?.decode;
    e.parts()?.1.set_fused(true);
    let (recorded, unrecorded) = noop_step_us(path)?;
    Ok(Figures {
        adapter: e.require_gpu()?.gpu.adapter.name.clone(),
        model: path.display().to_string(),
        layers,
        dispatches_per_step: total,
        dispatches_per_layer: (total - outside) as f64 / layers as f64,
        unfused_dispatches_per_step: unfused_total,
        unfused_dispatches_per_layer: (unfused_total - outside) as f64 / layers as f64,
        unfused_decode_tokens_per_s: unfused_decode,
        objects_per_step: rates.created as f64 / steps.max(1) as f64,
        cpu_us_per_step: recorded,
        cpu_us_per_step_unrecorded: unrecorded,
        prefill_tokens_per_s: rates.prefill,
        decode_tokens_per_s: rates.decode,
        pipelined_tokens_per_s: rates.pipelined,
        prompt,
        steps,
    })
}

/// µs of CPU per decode step on wgpu's no-op backend (which reports a discrete GPU,
/// so the kernels take a hardware GPU's shapes): replaying the recorded plan, and
/// encoding every dispatch from scratch as before plans.
fn noop_step_us(path: &std::path::Path) -> Result<(f64, f64)> {
    let gpu = pollster::block_on(Gpu::noop())?;
    let so = SessionOptions {
        max_context: 1024,
        ..Default::default()
    };
    let mut e = pollster::block_on(Engine::load_file(gpu, path, so))?;
    let (model, session) = e.parts()?;
    let mut time = |replay: bool| -> Result<f64> {
        session.set_replay(replay);
        session.clear();
        let mut b = pippin::engine::GpuBackend::new(model, session);
        pollster::block_on(b.forward(&[1, 2, 3], greedy()))?;
        for _ in 0..20 {
            pollster::block_on(b.forward(&[42], greedy()))?;
        }
        let n = 400;
        let t = Instant::now();
        for _ in 0..n {
            pollster::block_on(b.forward(&[42], greedy()))?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
    };
    let recorded = time(true)?;
    let unrecorded = time(false)?;
    Ok((recorded, unrecorded))
}

impl Figures {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "adapter": self.adapter,
            "model": self.model,
            "layers": self.layers,
            "decode": {
                "dispatches_per_step": self.dispatches_per_step,
                "dispatches_per_layer": self.dispatches_per_layer,
                "gpu_objects_created_per_step": self.objects_per_step,
                "cpu_us_per_step": self.cpu_us_per_step,
                "cpu_us_per_step_unrecorded": self.cpu_us_per_step_unrecorded,
                "tokens_per_s": self.decode_tokens_per_s,
                "pipelined_tokens_per_s": self.pipelined_tokens_per_s,
                "steps": self.steps,
                "unfused": {
                    "dispatches_per_step": self.unfused_dispatches_per_step,
                    "dispatches_per_layer": self.unfused_dispatches_per_layer,
                    "tokens_per_s": self.unfused_decode_tokens_per_s,
                },
            },
            "prefill": {
                "tokens_per_s": self.prefill_tokens_per_s,
                "prompt_tokens": self.prompt,
            },
        })
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "whole model: prefill {:.1} tokens/s ({}-token prompt), decode {:.1} tokens/s ({} steps), pipelined {:.1} tokens/s",
            self.prefill_tokens_per_s,
            self.prompt,
            self.decode_tokens_per_s,
            self.steps,
            self.pipelined_tokens_per_s
        )?;
        writeln!(
            f,
            "decode step: {} dispatches ({:.1} per layer), {} GPU objects created per step",
            self.dispatches_per_step, self.dispatches_per_layer, self.objects_per_step
        )?;
        writeln!(
            f,
            "decode with its kernels apart (unfused): {} dispatches ({:.1} per layer), {:.1} tokens/s",
            self.unfused_dispatches_per_step,
            self.unfused_dispatches_per_layer,
            self.unfused_decode_tokens_per_s
        )?;
        write!(
            f,
            "CPU per decode step on the no-op backend: {:.0} µs recorded plan, {:.0} µs encoded from scratch ({:.1}×)",
            self.cpu_us_per_step,
            self.cpu_us_per_step_unrecorded,
            self.cpu_us_per_step_unrecorded / self.cpu_us_per_step
        )
    }
}
