//! The model's weights on the GPU, uploaded slice by slice as they stream from the
//! GGUF reader (`gguf::Window`: the file is read front to back once; neither it nor a
//! matrix is ever whole in memory).

use crate::error::{Error, Result};
use crate::gguf::{read_streamed_header, ByteSource, Gguf, Progress, TensorInfo, Window};
use crate::gpu::Gpu;
use crate::kernels::matmul::GpuMatrix;
use crate::kernels::stacked::Stacked;
use crate::kernels::{attention, Kernels};
use crate::model::arch::block::Projs;
use crate::model::weights::{decodable, roles, Layer, Role, Tensor, TensorSpec};
use crate::model::{Config, Proj, Weights};
use crate::quant::{self, gpu_layout};
use std::collections::HashMap;
use std::sync::Arc;

mod shadow;

/// One layer's weights on the GPU; matrices are `[rows = outputs][cols = inputs]`,
/// vectors f32.
pub struct GpuLayer {
    /// `[hidden]`.
    pub attn_norm: wgpu::Buffer,
    /// `[q_dim + 2·kv_dim][hidden]` [Q; K; V]: one matrix whose output is a qkv row,
    /// when their formats allow (a convolution's `[3·hidden][hidden]` B; C; x).
    pub qkv: Stacked,
    /// `[hidden][q_dim]` (a convolution's out_proj: `[hidden][hidden]`).
    pub wo: GpuMatrix,
    /// `[hidden]`.
    pub ffn_norm: wgpu::Buffer,
    /// `[2·ffn][hidden]` [gate; up]: one matrix whose output is a [gate | up] row,
    /// when formats allow.
    pub gate_up: Stacked,
    /// `[hidden][ffn]`.
    pub down: GpuMatrix,
    /// `[2][head_dim]`: the QK-norm's weights, q's then k's.
    pub qk_norm: Option<wgpu::Buffer>,
    /// `[hidden]` each: Gemma's norms of the attention and MLP outputs (before the
    /// residual adds).
    pub post_norms: Option<(wgpu::Buffer, wgpu::Buffer)>,
    /// Each group of projections' biases as one row of its output (`Projs::index`
    /// order; zeros for a member without one): Qwen2's `[q_dim + 2·kv_dim]` Q|K|V.
    pub biases: [Option<wgpu::Buffer>; 4],
    /// `[hidden][taps]`: a convolution layer's taps (LFM2; its Q, K, V are B, C, x
    /// and O its out_proj).
    pub conv: Option<wgpu::Buffer>,
}

impl GpuLayer {
    /// Layer `i` in the GPU's form: Q|K|V and gate|up stacked where their formats
    /// allow, the QK-norms side by side, each group's biases as one row.
    fn new(gpu: &Gpu, c: &Config, i: usize, l: Layer<GpuMatrix, GpuVector>) -> Result<GpuLayer> {
        let mut biases = [None, None, None, None];
        for ps in Projs::ALL {
            let bias = |p: Proj| l.biases[p].as_ref().map(|b| &b.1[..]);
            biases[ps.index()] = group_bias(gpu, c, ps, bias)?;
        }
        let qk_norm = match (&l.q_norm, &l.k_norm) {
            (Some(q), Some(k)) => Some(gpu.upload_f32("QK-norm", &[&q.1[..], &k.1[..]].concat())?),
            _ => None,
        };
        let post_norms = match (l.post_attn_norm, l.post_ffn_norm) {
            (Some(a), Some(f)) => Some((a.0, f.0)),
            _ => None,
        };
        let [wq, wk, wv, wo, gate, up, down] = l.proj.0;
        Ok(GpuLayer {
            attn_norm: l.attn_norm.0,
            qkv: Stacked::stack(gpu, &format!("blk.{i}.qkv"), vec![wq, wk, wv])?,
            wo,
            ffn_norm: l.ffn_norm.0,
            gate_up: Stacked::stack(gpu, &format!("blk.{i}.gate_up"), vec![gate, up])?,
            down,
            qk_norm,
            post_norms,
            biases,
            conv: l.conv.map(|(b, _)| b),
        })
    }

    /// The biases of group `ps`'s outputs, if any member has one.
    pub fn bias(&self, ps: Projs) -> Option<&wgpu::Buffer> {
        self.biases[ps.index()].as_ref()
    }
}

/// Device, kernels and weights: what every session of one model shares.
pub struct GpuModel {
    pub gpu: Gpu,
    /// Shared with the shadow model the loader compiles from (`shadow::precompile`).
    pub kernels: Arc<Kernels>,
    pub config: Config,
    pub embed: GpuMatrix,
    /// `None` when the output head is the embedding (tied).
    pub head: Option<GpuMatrix>,
    pub output_norm: wgpu::Buffer,
    pub layers: Vec<GpuLayer>,
    /// Llama 3's per-frequency RoPE divisors (`rope_freqs.weight`), when present.
    pub rope_factors: Option<Vec<f32>>,
    pub weight_bytes: u64,
    /// Milliseconds the load spent compiling pipelines from the header, before the
    /// weights (0 when it was not given session options).
    pub header_compile_ms: f64,
    /// The bytes of the adapter the file carries (its recovery adapter), for the
    /// engine to parse and upload; taken by it.
    pub adapter_tensors: crate::adapters::recovery::Tensors,
}

/// A vector on the GPU and its values (the RoPE factors are the CPU's, the QK-norms
/// and biases are put side by side).
pub type GpuVector = (wgpu::Buffer, Vec<f32>);

pub(super) enum Uploaded {
    Matrix(GpuMatrix),
    Vector(wgpu::Buffer, Vec<f32>),
}

/// GGUF bytes of a matrix read and written to the GPU at once: the heap holds about
/// two slices (the stream's and its packed words), never a whole tensor.
const SLICE_BYTES: usize = 4 << 20;

/// A matrix streamed to the GPU slice by slice from `w` as its bytes arrive.
async fn stream_matrix<S: ByteSource>(
    gpu: &Gpu,
    w: &mut Window<'_, S>,
    start: u64,
    t: &TensorInfo,
    s: &TensorSpec,
    progress: Progress<'_>,
) -> Result<GpuMatrix> {
    decodable(t)?;
    let shape = (s.rows, s.cols);
    let mut out = GpuMatrix::writer(gpu, &t.name, t.ty, shape, gpu.max_binding())?;
    if (out.row_bytes() * s.rows) as u64 != t.n_bytes {
        return Err(Error::gguf(format!(
            "tensor {:?} has {} bytes, not {} rows of {}",
            t.name,
            t.n_bytes,
            s.rows,
            out.row_bytes()
        )));
    }
    while let Some(rows) = out.next_rows(SLICE_BYTES) {
        let at = start + (rows.start * out.row_bytes()) as u64;
        let bytes = w
            .take(t.shard, at, (rows.len() * out.row_bytes()) as u64, &t.name)
            .await?;
        out.write(gpu, rows, &bytes)?;
        gpu.take_error()?;
        progress(w.read(), w.total().unwrap_or(0));
    }
    out.finish()
}

/// A norm or other vector: small, kept whole (the CPU keeps a copy too).
fn upload_vector(gpu: &Gpu, t: &TensorInfo, bytes: &[u8]) -> Result<Uploaded> {
    decodable(t)?;
    let v = quant::dequantize(t.ty, bytes, t.n_elements as usize)?;
    Ok(Uploaded::Vector(gpu.upload_f32(&t.name, &v)?, v))
}

/// Halves of palettized weights waiting for their other half, by weight name.
#[derive(Default)]
struct Palettes {
    indices: HashMap<String, (Vec<u8>, u32, usize)>,
    tables: HashMap<String, Vec<u8>>,
}

impl Palettes {
    /// Takes one half; uploads the weight once both have arrived.
    fn add(
        &mut self,
        gpu: &Gpu,
        role: &Role,
        bytes: Vec<u8>,
    ) -> Result<Option<(String, Uploaded)>> {
        let s = match role {
            Role::Indices(s, bits, rows) => {
                self.indices.insert(s.name.clone(), (bytes, *bits, *rows));
                s
            }
            Role::Tables(s) => {
                self.tables.insert(s.name.clone(), bytes);
                s
            }
            Role::Whole(_) | Role::Adapter => return Ok(None),
        };
        if !(self.indices.contains_key(&s.name) && self.tables.contains_key(&s.name)) {
            return Ok(None);
        }
        let missing = || Error::internal(format!("{}: a palette's half went missing", s.name));
        let (idx, bits, rows_per_lut) = self.indices.remove(&s.name).ok_or_else(missing)?;
        let lut = self.tables.remove(&s.name).ok_or_else(missing)?;
        let packed = gpu_layout::pack_palette_bytes(bits, rows_per_lut, &idx, &lut)?;
        let m = GpuMatrix::from_packed(gpu, &s.name, packed, s.rows, s.cols)?;
        Ok(Some((s.name.clone(), Uploaded::Matrix(m))))
    }
}

impl GpuModel {
    /// Parses the header and uploads the model from a byte stream as the bytes arrive:
    /// matrices slice by slice (`SLICE_BYTES`), so the heap does not grow with the
    /// model; a palettized weight's two halves are held until both are in.
    /// `progress(bytes read, total)` is called as the stream is consumed.
    pub async fn load_from<S: ByteSource>(
        gpu: Gpu,
        src: &mut S,
        progress: Progress<'_>,
    ) -> Result<(GpuModel, Gguf)> {
        Self::load_checked(gpu, src, progress, &mut |_| Ok(()), None).await
    }

    /// As `load_from`, with `check(header)` run before any weight is read (the caller
    /// builds the tokenizer there): a file that cannot be used fails before its
    /// weights are downloaded and uploaded. With `session`, every pipeline a session
    /// of those options runs is compiled from the header too, before the weights are
    /// read (`shadow::precompile`): in the browser the GPU process compiles them while
    /// the bytes download, and the first reply finds them ready.
    pub async fn load_checked<S: ByteSource>(
        gpu: Gpu,
        src: &mut S,
        progress: Progress<'_>,
        check: &mut dyn FnMut(&Gguf) -> Result<()>,
        session: Option<&crate::engine::backend::SessionOptions>,
    ) -> Result<(GpuModel, Gguf)> {
        let total = src.total_len();
        let mut w = Window::new(src);
        let gguf = read_streamed_header(&mut w, progress).await?;
        let config = Config::from_gguf(&gguf)?;
        attention::check_shape(&config)?;
        let mut reads = roles(&gguf, &config)?;
        crate::adapters::recovery::add_reads(&gguf, &mut reads);
        check(&gguf)?;
        // Natively `Kernels` is Send + Sync (sessions on other threads share a model);
        // wgpu's browser types are not, and there the model has one thread.
        #[allow(clippy::arc_with_non_send_sync)]
        let kernels = Arc::new(Kernels::new(&gpu));
        let t0 = web_time::Instant::now();
        if let Some(opts) = session {
            shadow::precompile(&gpu, &kernels, &config, &reads, opts)?;
        }
        let header_compile_ms = t0.elapsed().as_secs_f64() * 1000.0;
        let roles = &reads.roles;
        let mut up: HashMap<String, Uploaded> = HashMap::new();
        let mut palettes = Palettes::default();
        let mut adapter_tensors = crate::adapters::recovery::Tensors::new();
        for t in &reads.tensors {
            let start = gguf.start(t);
            if let Role::Whole(s) = &roles[&t.name] {
                if s.matrix {
                    let m = stream_matrix(&gpu, &mut w, start, t, s, progress).await?;
                    up.insert(t.name.clone(), Uploaded::Matrix(m));
                    continue;
                }
            }
            let bytes = w.take(t.shard, start, t.n_bytes, &t.name).await?;
            match &roles[&t.name] {
                Role::Whole(_) => {
                    up.insert(t.name.clone(), upload_vector(&gpu, t, &bytes)?);
                }
                Role::Adapter => {
                    adapter_tensors.insert(t.name.clone(), (t.ty, bytes));
                }
                role => {
                    if let Some((name, m)) = palettes.add(&gpu, role, bytes)? {
                        up.insert(name, m);
                    }
                }
            }
            gpu.take_error()?;
            progress(w.read(), total.unwrap_or(0));
        }
        let mut model = Self::assemble(gpu, kernels, config, up)?;
        model.header_compile_ms = header_compile_ms;
        model.adapter_tensors = adapter_tensors;
        Ok((model, gguf))
    }

    /// Opens and uploads a GGUF file (every file of a split model, given its first).
    pub async fn load_file(
        gpu: Gpu,
        path: &std::path::Path,
        progress: Progress<'_>,
    ) -> Result<(GpuModel, Gguf)> {
        let mut src = crate::gguf::split::open_files(path)?;
        Self::load_from(gpu, &mut src, progress).await
    }

    /// The uploaded tensors as the model's layers (`Weights::assemble`, the one
    /// assembly by role), each then put in the GPU's form (`GpuLayer::new`).
    fn assemble(
        gpu: Gpu,
        kernels: Arc<Kernels>,
        config: Config,
        mut up: HashMap<String, Uploaded>,
    ) -> Result<GpuModel> {
        let w = Weights::assemble(&config, |s| match up.remove(&s.name) {
            Some(Uploaded::Matrix(m)) => Ok(Tensor::Matrix(m)),
            Some(Uploaded::Vector(b, v)) => Ok(Tensor::Vector((b, v))),
            None => Err(Error::internal(format!("tensor {} was not read", s.name))),
        })?;
        let layers = (w.layers.into_iter().enumerate())
            .map(|(i, l)| GpuLayer::new(&gpu, &config, i, l))
            .collect::<Result<Vec<_>>>()?;
        let (embed, head) = (w.token_embd, w.output);
        let output_norm = w.output_norm.0;
        let rope_factors = w.rope_freqs.map(|(_, v)| v);
        let weight_bytes = layers
            .iter()
            .map(|l| l.qkv.bytes() + l.wo.bytes() + l.gate_up.bytes() + l.down.bytes())
            .chain(
                [&embed]
                    .into_iter()
                    .chain(head.as_ref())
                    .map(GpuMatrix::bytes),
            )
            .sum();
        Ok(GpuModel {
            gpu,
            kernels,
            config,
            embed,
            head,
            output_norm,
            layers,
            rope_factors,
            weight_bytes,
            header_compile_ms: 0.0,
            adapter_tensors: Default::default(),
        })
    }

    pub fn head(&self) -> &GpuMatrix {
        self.head.as_ref().unwrap_or(&self.embed)
    }
}

/// The biases of a group of projections as one row of the group's output (zeros for a
/// member without one), or `None` when no member has one.
fn group_bias<'a>(
    gpu: &Gpu,
    c: &Config,
    ps: Projs,
    bias: impl Fn(Proj) -> Option<&'a [f32]>,
) -> Result<Option<wgpu::Buffer>> {
    let mut row = Vec::new();
    let mut any = false;
    for &p in ps.members() {
        match bias(p) {
            Some(b) => {
                any = true;
                row.extend_from_slice(b);
            }
            None => row.resize(row.len() + p.shape(c).0, 0.0),
        }
    }
    any.then(|| gpu.upload_f32("bias", &row)).transpose()
}
