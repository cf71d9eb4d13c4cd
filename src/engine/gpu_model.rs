//! The model's weights on the GPU, uploaded tensor by tensor as they stream from the
//! GGUF reader (the file is read front to back once and never held whole).

use crate::error::{Error, Result};
use crate::gguf::{Gguf, TensorStream};
use crate::gpu::Gpu;
use crate::kernels::matmul::GpuMatrix;
use crate::kernels::{attention, Kernels};
use crate::model::reference::rope_freqs;
use crate::model::weights::{find, global_specs, layer_specs, TensorSpec};
use crate::model::Config;
use crate::quant;
use std::collections::HashMap;
use std::io::Read;

pub struct GpuLayer {
    pub attn_norm: wgpu::Buffer,
    pub wq: GpuMatrix,
    pub wk: GpuMatrix,
    pub wv: GpuMatrix,
    pub wo: GpuMatrix,
    pub ffn_norm: wgpu::Buffer,
    pub gate: GpuMatrix,
    pub up: GpuMatrix,
    pub down: GpuMatrix,
    pub qk_norm: Option<(wgpu::Buffer, wgpu::Buffer)>,
}

/// Device, kernels and weights: what every session of one model shares.
pub struct GpuModel {
    pub gpu: Gpu,
    pub kernels: Kernels,
    pub config: Config,
    pub embed: GpuMatrix,
    /// `None` when the output head is the embedding (tied).
    pub head: Option<GpuMatrix>,
    pub output_norm: wgpu::Buffer,
    pub layers: Vec<GpuLayer>,
    /// Inverse RoPE frequencies (with Llama 3 factors when the model has them).
    pub rope_freqs: Vec<f32>,
    pub weight_bytes: u64,
}

enum Uploaded {
    Matrix(GpuMatrix),
    Vector(wgpu::Buffer, Vec<f32>),
}

/// Loading progress: bytes of tensor data read so far, and in all.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

impl GpuModel {
    /// Uploads the model whose header is `gguf`, reading tensor data from `r`, which
    /// must be positioned at `gguf.header_len` (just after the header).
    pub fn load<R: Read>(gpu: Gpu, gguf: &Gguf, r: R, progress: Progress) -> Result<GpuModel> {
        let config = Config::from_gguf(gguf)?;
        attention::check_shape(&config)?;
        let mut specs: HashMap<String, TensorSpec> = HashMap::new();
        for s in global_specs(&config)
            .into_iter()
            .chain((0..config.n_layers).flat_map(|i| layer_specs(&config, i)))
        {
            find(gguf, &s)?; // every tensor present, with its shape, before any upload
            specs.insert(s.name.clone(), s);
        }
        let total: u64 = gguf
            .tensors
            .iter()
            .filter(|t| specs.contains_key(&t.name))
            .map(|t| t.n_bytes)
            .sum();
        let mut done = 0;
        let mut up: HashMap<String, Uploaded> = HashMap::new();
        let mut stream = TensorStream::new(gguf, r);
        while let Some((t, bytes)) = stream.next_tensor()? {
            let Some(s) = specs.get(&t.name) else {
                continue;
            };
            let item = if s.rows == 1 {
                let v = quant::dequantize(t.ty, &bytes, t.n_elements as usize)?;
                Uploaded::Vector(gpu.upload_f32(&t.name, &v)?, v)
            } else {
                Uploaded::Matrix(GpuMatrix::upload(
                    &gpu, &t.name, t.ty, &bytes, s.rows, s.cols,
                )?)
            };
            gpu.take_error()?;
            up.insert(t.name.clone(), item);
            done += t.n_bytes;
            progress(done, total);
        }
        Self::assemble(gpu, config, up)
    }

    fn assemble(gpu: Gpu, config: Config, mut up: HashMap<String, Uploaded>) -> Result<GpuModel> {
        let mut take = |name: &str| {
            up.remove(name)
                .ok_or_else(|| Error::gguf(format!("tensor {name} was not read")))
        };
        let matrix = |u: Uploaded| match u {
            Uploaded::Matrix(m) => m,
            Uploaded::Vector(..) => unreachable!("matrix specs have rows > 1"),
        };
        let vector = |u: Uploaded| match u {
            Uploaded::Vector(b, v) => (b, v),
            Uploaded::Matrix(_) => unreachable!("vector specs have one row"),
        };
        let embed = matrix(take("token_embd.weight")?);
        let output_norm = vector(take("output_norm.weight")?).0;
        let head = if config.tied_embeddings {
            None
        } else {
            Some(matrix(take("output.weight")?))
        };
        let factors = if config.rope_freq_factors {
            Some(vector(take("rope_freqs.weight")?).1)
        } else {
            None
        };
        let mut layers = Vec::with_capacity(config.n_layers);
        for i in 0..config.n_layers {
            let mut m = |s: &str| Ok::<_, Error>(matrix(take(&format!("blk.{i}.{s}.weight"))?));
            let (wq, wk, wv, wo, gate, up_, down) = (
                m("attn_q")?,
                m("attn_k")?,
                m("attn_v")?,
                m("attn_output")?,
                m("ffn_gate")?,
                m("ffn_up")?,
                m("ffn_down")?,
            );
            let mut v = |s: &str| Ok::<_, Error>(vector(take(&format!("blk.{i}.{s}.weight"))?).0);
            let qk_norm = if config.qk_norm {
                Some((v("attn_q_norm")?, v("attn_k_norm")?))
            } else {
                None
            };
            layers.push(GpuLayer {
                attn_norm: v("attn_norm")?,
                wq,
                wk,
                wv,
                wo,
                ffn_norm: v("ffn_norm")?,
                gate,
                up: up_,
                down,
                qk_norm,
            });
        }
        let rope_freqs = rope_freqs(&config, factors.as_deref());
        let mats = layers
            .iter()
            .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down]);
        let weight_bytes = mats
            .chain([&embed])
            .chain(head.as_ref())
            .map(GpuMatrix::bytes)
            .sum();
        let kernels = Kernels::new(&gpu);
        Ok(GpuModel {
            gpu,
            kernels,
            config,
            embed,
            head,
            output_norm,
            layers,
            rope_freqs,
            weight_bytes,
        })
    }

    /// Opens and uploads a GGUF file.
    pub fn load_file(gpu: Gpu, path: &std::path::Path, progress: Progress) -> Result<GpuModel> {
        use std::io::{Seek, SeekFrom};
        let (gguf, mut file) = Gguf::open(path)?;
        file.seek(SeekFrom::Start(gguf.header_len))?;
        Self::load(
            gpu,
            &gguf,
            std::io::BufReader::with_capacity(1 << 20, file),
            progress,
        )
    }

    pub fn head(&self) -> &GpuMatrix {
        self.head.as_ref().unwrap_or(&self.embed)
    }
}
