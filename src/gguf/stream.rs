//! Reading a GGUF file as a stream of chunks (a download, a `Blob`, a file): the header
//! parsed as soon as its bytes are in, then tensor bytes taken front to back (the GPU
//! loader takes matrices a slice of rows at a time), each held only while repacked. Natively and in the browser alike (a `ByteSource` is
//! async); the GPU loader is built on this.

use super::{read_header, read_header_prefix, split, Gguf};
use crate::error::{Error, Result};
use std::io::Read;

/// Loading progress: bytes of the file read so far, and its size (0 when unknown).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Where model bytes come from, front to back: a file, a download, a `Blob`; or the
/// files of a split model (`split::Shards`), each read front to back.
#[allow(async_fn_in_trait)]
pub trait ByteSource {
    /// The next chunk, or `None` at the end.
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>>;
    /// Total size when known (file size, Content-Length); of all files together.
    fn total_len(&self) -> Option<u64>;
    /// Files the model comes in (gguf-split shards).
    fn files(&self) -> usize {
        1
    }
    /// The next chunk of file `file` (0-based).
    async fn next_chunk_of(&mut self, file: usize) -> Result<Option<Vec<u8>>> {
        match file {
            0 => self.next_chunk().await,
            _ => Err(Error::invalid(format!("no model file {file}"))),
        }
    }
    /// File `file`'s size, when known.
    fn total_len_of(&self, file: usize) -> Option<u64> {
        (file == 0).then(|| self.total_len()).flatten()
    }
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

/// One file's bytes from offset `base` on, refilled chunk by chunk.
#[derive(Default)]
struct Buffered {
    buf: Vec<u8>,
    base: u64,
    eof: bool,
    /// A `take` is filling the buffer: grow it exactly (see `take`).
    exact: bool,
}

/// The model's files, each as the bytes of the stream from some offset on.
pub struct Window<'s, S> {
    src: &'s mut S,
    files: Vec<Buffered>,
    read: u64,
}

impl<'s, S: ByteSource> Window<'s, S> {
    pub fn new(src: &'s mut S) -> Self {
        let files = (0..src.files().max(1))
            .map(|_| Buffered::default())
            .collect();
        Window {
            src,
            files,
            read: 0,
        }
    }

    /// Bytes pulled from the source so far (all files).
    pub fn read(&self) -> u64 {
        self.read
    }

    /// The source's total size, when known.
    pub fn total(&self) -> Option<u64> {
        self.src.total_len()
    }

    /// Reads one more chunk of file `file`; false at its end.
    async fn fill(&mut self, file: usize) -> Result<bool> {
        let chunk = self.src.next_chunk_of(file).await?;
        let f = &mut self.files[file];
        match chunk {
            Some(c) => {
                self.read += c.len() as u64;
                // While a tensor is taken, exactly what the chunk needs: `take`
                // reserved the tensor's bytes, and a chunk running past its end must not
                // double the buffer (the header, read before, grows by doubling).
                if f.exact {
                    f.buf.reserve_exact(c.len());
                }
                f.buf.extend_from_slice(&c);
                Ok(true)
            }
            None => {
                f.eof = true;
                Ok(false)
            }
        }
    }

    /// The bytes [start, start + n) of file `file`, dropping everything before `start`.
    pub async fn take(&mut self, file: usize, start: u64, n: u64, name: &str) -> Result<Vec<u8>> {
        if file >= self.files.len() {
            return Err(Error::invalid(format!(
                "tensor {name:?} is in a missing file"
            )));
        }
        if start < self.files[file].base {
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
        self.files[file].buf.reserve_exact(n as usize);
        self.files[file].exact = true;
        let filled = self.fill_to(file, start, n, name).await;
        let f = &mut self.files[file];
        f.exact = false;
        filled?;
        f.base += n;
        // The tensor keeps the buffer's allocation, trimmed to its size (in place);
        // the few bytes after it start the next buffer.
        let rest = f.buf.split_off(n as usize);
        let mut tensor = std::mem::replace(&mut f.buf, rest);
        tensor.shrink_to_fit();
        Ok(tensor)
    }

    /// Reads until file `file`'s buffer starts at `start` and holds `n` bytes.
    async fn fill_to(&mut self, file: usize, start: u64, n: u64, name: &str) -> Result<()> {
        loop {
            let f = &mut self.files[file];
            let drop = (start - f.base).min(f.buf.len() as u64) as usize;
            f.buf.drain(..drop);
            f.base += drop as u64;
            if f.base == start && f.buf.len() as u64 >= n {
                break;
            }
            if !self.fill(file).await? {
                return Err(Error::Truncated(format!(
                    "the file ends inside tensor {name:?}"
                )));
            }
        }
        Ok(())
    }
}

/// Largest tensor the loader holds in memory at once.
const MAX_TENSOR_BYTES: u64 = crate::memory::MAX_BLOCK;

/// Most bytes a header may take before the stream is given up on: vocabularies of
/// 256k tokens take a few MB; a file whose header is not done by here is not a model.
const MAX_HEADER: usize = 128 << 20;

/// The model's header: each file's, read from its start (a failing one fails as soon
/// as its bytes show it), merged into one (`split`) when the model is split.
pub async fn read_streamed_header<S: ByteSource>(
    w: &mut Window<'_, S>,
    progress: Progress<'_>,
) -> Result<Gguf> {
    let n = w.files.len();
    let mut model = read_file_header(w, 0, progress).await?;
    split::check_first(&model, n)?;
    for k in 1..n {
        let g = match read_file_header(w, k, progress).await {
            Err(Error::Gguf(m) | Error::Truncated(m)) => {
                return Err(Error::gguf(format!("file {} of {n}: {m}", k + 1)))
            }
            g => g?,
        };
        split::add(&mut model, k, g)?;
    }
    Ok(model)
}

/// File `file`'s GGUF header, re-parsed as the buffer doubles. A header that is wrong
/// fails as soon as the bytes show it (a size over what the file holds included), not
/// once the whole file has been read.
async fn read_file_header<S: ByteSource>(
    w: &mut Window<'_, S>,
    file: usize,
    progress: Progress<'_>,
) -> Result<Gguf> {
    let total = w.src.total_len_of(file);
    let mut tried_at = 0usize;
    loop {
        let f = &w.files[file];
        let have = f.buf.len();
        if have >= tried_at.saturating_mul(2).max(64 << 10) || f.eof {
            tried_at = have;
            if let Some(g) = read_header_prefix(&f.buf, total)? {
                return Ok(g);
            }
            if f.eof {
                // Every byte there is, and still no header: the strict parse's error.
                read_header(&f.buf[..], total)?;
                return Err(Error::Truncated("the file ends inside its header".into()));
            }
            if have > MAX_HEADER {
                return Err(Error::gguf(format!(
                    "no complete header in the first {} MiB: not a model file",
                    MAX_HEADER >> 20
                )));
            }
        }
        w.fill(file).await?;
        progress(w.read, w.total().unwrap_or(0));
    }
}
