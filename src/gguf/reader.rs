//! A bounded, streaming GGUF parser. It reads the header (metadata and tensor table)
//! from any `Read`, front to back, never seeking, so the same code parses a file, a
//! slice or a download as it arrives. Every count and length is checked against fixed
//! caps and, when the total size is known, against the bytes left, before anything is
//! allocated: a hostile file gets an `Error`, never a panic, a hang or a huge buffer.

use super::value::{type_id, Array, Value};
use super::GgmlType;
use super::{Gguf, Metadata, TensorInfo};
use crate::error::{Error, Result};
use std::cell::Cell;
use std::collections::HashSet;
use std::io::Read;

const MAGIC: &[u8; 4] = b"GGUF";
pub const MAX_KEYS: u64 = 1 << 16;
pub const MAX_TENSORS: u64 = 1 << 16;
pub const MAX_STRING: u64 = 16 << 20;
pub const MAX_ARRAY: u64 = 1 << 26;
pub const MAX_DIMS: u32 = 4;
pub const MAX_NESTING: u32 = 3;
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Reads a GGUF header from `r`. `total_len`, when known, lets every size be checked
/// against the real file; without it, a short stream fails when the bytes run out.
pub fn read_header<R: Read>(r: R, total_len: Option<u64>) -> Result<Gguf> {
    Parser {
        r,
        pos: 0,
        total: total_len,
        ran_out: Cell::new(false),
    }
    .header()
}

/// Parses the header from the first bytes of a stream that is still arriving: `None`
/// when `prefix` ends before the header does (more bytes are needed), an error as
/// soon as the header is wrong. A size the file cannot hold (`total_len`, when known)
/// is an error at once, so a damaged download is never buffered whole first.
pub fn read_header_prefix(prefix: &[u8], total_len: Option<u64>) -> Result<Option<Gguf>> {
    let mut p = Parser {
        r: prefix,
        pos: 0,
        total: total_len,
        ran_out: Cell::new(false),
    };
    match p.header() {
        Ok(g) => Ok(Some(g)),
        // The prefix ended, not the file: ask for more.
        Err(_) if p.ran_out.get() && total_len.is_none_or(|t| (prefix.len() as u64) < t) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

struct Parser<R> {
    r: R,
    pos: u64,
    total: Option<u64>,
    /// The reader ended (as opposed to a size that cannot fit the file).
    ran_out: Cell<bool>,
}

impl<R: Read> Parser<R> {
    fn header(&mut self) -> Result<Gguf> {
        let magic: [u8; 4] = self.array("magic")?;
        if &magic != MAGIC {
            return Err(Error::gguf(format!(
                "not a GGUF file (starts with {magic:02x?}, expected \"GGUF\")"
            )));
        }
        let version = self.u32("version")?;
        match version {
            2 | 3 => {}
            v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
                return Err(Error::unsupported(
                    "big-endian GGUF files are not supported",
                ))
            }
            v => {
                return Err(Error::unsupported(format!(
                    "GGUF version {v} (supported: 2, 3)"
                )))
            }
        }
        let n_tensors = self.count("tensor count", MAX_TENSORS, 8 + 4 + 8 + 4 + 8)?;
        let n_kv = self.count("metadata key count", MAX_KEYS, 8 + 4 + 1)?;
        let metadata = self.metadata(n_kv)?;
        let alignment = alignment(&metadata)?;
        let tensors = self.tensor_infos(n_tensors)?;
        let data_offset = self
            .pos
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| Error::gguf("data offset overflows"))?;
        let header_len = self.pos;
        let gguf = Gguf {
            version,
            metadata,
            tensors,
            alignment,
            header_len,
            data_offset,
            shard_data: vec![data_offset],
            file_len: self.total,
        };
        check_layout(&gguf)?;
        Ok(gguf)
    }

    fn metadata(&mut self, n: u64) -> Result<Metadata> {
        let mut md = Metadata::default();
        for i in 0..n {
            let key = self.string(&format!("metadata key #{i}"))?;
            let ty = self.u32(&key)?;
            let value = self.value(ty, &key, 0)?;
            if md.get(&key).is_some() {
                return Err(Error::gguf(format!("metadata key {key:?} appears twice")));
            }
            md.insert(key, value);
        }
        Ok(md)
    }

    fn tensor_infos(&mut self, n: u64) -> Result<Vec<TensorInfo>> {
        let mut tensors = Vec::with_capacity(n.min(4096) as usize);
        let mut names = HashSet::new();
        for i in 0..n {
            let name = self.string(&format!("name of tensor #{i}"))?;
            let n_dims = self.u32(&name)?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(Error::gguf(format!(
                    "tensor {name:?} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(self.u64(&name)?);
            }
            let ty_id = self.u32(&name)?;
            let ty = GgmlType::from_id(ty_id).ok_or_else(|| {
                Error::unsupported(format!("tensor {name:?} has unknown type id {ty_id}"))
            })?;
            let offset = self.u64(&name)?;
            let info = TensorInfo::new(name, dims, ty, offset)?;
            if !names.insert(info.name.clone()) {
                return Err(Error::gguf(format!("tensor {:?} appears twice", info.name)));
            }
            tensors.push(info);
        }
        Ok(tensors)
    }

    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<Value> {
        Ok(match ty {
            type_id::U8 => Value::U8(self.u8(key)?),
            type_id::I8 => Value::I8(self.u8(key)? as i8),
            type_id::U16 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            type_id::I16 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            type_id::U32 => Value::U32(self.u32(key)?),
            type_id::I32 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            type_id::F32 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            type_id::BOOL => Value::Bool(self.bool(key)?),
            type_id::STRING => Value::Str(self.string(key)?),
            type_id::ARRAY => Value::Array(self.array_value(key, depth)?),
            type_id::U64 => Value::U64(self.u64(key)?),
            type_id::I64 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            type_id::F64 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            other => {
                return Err(Error::gguf(format!(
                    "metadata {key:?} has unknown value type {other}"
                )))
            }
        })
    }

    fn array_value(&mut self, key: &str, depth: u32) -> Result<Array> {
        if depth >= MAX_NESTING {
            return Err(Error::gguf(format!(
                "metadata {key:?}: arrays nested too deep"
            )));
        }
        let ty = self.u32(key)?;
        let min_size = match ty {
            type_id::U8 | type_id::I8 | type_id::BOOL => 1,
            type_id::U16 | type_id::I16 => 2,
            type_id::U32 | type_id::I32 | type_id::F32 => 4,
            type_id::U64 | type_id::I64 | type_id::F64 | type_id::STRING => 8,
            type_id::ARRAY => 12,
            other => {
                return Err(Error::gguf(format!(
                    "metadata {key:?}: unknown array type {other}"
                )))
            }
        };
        let n = self.count(key, MAX_ARRAY, min_size)?;
        macro_rules! read_vec {
            ($variant:ident, $read:expr) => {{
                let mut v = Vec::with_capacity(n.min(1 << 16) as usize);
                for _ in 0..n {
                    v.push($read);
                }
                Array::$variant(v)
            }};
        }
        Ok(match ty {
            type_id::U8 => read_vec!(U8, self.u8(key)?),
            type_id::I8 => read_vec!(I8, self.u8(key)? as i8),
            type_id::U16 => read_vec!(U16, u16::from_le_bytes(self.array(key)?)),
            type_id::I16 => read_vec!(I16, i16::from_le_bytes(self.array(key)?)),
            type_id::U32 => read_vec!(U32, self.u32(key)?),
            type_id::I32 => read_vec!(I32, i32::from_le_bytes(self.array(key)?)),
            type_id::F32 => read_vec!(F32, f32::from_le_bytes(self.array(key)?)),
            type_id::BOOL => read_vec!(Bool, self.bool(key)?),
            type_id::STRING => read_vec!(Str, self.string(key)?),
            type_id::U64 => read_vec!(U64, self.u64(key)?),
            type_id::I64 => read_vec!(I64, i64::from_le_bytes(self.array(key)?)),
            type_id::F64 => read_vec!(F64, f64::from_le_bytes(self.array(key)?)),
            _ => read_vec!(Array, self.array_value(key, depth + 1)?),
        })
    }

    /// A count that is bounded both by a fixed cap and by the bytes left, given the
    /// smallest size one item can take on disk.
    fn count(&mut self, what: &str, cap: u64, min_item_bytes: u64) -> Result<u64> {
        let n = self.u64(what)?;
        if n > cap {
            return Err(Error::gguf(format!(
                "{what}: count {n} is over the limit of {cap}"
            )));
        }
        if let Some(left) = self.left() {
            if n.saturating_mul(min_item_bytes) > left {
                return Err(Error::Truncated(format!(
                    "{what}: {n} items cannot fit in the {left} bytes left"
                )));
            }
        }
        Ok(n)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        if len > MAX_STRING {
            return Err(Error::gguf(format!(
                "{what}: string of {len} bytes is over the limit of {MAX_STRING}"
            )));
        }
        if let Some(left) = self.left() {
            if len > left {
                return Err(Error::Truncated(format!(
                    "{what}: string of {len} bytes, only {left} left"
                )));
            }
        }
        // Reading through `take` grows the buffer only as real bytes arrive.
        let mut buf = Vec::with_capacity(len.min(4096) as usize);
        let got = (&mut self.r).take(len).read_to_end(&mut buf)?;
        self.pos += got as u64;
        if (got as u64) < len {
            return Err(self.eof(what));
        }
        String::from_utf8(buf).map_err(|_| Error::gguf(format!("{what}: string is not UTF-8")))
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => self.eof(what),
            _ => Error::from(e),
        })?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn bool(&mut self, what: &str) -> Result<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(Error::gguf(format!("{what}: bool byte is {b}"))),
        }
    }

    fn left(&self) -> Option<u64> {
        self.total.map(|t| t.saturating_sub(self.pos))
    }

    fn eof(&self, what: &str) -> Error {
        self.ran_out.set(true);
        Error::Truncated(format!(
            "the file ends at byte {} while reading {what}",
            self.pos
        ))
    }
}

fn alignment(md: &Metadata) -> Result<u64> {
    match md.get("general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(v) => match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= 1 << 20 => Ok(a),
            _ => Err(Error::gguf(format!(
                "general.alignment must be a power of two up to 1 MiB, got {}",
                v.summary()
            ))),
        },
    }
}

/// Offsets aligned, tensors inside the file and not overlapping.
fn check_layout(g: &Gguf) -> Result<()> {
    let mut spans: Vec<(u64, u64, &str)> = Vec::with_capacity(g.tensors.len());
    for t in &g.tensors {
        if t.offset % g.alignment != 0 {
            return Err(Error::gguf(format!(
                "tensor {:?} offset {} is not a multiple of the alignment {}",
                t.name, t.offset, g.alignment
            )));
        }
        let end = t
            .offset
            .checked_add(t.n_bytes)
            .and_then(|e| e.checked_add(g.data_offset))
            .ok_or_else(|| Error::gguf(format!("tensor {:?} offset overflows", t.name)))?;
        if let Some(len) = g.file_len {
            if end > len {
                return Err(Error::Truncated(format!(
                    "tensor {:?} ends at byte {end} but the file has {len} bytes",
                    t.name
                )));
            }
        }
        spans.push((t.offset, t.offset + t.n_bytes, &t.name));
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(Error::gguf(format!(
                "tensors {:?} and {:?} overlap",
                w[0].2, w[1].2
            )));
        }
    }
    Ok(())
}
