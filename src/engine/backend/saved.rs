//! The bytes of a saved KV state: little-endian numbers and length-prefixed runs,
//! written by a backend's `write_state` and read back, every length checked.

use crate::error::{Error, Result};

/// Little-endian bytes of a saved state.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn raw(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    pub fn u32(&mut self, v: u32) {
        self.raw(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.raw(&v.to_le_bytes());
    }
    /// A length, then the values.
    pub fn u32s(&mut self, v: &[u32]) {
        self.u64(v.len() as u64);
        v.iter().for_each(|&x| self.u32(x));
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.raw(b);
    }
}

/// Reads what `Writer` wrote; anything short or out of range is a damaged save.
pub struct Reader<'a> {
    b: &'a [u8],
}

pub fn damaged() -> Error {
    Error::invalid("this saved session is damaged (its bytes end early or do not match)")
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Reader { b }
    }
    pub fn raw(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.b.len() {
            return Err(damaged());
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    pub fn u32(&mut self) -> Result<u32> {
        let b = self.raw(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.raw(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn len(&mut self, each: usize) -> Result<usize> {
        let n = usize::try_from(self.u64()?).map_err(|_| damaged())?;
        match n.checked_mul(each) {
            Some(b) if b <= self.b.len() => Ok(n),
            _ => Err(damaged()),
        }
    }
    pub fn u32s(&mut self) -> Result<Vec<u32>> {
        let n = self.len(4)?;
        (0..n).map(|_| self.u32()).collect()
    }
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.len(1)?;
        self.raw(n)
    }
    pub fn rest(&self) -> &'a [u8] {
        self.b
    }
    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
}
