//! WGSL kernels: shader sources, the pipeline cache and one launcher per kernel, each
//! beside the CPU reference it is tested against. Shapes are specialized with
//! `override` constants; the only preprocessing is `#include` of the shared files (the
//! step uniform, weight and KV-cache decoding, the matmul epilogue, the format ids
//! build.rs generates), and a kernel's bindings are read from its WGSL by build.rs.

pub mod attention;
pub mod elementwise;
pub mod matmul;
pub mod sample;
pub mod short_conv;
pub mod stacked;

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

// `Shader`: a variant per kernel file, its source and bindings (see build.rs).
include!(concat!(env!("OUT_DIR"), "/shaders.rs"));

/// `src` after `prelude` (the `enable` directives the platform needs), each `#include`
/// line replaced by the file it names (once per kernel; build.rs read the kernel's
/// bindings with the same files in). The files are embedded once, not per kernel.
pub fn preprocess(src: &str, prelude: &str) -> Result<String> {
    fn splice(src: &str, out: &mut String, seen: &mut Vec<&'static str>) -> Result<()> {
        for line in src.lines() {
            let Some(name) = line.strip_prefix("#include ") else {
                out.push_str(line);
                out.push('\n');
                continue;
            };
            let name = name.trim().trim_matches('"');
            let text = include(name)
                .ok_or_else(|| Error::internal(format!("no WGSL file {name} to include")))?;
            if !seen.contains(&text) {
                seen.push(text);
                splice(text, out, seen)?;
            }
        }
        Ok(())
    }
    let mut out = String::with_capacity(src.len() + 16384);
    out.push_str(prelude);
    splice(src, &mut out, &mut Vec::new())?;
    Ok(out)
}

/// How a kernel uses a binding (build.rs reads it from the WGSL declaration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    Uniform,
    Read,
    Write,
}

pub struct Pipe {
    pub pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    /// Whose pipeline it is (errors name the kernel and its bindings).
    shader: Shader,
}

/// A buffer a launch binds, and the bytes the launch's shapes reach in it: checked
/// against the buffer's size when the dispatch is recorded (a plan replays what was
/// checked), so a launcher given a buffer too small for its shapes fails with an
/// error naming the kernel and the binding instead of reading or writing past it.
#[derive(Clone, Copy)]
pub struct Bind<'a> {
    pub buf: &'a wgpu::Buffer,
    /// Bytes from the start the launch can touch (0: its shapes do not bound it, as
    /// for the step's uniform, which every step kernel binds whole).
    pub reach: u64,
}

impl<'a> Bind<'a> {
    /// `n` f32 (or u32) values.
    pub fn f32s(buf: &'a wgpu::Buffer, n: usize) -> Self {
        Bind {
            buf,
            reach: 4 * n as u64,
        }
    }

    /// Rows of `width` values at `stride` for `rows` tokens, the first at `offset`:
    /// up to the last row's end.
    pub fn rows(
        buf: &'a wgpu::Buffer,
        rows: usize,
        stride: usize,
        offset: usize,
        width: usize,
    ) -> Self {
        let last = rows.saturating_sub(1) * stride;
        Self::f32s(buf, last + offset + width)
    }
}

impl<'a> From<&'a wgpu::Buffer> for Bind<'a> {
    /// A buffer the launch's shapes do not bound (a uniform, a matrix's own parts).
    fn from(buf: &'a wgpu::Buffer) -> Self {
        Bind { buf, reach: 0 }
    }
}

struct Module {
    module: wgpu::ShaderModule,
    layout: wgpu::BindGroupLayout,
    pipeline_layout: wgpu::PipelineLayout,
}

type PipeKey = (Shader, Vec<(&'static str, u64)>);

/// How the kernels are specialized for this adapter.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// Threads per row in the GEMV (a power of two).
    pub gemv_tpr: u32,
    /// Use the subgroup GEMV with this subgroup size (0 = off).
    pub subgroup_size: u32,
    /// Prefill matmuls with one thread per row (software adapters) instead of tiles.
    pub rowwise_gemm: bool,
}

impl Tuning {
    /// Software adapters run workgroups on CPU SIMD lanes: one thread per row wins
    /// there, and emulated subgroups are slower (measured on lavapipe:
    /// docs/performance.md).
    pub fn software() -> Tuning {
        Tuning {
            gemv_tpr: 1,
            subgroup_size: 0,
            rowwise_gemm: true,
        }
    }

    /// GPUs: 16 threads share a GEMV row, prefill runs in tiles, and the subgroup
    /// GEMV runs where the adapter reports a fixed `subgroup_size` (0: none).
    pub fn gpu(subgroup_size: u32) -> Tuning {
        Tuning {
            gemv_tpr: 16,
            subgroup_size,
            rowwise_gemm: false,
        }
    }
}

/// How many workgroups a recorded dispatch runs.
#[derive(Clone, Copy, Debug)]
pub enum Groups {
    Fixed([u32; 3]),
    /// `[x, step.n_splits, 1]`: flash-decoding's splits grow with the KV length.
    Splits(u32),
}

/// One recorded dispatch: everything it binds was created when it was recorded.
#[derive(Clone)]
struct Recorded {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    groups: Groups,
}

/// A compute pass being encoded, and the plan its dispatches are also kept in while
/// one is recorded (`Kernels::record`): launchers take this, so what records a plan is
/// passed down with the pass, never looked up.
pub struct Pass<'a, 'e> {
    /// The kernels the launchers take their pipelines from.
    pub kernels: &'a Kernels,
    /// The step's uniform (`step.wgsl`) every step kernel binds first.
    pub step: &'a wgpu::Buffer,
    inner: &'a mut wgpu::ComputePass<'e>,
    plan: Option<&'a mut Vec<Recorded>>,
    /// Whether bindings are checked against the launches' shapes: not on a shadow
    /// device, whose buffers are placeholders (`Gpu::shadow`).
    checked: bool,
}

impl<'a, 'e> Pass<'a, 'e> {
    /// Dispatches of `kernels` for the step in `step` into `inner`, recording none.
    pub fn new(
        kernels: &'a Kernels,
        step: &'a wgpu::Buffer,
        inner: &'a mut wgpu::ComputePass<'e>,
    ) -> Self {
        Pass {
            kernels,
            step,
            inner,
            plan: None,
            checked: true,
        }
    }
}

/// Dispatches recorded once and replayed: a decode step sets a pipeline and a bind
/// group per dispatch and creates nothing.
#[derive(Clone, Default)]
pub struct Plan {
    steps: Vec<Recorded>,
}

impl Plan {
    /// Records dispatches `range` of the plan into `pass` (a step is submitted whole or
    /// in two parts); `n_splits` sizes the flash-decoding dispatches.
    pub fn replay_range(
        &self,
        pass: &mut wgpu::ComputePass,
        n_splits: u32,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        let n = self.steps.len();
        let steps = self.steps.get(range.clone()).ok_or_else(|| {
            Error::internal(format!("dispatches {range:?} of a plan of {n} replayed"))
        })?;
        for r in steps {
            let [x, y, z] = match r.groups {
                Groups::Fixed(g) => g,
                Groups::Splits(x) => [x, n_splits.max(1), 1],
            };
            pass.set_pipeline(&r.pipeline);
            pass.set_bind_group(0, &r.bind_group, &[]);
            pass.dispatch_workgroups(x, y, z);
        }
        Ok(())
    }

    /// This plan, then `next`'s dispatches.
    pub fn extend(&mut self, next: Plan) {
        self.steps.extend(next.steps);
    }

    /// Dispatches per replay.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// Compiled shaders and specialized pipelines, created on first use and kept.
pub struct Kernels {
    pub tuning: Tuning,
    prelude: &'static str,
    device: wgpu::Device,
    modules: Mutex<HashMap<Shader, Arc<Module>>>,
    pipes: Mutex<HashMap<PipeKey, Arc<Pipe>>>,
    /// The device's count of created objects (see `Gpu::created`).
    created: Arc<AtomicU64>,
}

/// `PIPPIN_KERNELS=gpu` or `=software` (the `dev` feature: tests and the CLI): the GPU
/// kernels then run, and are tested, on lavapipe.
#[cfg(feature = "dev")]
fn forced_software() -> Option<bool> {
    match std::env::var("PIPPIN_KERNELS").ok()?.as_str() {
        "gpu" => Some(false),
        "software" => Some(true),
        _ => None,
    }
}

/// `PIPPIN_GEMV_TPR` (the `dev` feature): the GEMV's threads per row, for measuring
/// other shapes on new hardware.
#[cfg(feature = "dev")]
fn forced_gemv_tpr() -> Option<u32> {
    let t = std::env::var("PIPPIN_GEMV_TPR").ok()?.parse::<u32>().ok()?;
    Some(t.next_power_of_two().clamp(1, 256))
}

impl Kernels {
    /// The kernels this adapter runs best: `Tuning::software` on software adapters,
    /// `Tuning::gpu` on GPUs.
    pub fn new(gpu: &Gpu) -> Self {
        let software = gpu.adapter.software;
        #[cfg(feature = "dev")]
        let software = forced_software().unwrap_or(software);
        let tuning = if software {
            Tuning::software()
        } else {
            Tuning::gpu(gpu.adapter.subgroup_size)
        };
        #[cfg(feature = "dev")]
        let tuning = Tuning {
            gemv_tpr: forced_gemv_tpr().unwrap_or(tuning.gemv_tpr),
            ..tuning
        };
        Self::with_tuning(gpu, tuning)
    }

    pub fn with_tuning(gpu: &Gpu, tuning: Tuning) -> Self {
        Kernels {
            tuning,
            prelude: gpu.shader_prelude(),
            device: gpu.device.clone(),
            modules: Default::default(),
            pipes: Default::default(),
            created: gpu.created.clone(),
        }
    }

    /// Pipelines compiled so far (distinct shader and constants).
    pub fn pipelines(&self) -> usize {
        self.pipes.lock().map_or(0, |p| p.len())
    }

    fn count(&self, n: u64) {
        self.created.fetch_add(n, Ordering::Relaxed);
    }

    /// Runs `f`, which encodes dispatches for the step in `step` into a pass, and
    /// keeps them as a `Plan`. The pass `f` gets is a throwaway one (its commands are
    /// never submitted). `on` is the device the buffers are on: a shadow's
    /// placeholders are not checked against the launches' shapes.
    pub fn record(
        &self,
        on: &Gpu,
        step: &wgpu::Buffer,
        f: impl FnOnce(&mut Pass) -> Result<()>,
    ) -> Result<Plan> {
        let mut enc = self.device.create_command_encoder(&Default::default());
        let mut pass = enc.begin_compute_pass(&Default::default());
        let mut steps = Vec::new();
        f(&mut Pass {
            kernels: self,
            step,
            inner: &mut pass,
            plan: Some(&mut steps),
            checked: !on.is_shadow(),
        })?;
        Ok(Plan { steps })
    }

    fn module(&self, shader: Shader) -> Result<Arc<Module>> {
        let mut modules = self
            .modules
            .lock()
            .map_err(|_| Error::gpu("kernel cache poisoned"))?;
        if let Some(m) = modules.get(&shader) {
            return Ok(m.clone());
        }
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(&format!("{shader:?}")),
                source: wgpu::ShaderSource::Wgsl(preprocess(shader.source(), self.prelude)?.into()),
            });
        let entries: Vec<wgpu::BindGroupLayoutEntry> = shader
            .bindings()
            .iter()
            .enumerate()
            .map(|(i, (u, _))| wgpu::BindGroupLayoutEntry {
                binding: i as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: match u {
                        Use::Uniform => wgpu::BufferBindingType::Uniform,
                        Use::Read => wgpu::BufferBindingType::Storage { read_only: true },
                        Use::Write => wgpu::BufferBindingType::Storage { read_only: false },
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let layout = self
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(&format!("{shader:?}")),
                entries: &entries,
            });
        let pipeline_layout = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(&format!("{shader:?}")),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
        self.count(3);
        let m = Arc::new(Module {
            module,
            layout,
            pipeline_layout,
        });
        modules.insert(shader, m.clone());
        Ok(m)
    }

    /// The pipeline of `shader` specialized with `constants` (override name, value).
    pub fn pipe(&self, shader: Shader, constants: &[(&'static str, f64)]) -> Result<Arc<Pipe>> {
        let key: PipeKey = (
            shader,
            constants.iter().map(|(k, v)| (*k, v.to_bits())).collect(),
        );
        if let Some(p) = self
            .pipes
            .lock()
            .map_err(|_| Error::gpu("kernel cache poisoned"))?
            .get(&key)
        {
            return Ok(p.clone());
        }
        let m = self.module(shader)?;
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&format!("{shader:?}")),
                layout: Some(&m.pipeline_layout),
                module: &m.module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants,
                    // Every kernel writes its workgroup memory before reading it.
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        self.count(1);
        let pipe = Arc::new(Pipe {
            pipeline,
            layout: m.layout.clone(),
            shader,
        });
        self.pipes
            .lock()
            .map_err(|_| Error::gpu("kernel cache poisoned"))?
            .insert(key, pipe.clone());
        Ok(pipe)
    }

    /// Records one dispatch: binding i is `buffers[i]`, each checked to hold what the
    /// launch reaches in it.
    pub fn dispatch(
        &self,
        pass: &mut Pass,
        pipe: &Pipe,
        buffers: &[Bind],
        groups: [u32; 3],
    ) -> Result<()> {
        self.dispatch_groups(pass, pipe, buffers, Groups::Fixed(groups), groups[1])
    }

    /// As `dispatch`, with workgroups a plan may size at replay (`y` is what they are
    /// now).
    pub fn dispatch_groups(
        &self,
        pass: &mut Pass,
        pipe: &Pipe,
        buffers: &[Bind],
        groups: Groups,
        y: u32,
    ) -> Result<()> {
        if pass.checked {
            check_bindings(pipe.shader, buffers)?;
        }
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.buf.as_entire_binding(),
            })
            .collect();
        let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipe.layout,
            entries: &entries,
        });
        self.count(1);
        if let Some(plan) = pass.plan.as_deref_mut() {
            plan.push(Recorded {
                pipeline: pipe.pipeline.clone(),
                bind_group: bg.clone(),
                groups,
            });
        }
        let [x, _, z] = match groups {
            Groups::Fixed(g) => g,
            Groups::Splits(x) => [x, 1, 1],
        };
        pass.inner.set_pipeline(&pipe.pipeline);
        pass.inner.set_bind_group(0, &bg, &[]);
        pass.inner.dispatch_workgroups(x, y, z);
        Ok(())
    }
}

/// One buffer per binding of `shader`, each as large as the launch reaches.
fn check_bindings(shader: Shader, buffers: &[Bind]) -> Result<()> {
    let decl = shader.bindings();
    if buffers.len() != decl.len() {
        return Err(Error::internal(format!(
            "kernel {shader:?}: {} buffers bound to its {} bindings",
            buffers.len(),
            decl.len()
        )));
    }
    for (i, (b, (_, name))) in buffers.iter().zip(decl).enumerate() {
        if b.buf.size() < b.reach {
            return Err(Error::internal(format!(
                "kernel {shader:?}: binding {i} ({name}) holds {} bytes, its shapes reach {}",
                b.buf.size(),
                b.reach
            )));
        }
    }
    Ok(())
}

/// Workgroups for `n` as (x, y) under the 65,535-per-dimension limit.
pub fn grid(n: u32) -> [u32; 3] {
    if n <= 65_535 {
        [n.max(1), 1, 1]
    } else {
        [65_535, n.div_ceil(65_535), 1]
    }
}

/// The per-step values every kernel reads from its uniform (binding 0), with the
/// per-call choices a decode step needs (candidates kept, repetition penalty, how
/// `choose.wgsl` picks the next token).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Step {
    pub n_tokens: u32,
    pub pos0: u32,
    pub kv_len: u32,
    pub n_splits: u32,
    /// Candidates `top_k.wgsl` keeps (1 = greedy).
    pub top_k: u32,
    /// The repetition penalty `penalty.wgsl` applies (1 = none).
    pub penalty: f32,
    /// 1: the step's input token (chosen on the GPU by the step before, unknown to
    /// the CPU) is penalized too, besides the listed ids.
    pub penalize_input: u32,
    /// Sampling temperature (0 = greedy), top-p (1 = off), min-p (0 = off).
    pub temperature: f32,
    pub top_p: f32,
    pub min_p: f32,
    /// The step's uniform draw in [0, 1), from the sampler's seeded generator.
    pub u: f32,
    /// 1: `top_k.wgsl` keeps only tokens whose bit is set in its mask (guided
    /// generation).
    pub masked: u32,
}

impl Step {
    pub fn new(n_tokens: usize, pos0: usize) -> Step {
        let kv_len = (pos0 + n_tokens) as u32;
        Step {
            n_tokens: n_tokens as u32,
            pos0: pos0 as u32,
            kv_len,
            n_splits: kv_len.div_ceil(attention::CHUNK),
            top_k: 1,
            penalty: 1.0,
            penalize_input: 0,
            temperature: 0.0,
            top_p: 1.0,
            min_p: 0.0,
            u: 0.0,
            masked: 0,
        }
    }
}
