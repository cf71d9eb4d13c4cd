//! Writes GGUF v3 files: used by the converter and by tests that need small or
//! deliberately broken models.

use super::value::{Array, Value};
use super::GgmlType;
use crate::error::{Error, Result};
use std::io::Write;

#[derive(Default)]
pub struct Writer {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

const ALIGN: u64 = 32;

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn meta(&mut self, key: &str, value: Value) -> &mut Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds a tensor; `dims` in GGML order (row length first), `data` already encoded.
    pub fn tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self> {
        let n: u64 = dims.iter().product();
        if ty.bytes_for(n) != Some(data.len() as u64) {
            return Err(Error::invalid(format!(
                "tensor {name:?}: {} bytes do not hold {dims:?} of {ty}",
                data.len()
            )));
        }
        self.tensors
            .push((name.to_string(), dims.to_vec(), ty, data));
        Ok(self)
    }

    pub fn write<W: Write>(&self, w: &mut W) -> Result<()> {
        let mut out = Counting { w, n: 0 };
        out.put(b"GGUF")?;
        out.put(&3u32.to_le_bytes())?;
        out.put(&(self.tensors.len() as u64).to_le_bytes())?;
        out.put(&(self.metadata.len() as u64).to_le_bytes())?;
        for (k, v) in &self.metadata {
            out.string(k)?;
            out.put(&v.type_id().to_le_bytes())?;
            out.value(v)?;
        }
        let mut offset = 0u64;
        for (name, dims, ty, data) in &self.tensors {
            out.string(name)?;
            out.put(&(dims.len() as u32).to_le_bytes())?;
            for d in dims {
                out.put(&d.to_le_bytes())?;
            }
            out.put(&ty.id().to_le_bytes())?;
            out.put(&offset.to_le_bytes())?;
            offset = (offset + data.len() as u64).next_multiple_of(ALIGN);
        }
        out.pad()?;
        for (_, _, _, data) in &self.tensors {
            out.put(data)?;
            out.pad()?;
        }
        Ok(())
    }

    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.write(&mut v)?;
        Ok(v)
    }
}

struct Counting<W> {
    w: W,
    n: u64,
}

impl<W: Write> Counting<W> {
    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.w.write_all(b)?;
        self.n += b.len() as u64;
        Ok(())
    }
    fn pad(&mut self) -> Result<()> {
        let pad = self.n.next_multiple_of(ALIGN) - self.n;
        self.put(&vec![0u8; pad as usize])
    }
    fn string(&mut self, s: &str) -> Result<()> {
        self.put(&(s.len() as u64).to_le_bytes())?;
        self.put(s.as_bytes())
    }
    fn value(&mut self, v: &Value) -> Result<()> {
        match v {
            Value::U8(x) => self.put(&[*x]),
            Value::I8(x) => self.put(&[*x as u8]),
            Value::U16(x) => self.put(&x.to_le_bytes()),
            Value::I16(x) => self.put(&x.to_le_bytes()),
            Value::U32(x) => self.put(&x.to_le_bytes()),
            Value::I32(x) => self.put(&x.to_le_bytes()),
            Value::F32(x) => self.put(&x.to_le_bytes()),
            Value::Bool(x) => self.put(&[*x as u8]),
            Value::Str(s) => self.string(s),
            Value::U64(x) => self.put(&x.to_le_bytes()),
            Value::I64(x) => self.put(&x.to_le_bytes()),
            Value::F64(x) => self.put(&x.to_le_bytes()),
            Value::Array(a) => self.array(a),
        }
    }
    fn array(&mut self, a: &Array) -> Result<()> {
        self.put(&a.elem_type_id().to_le_bytes())?;
        self.put(&(a.len() as u64).to_le_bytes())?;
        macro_rules! each {
            ($v:expr, $f:expr) => {{
                for x in $v {
                    $f(self, x)?;
                }
                Ok(())
            }};
        }
        match a {
            Array::U8(v) => self.put(v),
            Array::I8(v) => each!(v, |s: &mut Self, x: &i8| s.put(&[*x as u8])),
            Array::U16(v) => each!(v, |s: &mut Self, x: &u16| s.put(&x.to_le_bytes())),
            Array::I16(v) => each!(v, |s: &mut Self, x: &i16| s.put(&x.to_le_bytes())),
            Array::U32(v) => each!(v, |s: &mut Self, x: &u32| s.put(&x.to_le_bytes())),
            Array::I32(v) => each!(v, |s: &mut Self, x: &i32| s.put(&x.to_le_bytes())),
            Array::F32(v) => each!(v, |s: &mut Self, x: &f32| s.put(&x.to_le_bytes())),
            Array::Bool(v) => each!(v, |s: &mut Self, x: &bool| s.put(&[*x as u8])),
            Array::Str(v) => each!(v, |s: &mut Self, x: &String| s.string(x)),
            Array::Array(v) => each!(v, |s: &mut Self, x: &Array| s.array(x)),
            Array::U64(v) => each!(v, |s: &mut Self, x: &u64| s.put(&x.to_le_bytes())),
            Array::I64(v) => each!(v, |s: &mut Self, x: &i64| s.put(&x.to_le_bytes())),
            Array::F64(v) => each!(v, |s: &mut Self, x: &f64| s.put(&x.to_le_bytes())),
        }
    }
}
