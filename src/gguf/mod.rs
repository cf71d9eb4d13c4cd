//! GGUF v2/v3: the model container. `read_header` parses metadata and the tensor table
//! from any byte stream; tensor data is then read one tensor at a time, either by
//! seeking (`read_tensor`) or front to back from a stream (`TensorStream`), so the whole
//! file never has to be in memory.

mod reader;
pub mod split;
mod stream;
mod types;
mod value;
mod writer;

pub use reader::{read_header, read_header_prefix, MAX_ARRAY, MAX_STRING, MAX_TENSORS};
pub use stream::{read_streamed_header, ByteSource, Progress, ReadSource, Window};
pub use types::GgmlType;
pub use value::{type_id, Array, Value};
pub use writer::Writer;

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};

/// A parsed GGUF header.
#[derive(Clone, Debug)]
pub struct Gguf {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Bytes taken by the header (the parser's position after the tensor table).
    pub header_len: u64,
    /// Absolute offset of the tensor data section.
    pub data_offset: u64,
    /// Where each file's data section starts: `[data_offset]` for one file, one entry
    /// per shard for a split model (`split::add`).
    pub shard_data: Vec<u64>,
    /// Total length of the source when it was known while parsing.
    pub file_len: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// GGML order: `dims[0]` is the fastest-varying (row length).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Relative to the data section (of its shard's file).
    pub offset: u64,
    /// Which file of a split model holds it (0 for a single file).
    pub shard: usize,
    pub n_elements: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn new(name: String, dims: Vec<u64>, ty: GgmlType, offset: u64) -> Result<Self> {
        let n_elements = dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .filter(|&n| n > 0 && n < 1 << 40)
            .ok_or_else(|| Error::gguf(format!("tensor {name:?} has bad dimensions {dims:?}")))?;
        let (per_block, _) = ty.block();
        if !dims[0].is_multiple_of(per_block) {
            return Err(Error::gguf(format!(
                "tensor {name:?}: row length {} is not a multiple of the {ty} block size {per_block}",
                dims[0]
            )));
        }
        let n_bytes = ty
            .bytes_for(n_elements)
            .ok_or_else(|| Error::gguf(format!("tensor {name:?} size overflows")))?;
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
            shard: 0,
            n_elements,
            n_bytes,
        })
    }

    /// Rows × row length, for 1- and 2-D tensors (and higher ones flattened). In
    /// `u64`: a crafted file's sizes must not wrap on 32-bit wasm before they are
    /// compared with what the model expects.
    pub fn rows_cols(&self) -> (u64, u64) {
        let cols = self.dims[0].max(1);
        (self.n_elements / cols, cols)
    }

    /// Rows `[row0, row0 + n)` of this matrix as a tensor of their own, `name`: the
    /// same bytes (a row is whole blocks in every GGML type), read where they lie.
    /// None when the rows are not all there.
    pub fn rows(&self, name: String, row0: u64, n: u64) -> Option<TensorInfo> {
        let (rows, cols) = self.rows_cols();
        if n == 0 || row0.checked_add(n)? > rows {
            return None;
        }
        let row_bytes = self.n_bytes / rows;
        Some(TensorInfo {
            name,
            dims: vec![cols, n],
            ty: self.ty,
            offset: self.offset + row0 * row_bytes,
            shard: self.shard,
            n_elements: n * cols,
            n_bytes: n * row_bytes,
        })
    }
}

/// Metadata in file order, with an index by key.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    pub fn insert(&mut self, key: String, value: Value) {
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
            }
        }
    }
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
    pub fn u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(Value::as_u64)
    }
    pub fn f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }
    pub fn bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }
    pub fn array(&self, key: &str) -> Option<&Array> {
        self.get(key).and_then(Value::as_array)
    }
    pub fn strings(&self, key: &str) -> Option<&[String]> {
        self.array(key).and_then(Array::as_strings)
    }
}

impl Gguf {
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Where tensor `t` starts in its file.
    pub fn start(&self, t: &TensorInfo) -> u64 {
        self.shard_data
            .get(t.shard)
            .copied()
            .unwrap_or(self.data_offset)
            + t.offset
    }

    /// Opens a file and parses its header; the file is returned for tensor reads.
    pub fn open(path: &std::path::Path) -> Result<(Gguf, std::fs::File)> {
        let file = std::fs::File::open(path)
            .map_err(|e| Error::invalid(format!("cannot open {}: {e}", path.display())))?;
        let len = file.metadata()?.len();
        let gguf = read_header(std::io::BufReader::new(&file), Some(len))?;
        Ok((gguf, file))
    }

    /// Reads one tensor's raw bytes from a seekable file, or a split model's files.
    pub fn read_tensor<R: TensorReader>(&self, r: &mut R, t: &TensorInfo) -> Result<Vec<u8>> {
        r.read_tensor_of(self, t)
    }
}

/// Where tensors are read by position: one seekable file (`Gguf::open`), or the files
/// of a split model, each tensor from its own (`split::open_model`).
pub trait TensorReader {
    fn read_tensor_of(&mut self, g: &Gguf, t: &TensorInfo) -> Result<Vec<u8>>;
}

impl<R: Read + Seek> TensorReader for R {
    fn read_tensor_of(&mut self, g: &Gguf, t: &TensorInfo) -> Result<Vec<u8>> {
        if t.shard != 0 {
            return Err(Error::invalid(format!(
                "tensor {:?} is in file {} of a split model, and only one file is open \
                 (gguf::split::open_model opens them all)",
                t.name,
                t.shard + 1
            )));
        }
        read_at(self, g, t)
    }
}

/// Tensor `t`'s bytes from its own file `r`.
pub(crate) fn read_at<R: Read + Seek>(r: &mut R, g: &Gguf, t: &TensorInfo) -> Result<Vec<u8>> {
    r.seek(SeekFrom::Start(g.start(t)))?;
    read_exactly(r, t.n_bytes, &t.name)
}

fn read_exactly<R: Read>(r: &mut R, n: u64, name: &str) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(n.min(64 << 20) as usize);
    let got = r.take(n).read_to_end(&mut buf)?;
    if (got as u64) < n {
        return Err(Error::Truncated(format!(
            "tensor {name:?}: expected {n} bytes, the file ended after {got}"
        )));
    }
    Ok(buf)
}

/// Reads tensors front to back from a stream positioned just after the header (at
/// byte `gguf.header_len`), in file order, skipping padding. This is how a download is
/// consumed: no seeking, one tensor in memory at a time.
pub struct TensorStream<'a, R> {
    gguf: &'a Gguf,
    order: std::vec::IntoIter<usize>,
    r: R,
    pos: u64,
}

impl<'a, R: Read> TensorStream<'a, R> {
    pub fn new(gguf: &'a Gguf, r: R) -> Self {
        let mut order: Vec<usize> = (0..gguf.tensors.len()).collect();
        order.sort_by_key(|&i| gguf.tensors[i].offset);
        TensorStream {
            gguf,
            order: order.into_iter(),
            r,
            pos: gguf.header_len,
        }
    }

    /// The next tensor in file order, or `None` after the last.
    pub fn next_tensor(&mut self) -> Result<Option<(&'a TensorInfo, Vec<u8>)>> {
        let Some(i) = self.order.next() else {
            return Ok(None);
        };
        let t = &self.gguf.tensors[i];
        let start = self.gguf.data_offset + t.offset;
        let skip = start
            .checked_sub(self.pos)
            .ok_or_else(|| Error::gguf("stream position is past a tensor's start"))?;
        let skipped = std::io::copy(&mut (&mut self.r).take(skip), &mut std::io::sink())?;
        if skipped < skip {
            return Err(Error::Truncated(format!(
                "the file ends before tensor {:?}",
                t.name
            )));
        }
        let bytes = read_exactly(&mut self.r, t.n_bytes, &t.name)?;
        self.pos = start + t.n_bytes;
        Ok(Some((t, bytes)))
    }
}
