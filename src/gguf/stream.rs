//! Reading a GGUF file as a stream of chunks (a download, a `Blob`, a file): the header
//! parsed as soon as its bytes are in, then tensor bytes taken front to back (the GPU
//! loader takes matrices a slice of rows at a time), each held only while repacked. Natively and in the browser alike (a `ByteSource` is
//! async); the GPU loader is built on this.

use super::{read_header, read_header_prefix, Gguf};
use crate::error::{Error, Result};
use std::io::Read;

/// Loading progress: bytes of the file read so far, and its size (0 when unknown).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Where model bytes come from, front to back: a file, a download, a `Blob`.
#[allow(async_fn_in_trait)]
pub trait ByteSource {
    /// The next chunk, or `None` at the end.
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>>;
    /// Total size when known (file size, Content-Length).
    fn total_len(&self) -> Option<u64>;
}

/// Any `Read` as a byte source, in 1 MiB chunks.
pub struct ReadSource<R> {
    pub reader: R,
    pub len: Option<u64>,
}

impl<R: Read> ByteSource for ReadSource<R> {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        let mut chunk = Vec::with_capacity(1 << 20);
        let n = (&mut self.reader).take(1 << 20).read_to_end(&mut chunk)?;
        Ok((n > 0).then_some(chunk))
    }
    fn total_len(&self) -> Option<u64> {
        self.len
    }
}

/// Bytes of the stream from file offset `base` on, refilled chunk by chunk.
pub struct Window<'s, S> {
    src: &'s mut S,
    buf: Vec<u8>,
    base: u64,
    eof: bool,
    read: u64,
    /// A `take` is filling the buffer: grow it exactly (see `take`).
    exact: bool,
}

impl<'s, S: ByteSource> Window<'s, S> {
    pub fn new(src: &'s mut S) -> Self {
        Window {
            src,
            buf: Vec::new(),
            base: 0,
            eof: false,
            read: 0,
            exact: false,
        }
    }

    /// Bytes pulled from the source so far.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// The source's total size, when known.
    pub fn total(&self) -> Option<u64> {
        self.src.total_len()
    }

    /// Reads one more chunk; false at the end of the stream.
    pub async fn fill(&mut self) -> Result<bool> {
        match self.src.next_chunk().await? {
            Some(c) => {
                self.read += c.len() as u64;
                // While a tensor is taken, exactly what the chunk needs: `take`
                // reserved the tensor's bytes, and a chunk running past its end must not
                // double the buffer (the header, read before, grows by doubling).
                if self.exact {
                    self.buf.reserve_exact(c.len());
                }
                self.buf.extend_from_slice(&c);
                Ok(true)
            }
            None => {
                self.eof = true;
                Ok(false)
            }
        }
    }

    /// The bytes [start, start + n), dropping everything before `start`.
    pub async fn take(&mut self, start: u64, n: u64, name: &str) -> Result<Vec<u8>> {
        if start < self.base {
            return Err(Error::gguf(format!(
                "tensor {name:?} starts inside the previous one"
            )));
        }
        // What is taken is held whole while it is repacked: refuse what cannot be, before
        // buffering toward it (wasm32 has a 4 GiB address space).
        if n > MAX_TENSOR_BYTES || usize::try_from(n).is_err() {
            return Err(Error::unsupported(format!(
                "tensor {name:?} has {n} bytes, more than the {} MiB a tensor may have here",
                MAX_TENSOR_BYTES >> 20
            )));
        }
        // Room for the whole tensor up front: growing by doubling would hold up to
        // twice its size.
        self.buf.reserve_exact(n as usize);
        self.exact = true;
        let filled = self.fill_to(start, n, name).await;
        self.exact = false;
        filled?;
        self.base += n;
        // The tensor keeps the buffer's allocation, trimmed to its size (in place);
        // the few bytes after it start the next buffer.
        let rest = self.buf.split_off(n as usize);
        let mut tensor = std::mem::replace(&mut self.buf, rest);
        tensor.shrink_to_fit();
        Ok(tensor)
    }

    /// Reads until the buffer starts at `start` and holds `n` bytes.
    async fn fill_to(&mut self, start: u64, n: u64, name: &str) -> Result<()> {
        loop {
            let drop = (start - self.base).min(self.buf.len() as u64) as usize;
            self.buf.drain(..drop);
            self.base += drop as u64;
            if self.base == start && self.buf.len() as u64 >= n {
                break;
            }
            if !self.fill().await? {
                return Err(Error::Truncated(format!(
                    "the file ends inside tensor {name:?}"
                )));
            }
        }
        Ok(())
    }
}

/// Largest tensor the loader holds in memory at once.
const MAX_TENSOR_BYTES: u64 = if cfg!(target_arch = "wasm32") {
    1 << 30
} else {
    1 << 40
};

/// Most bytes a header may take before the stream is given up on: vocabularies of
/// 256k tokens take a few MB; a file whose header is not done by here is not a model.
const MAX_HEADER: usize = 128 << 20;

/// The GGUF header from the start of the stream, re-parsed as the buffer doubles. A
/// header that is wrong fails as soon as the bytes show it (a size over what the file
/// holds included), not once the whole file has been read.
pub async fn read_streamed_header<S: ByteSource>(
    w: &mut Window<'_, S>,
    total: Option<u64>,
    progress: Progress<'_>,
) -> Result<Gguf> {
    let mut tried_at = 0usize;
    loop {
        let have = w.buf.len();
        if have >= tried_at.saturating_mul(2).max(64 << 10) || w.eof {
            tried_at = have;
            if let Some(g) = read_header_prefix(&w.buf, total)? {
                return Ok(g);
            }
            if w.eof {
                // Every byte there is, and still no header: the strict parse's error.
                read_header(&w.buf[..], total)?;
                return Err(Error::Truncated("the file ends inside its header".into()));
            }
            if have > MAX_HEADER {
                return Err(Error::gguf(format!(
                    "no complete header in the first {} MiB: not a model file",
                    MAX_HEADER >> 20
                )));
            }
        }
        w.fill().await?;
        progress(w.read, total.unwrap_or(0));
    }
}
