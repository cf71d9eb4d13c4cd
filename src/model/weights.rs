//! Which tensors a model needs, with their expected shapes, and loading them
//! dequantized to f32 for the CPU reference. The GPU loader uses the same list.

pub use super::arch::tensors::{RowsOf, TensorSpec};
use super::arch::{GlobalTensor, LayerTensor};
use super::config::Config;
use super::{PerProj, Proj};
use crate::error::{Error, Result};
use crate::gguf::{Gguf, TensorInfo};
use crate::quant::palette::{self, Palettized};
use crate::quant::GgmlType;
use std::collections::HashMap;

/// Layer `i`'s tensors, as its family has them.
pub fn layer_specs(c: &Config, i: usize) -> Vec<TensorSpec> {
    let family = c.arch.family();
    family
        .layer_tensors(c, i)
        .into_iter()
        .map(|t| family.layer_spec(t, c, i))
        .collect()
}

/// Tensors outside the layers.
pub fn global_specs(c: &Config) -> Vec<TensorSpec> {
    let family = c.arch.family();
    family
        .global_tensors(c)
        .into_iter()
        .map(|t| family.global_spec(t, c))
        .collect()
}

/// The metadata key of a palettized file's rows per table (see `crate::convert`).
pub const ROWS_PER_LUT_KEY: &str = "pippin.palette.rows_per_lut";
/// Rows per table of the 2-bit matrices, when it differs (absent: `ROWS_PER_LUT_KEY`).
pub const ROWS_PER_LUT_2BIT_KEY: &str = "pippin.palette.rows_per_lut_2bit";

/// How a weight is stored: one GGUF tensor, or a palette (`<name>.pidx` packed
/// indices + `<name>.plut` f16 tables) written by `pippin convert`.
#[derive(Clone, Debug)]
pub enum Stored<'a> {
    /// A tensor of the file, or rows of one (`TensorSpec::rows_of`).
    Plain(TensorInfo),
    Palette(PaletteTensors<'a>),
}

/// A palettized matrix's two tensors in the file and their layout.
#[derive(Clone, Debug)]
pub struct PaletteTensors<'a> {
    pub idx: &'a TensorInfo,
    pub lut: &'a TensorInfo,
    pub bits: u32,
    pub rows_per_lut: usize,
}

impl PaletteTensors<'_> {
    /// Reads the indices and tables of a `(rows, cols)` matrix.
    pub fn read<R: crate::gguf::TensorReader>(
        &self,
        g: &Gguf,
        r: &mut R,
        shape: (usize, usize),
    ) -> Result<Palettized> {
        let (i, l) = (g.read_tensor(r, self.idx)?, g.read_tensor(r, self.lut)?);
        Palettized::from_gguf(self.bits, shape, self.rows_per_lut, &i, &l)
    }
}

impl Stored<'_> {
    /// Reads and dequantizes the weight to f32 (the CPU reference's view).
    pub fn read_f32<R: crate::gguf::TensorReader>(
        &self,
        g: &Gguf,
        r: &mut R,
        s: &TensorSpec,
    ) -> Result<Vec<f32>> {
        match *self {
            Stored::Plain(ref t) => crate::quant::dequantize_tensor(t, &g.read_tensor(r, t)?),
            Stored::Palette(ref p) => Ok(p.read(g, r, (s.rows, s.cols))?.dequantize()),
        }
    }
}

/// Finds a weight, plain or palettized, and checks its shape.
pub fn locate<'a>(g: &'a Gguf, s: &TensorSpec) -> Result<Stored<'a>> {
    if s.rows_of.is_some() || g.tensor(&s.name).is_some() || !s.matrix {
        return find(g, s).map(Stored::Plain);
    }
    let (pidx, plut) = (format!("{}.pidx", s.name), format!("{}.plut", s.name));
    let (Some(idx), Some(lut)) = (g.tensor(&pidx), g.tensor(&plut)) else {
        return Err(Error::gguf(format!("tensor {} is missing", s.name)));
    };
    let bits = match lut.dims.first() {
        Some(16) => 4,
        Some(4) => 2,
        _ => {
            return Err(Error::gguf(format!(
                "{plut}: tables of {:?} entries (expected 4 or 16)",
                lut.dims
            )))
        }
    };
    let rows_per_lut = rows_per_lut(g, bits).ok_or_else(|| {
        Error::gguf(format!(
            "{pidx} is palettized but {ROWS_PER_LUT_KEY} is missing"
        ))
    })?;
    let want_idx = [palette::row_words(bits, s.cols) as u64, s.rows as u64];
    let want_lut = [1u64 << bits, s.rows.div_ceil(rows_per_lut) as u64];
    if idx.ty != GgmlType::I32
        || idx.dims != want_idx
        || lut.ty != GgmlType::F16
        || lut.dims != want_lut
        || !s.cols.is_multiple_of(32)
    {
        return Err(Error::gguf(format!(
            "palettized {}: {pidx} is {} {:?} and {plut} {} {:?}; expected I32 {want_idx:?} and F16 {want_lut:?}",
            s.name, idx.ty, idx.dims, lut.ty, lut.dims
        )));
    }
    Ok(Stored::Palette(PaletteTensors {
        idx,
        lut,
        bits,
        rows_per_lut,
    }))
}

/// Rows sharing a table in a palettized file's `bits`-wide matrices.
fn rows_per_lut(g: &Gguf, bits: u32) -> Option<usize> {
    // `try_from`, not `as`: on wasm32 a huge value must not wrap to a small one.
    let key = |k| {
        g.metadata
            .u64(k)
            .and_then(|r| usize::try_from(r).ok())
            .filter(|&r| r > 0)
    };
    let two = (bits == 2).then(|| key(ROWS_PER_LUT_2BIT_KEY)).flatten();
    two.or_else(|| key(ROWS_PER_LUT_KEY))
}

/// Finds a tensor and checks that its shape is the expected one; rows of a fused
/// tensor come back as a tensor of their own, named as the spec is.
pub fn find(g: &Gguf, s: &TensorSpec) -> Result<TensorInfo> {
    let name = s.stored_as();
    let t = g
        .tensor(name)
        .ok_or_else(|| Error::gguf(format!("tensor {name} is missing")))?;
    let rows = s.rows_of.as_ref().map_or(s.rows, |r| r.total);
    if t.rows_cols() != (rows as u64, s.cols as u64) || t.dims.len() > 2 {
        return Err(Error::gguf(format!(
            "tensor {name} has shape {:?}, expected [{}, {rows}]",
            t.dims, s.cols
        )));
    }
    match &s.rows_of {
        None => Ok(t.clone()),
        Some(r) => t
            .rows(s.name.clone(), r.row0 as u64, s.rows as u64)
            .ok_or_else(|| Error::gguf(format!("{name} has no rows {}..", r.row0))),
    }
}

/// One layer's tensors, assembled once from the file (`Weights::assemble`) and held
/// so by every executor: matrices of type `M` (f32 rows in the reference, quantized
/// blocks in the CPU backend, candle tensors in recovery training, GPU matrices before
/// the GPU stacks them), vectors of type `V` (norm weights, biases, taps).
#[derive(Clone)]
pub struct Layer<M = Vec<f32>, V = Vec<f32>> {
    pub attn_norm: V,
    /// The seven projections, each `[rows = outputs][cols = inputs]`.
    pub proj: PerProj<M>,
    pub ffn_norm: V,
    pub q_norm: Option<V>,
    pub k_norm: Option<V>,
    /// Gemma's norms of the attention and MLP outputs, before each residual add.
    pub post_attn_norm: Option<V>,
    pub post_ffn_norm: Option<V>,
    /// Each projection's bias, where the file has one (Qwen2's Q, K and V).
    pub biases: PerProj<Option<V>>,
    /// A convolution layer's taps, `[hidden][conv_taps]` (LFM2).
    pub conv: Option<V>,
}

impl<M, V> Layer<M, V> {
    /// Projection `p`'s matrix.
    pub fn proj(&self, p: Proj) -> &M {
        &self.proj[p]
    }

    pub fn proj_mut(&mut self, p: Proj) -> &mut M {
        &mut self.proj[p]
    }

    /// The same layer in another executor's form: each matrix through `m`, each vector
    /// through `v`.
    pub fn map<M2, V2, E>(
        self,
        m: impl FnMut(Proj, M) -> std::result::Result<M2, E>,
        mut v: impl FnMut(V) -> std::result::Result<V2, E>,
    ) -> std::result::Result<Layer<M2, V2>, E> {
        let mut opt = |o: Option<V>| o.map(&mut v).transpose();
        Ok(Layer {
            proj: self.proj.try_map(m)?,
            q_norm: opt(self.q_norm)?,
            k_norm: opt(self.k_norm)?,
            post_attn_norm: opt(self.post_attn_norm)?,
            post_ffn_norm: opt(self.post_ffn_norm)?,
            biases: self.biases.try_map(|_, b| opt(b))?,
            conv: opt(self.conv)?,
            attn_norm: v(self.attn_norm)?,
            ffn_norm: v(self.ffn_norm)?,
        })
    }
}

/// All weights, row-major `[rows][cols]`: matrices of type `M` (f32 in the reference),
/// vectors of type `V` (f32).
#[derive(Clone)]
pub struct Weights<M = Vec<f32>, V = Vec<f32>> {
    pub token_embd: M,
    pub output_norm: V,
    /// `None` when the output head is the embedding (tied).
    pub output: Option<M>,
    pub rope_freqs: Option<V>,
    pub layers: Vec<Layer<M, V>>,
}

/// A tensor as a loader gives it: matrices and vectors in the executor's forms.
pub enum Tensor<M, V = Vec<f32>> {
    Vector(V),
    Matrix(M),
}

impl Weights {
    pub fn load<R: crate::gguf::TensorReader>(g: &Gguf, c: &Config, r: &mut R) -> Result<Weights> {
        Self::build(c, |s| locate(g, s)?.read_f32(g, r, s))
    }

    /// Assembles the weights from `read`, which gives each spec's values (row-major).
    pub fn build(
        c: &Config,
        mut read: impl FnMut(&TensorSpec) -> Result<Vec<f32>>,
    ) -> Result<Weights> {
        Self::assemble(c, |s| {
            let v = read(s)?;
            Ok(if s.matrix {
                Tensor::Matrix(v)
            } else {
                Tensor::Vector(v)
            })
        })
    }

    /// The output head: `output.weight`, or the embedding when tied.
    pub fn head(&self) -> &[f32] {
        self.output.as_deref().unwrap_or(&self.token_embd)
    }
}

impl<M, V> Weights<M, V> {
    /// Assembles the weights from `read`, which gives each spec's tensor: a matrix
    /// where the spec says so, else a vector. The one place a layer is put together
    /// from a file's tensors by what each is to it.
    pub fn assemble(
        c: &Config,
        mut read: impl FnMut(&TensorSpec) -> Result<Tensor<M, V>>,
    ) -> Result<Weights<M, V>> {
        let family = c.arch.family();
        let globals = family.global_tensors(c).into_iter();
        let mut g = Taken::new(globals.map(|t| (t, family.global_spec(t, c))), &mut read)?;
        let token_embd = g.matrix(GlobalTensor::Embedding)?;
        let output_norm = g.vector(GlobalTensor::OutputNorm)?;
        let output = g.optional_matrix(GlobalTensor::Output)?;
        let rope_freqs = g.optional_vector(GlobalTensor::RopeFreqs)?;
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            use LayerTensor::{AttnNorm, Bias, ConvTaps, FfnNorm, KNorm};
            use LayerTensor::{PostAttnNorm, PostFfnNorm, QNorm};
            let specs = family.layer_tensors(c, i).into_iter();
            let mut t = Taken::new(specs.map(|t| (t, family.layer_spec(t, c, i))), &mut read)?;
            layers.push(Layer {
                attn_norm: t.vector(AttnNorm)?,
                proj: PerProj::try_from_fn(|p| t.matrix(LayerTensor::of(p)))?,
                ffn_norm: t.vector(FfnNorm)?,
                q_norm: t.optional_vector(QNorm)?,
                k_norm: t.optional_vector(KNorm)?,
                post_attn_norm: t.optional_vector(PostAttnNorm)?,
                post_ffn_norm: t.optional_vector(PostFfnNorm)?,
                biases: PerProj::try_from_fn(|p| t.optional_vector(Bias(p)))?,
                conv: t.optional_vector(ConvTaps)?,
            });
        }
        Ok(Weights {
            token_embd,
            output_norm,
            output,
            rope_freqs,
            layers,
        })
    }

    /// The output head (`output.weight`, or the embedding when tied).
    pub fn head_matrix(&self) -> &M {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}

/// A tensor by what it is to the model (one key type: one copy of `Taken` in the wasm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Layer(LayerTensor),
    Global(GlobalTensor),
}

impl From<LayerTensor> for Part {
    fn from(t: LayerTensor) -> Part {
        Part::Layer(t)
    }
}

impl From<GlobalTensor> for Part {
    fn from(t: GlobalTensor) -> Part {
        Part::Global(t)
    }
}

/// A layer's (or the globals') tensors as read, by what each is to the model: each
/// taken where the model uses it, checked to be the matrix or vector its spec says.
/// A list: a layer has at most a score of tensors.
struct Taken<M, V> {
    tensors: Vec<(Part, Tensor<M, V>, TensorSpec)>,
}

impl<M, V> Taken<M, V> {
    fn new<K: Into<Part>>(
        specs: impl Iterator<Item = (K, TensorSpec)>,
        read: &mut impl FnMut(&TensorSpec) -> Result<Tensor<M, V>>,
    ) -> Result<Self> {
        let tensors = specs
            .map(|(k, s)| Ok((k.into(), read(&s)?, s)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Taken { tensors })
    }

    fn take(&mut self, k: Part) -> Option<(Tensor<M, V>, TensorSpec)> {
        let i = self.tensors.iter().position(|t| t.0 == k)?;
        let (_, t, s) = self.tensors.swap_remove(i);
        Some((t, s))
    }

    #[inline(always)]
    fn optional_matrix(&mut self, k: impl Into<Part>) -> Result<Option<M>> {
        self.take_matrix(k.into())
    }

    #[inline(always)]
    fn optional_vector(&mut self, k: impl Into<Part>) -> Result<Option<V>> {
        self.take_vector(k.into())
    }

    #[inline(always)]
    fn matrix(&mut self, k: impl Into<Part>) -> Result<M> {
        let k = k.into();
        self.take_matrix(k)?.ok_or_else(|| absent(k))
    }

    #[inline(always)]
    fn vector(&mut self, k: impl Into<Part>) -> Result<V> {
        let k = k.into();
        self.take_vector(k)?.ok_or_else(|| absent(k))
    }

    fn take_matrix(&mut self, k: Part) -> Result<Option<M>> {
        match self.take(k) {
            None => Ok(None),
            Some((Tensor::Matrix(m), _)) => Ok(Some(m)),
            Some((_, s)) => Err(Error::gguf(format!("{} was read as a vector", s.name))),
        }
    }

    fn take_vector(&mut self, k: Part) -> Result<Option<V>> {
        match self.take(k) {
            None => Ok(None),
            Some((Tensor::Vector(v), _)) => Ok(Some(v)),
            Some((_, s)) => Err(Error::gguf(format!("{} was read as a matrix", s.name))),
        }
    }
}

fn absent(k: Part) -> Error {
    Error::gguf(format!("the model's family has no {k:?} tensor"))
}

/// What one GGUF tensor is to the model: a whole weight, or half of a palettized one.
#[derive(Clone, Debug)]
pub enum Role {
    Whole(TensorSpec),
    Indices(TensorSpec, u32, usize),
    Tables(TensorSpec),
    /// Not a weight of the model: an adapter the file carries (its recovery
    /// adapter), read as bytes for the layer that knows its layout.
    Adapter,
}

/// What a loader reads: the tensors (rows of a fused one as tensors of their own), in
/// file order, and what each is, by name.
pub struct Reads {
    pub tensors: Vec<TensorInfo>,
    pub roles: HashMap<String, Role>,
}

/// The tensors the model needs, each checked present with its shape before any
/// upload.
pub fn roles(gguf: &Gguf, config: &Config) -> Result<Reads> {
    let all = global_specs(config)
        .into_iter()
        .chain((0..config.n_layers).flat_map(|i| layer_specs(config, i)));
    let (mut tensors, mut roles) = (Vec::new(), HashMap::new());
    for s in all {
        match locate(gguf, &s)? {
            Stored::Plain(t) => {
                roles.insert(t.name.clone(), Role::Whole(s));
                tensors.push(t);
            }
            Stored::Palette(p) => {
                roles.insert(p.lut.name.clone(), Role::Tables(s.clone()));
                roles.insert(p.idx.name.clone(), Role::Indices(s, p.bits, p.rows_per_lut));
                tensors.extend([p.idx.clone(), p.lut.clone()]);
            }
        };
    }
    tensors.sort_by_key(|t| (t.shard, t.offset));
    Ok(Reads { tensors, roles })
}

/// A clear error for a tensor type Pippin cannot decode.
pub fn decodable(t: &TensorInfo) -> Result<()> {
    if t.ty.can_dequantize() {
        return Ok(());
    }
    Err(Error::unsupported(format!(
        "tensor {:?} has type {}, which Pippin cannot decode (supported: {})",
        t.name,
        t.ty,
        crate::quant::GgmlType::decodable()
    )))
}
