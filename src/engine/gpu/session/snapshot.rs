//! Copies of a GPU conversation's KV cache: kept on the GPU for the prefix cache
//! (`snapshot` / `restore`: buffer copies, nothing read back), or as bytes for a saved
//! session (`write_state` / `read_state`). A layer whose cache grows with the
//! conversation has the positions held copied; a ring (a sliding window, a
//! convolution's state) is copied whole, with the first position the rings hold.

use super::GpuSession;
use crate::engine::backend::{damaged, Reader, Writer};
use crate::error::Result;
use crate::gpu::Gpu;
use crate::kernels::attention::LayerCache;

/// A GPU conversation's keys and values, copied into buffers of their own.
pub struct GpuSnapshot {
    /// Each layer's K, V and their scales (none where nothing is held).
    bufs: Vec<Option<wgpu::Buffer>>,
    ring_lo: usize,
    bytes: u64,
}

impl GpuSnapshot {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Layer cache `c`'s buffers, each with the bytes that hold positions `0..len`.
fn held(c: &LayerCache, len: usize) -> [(&wgpu::Buffer, u64); 4] {
    fn part(c: &LayerCache, b: &wgpu::Buffer, len: usize) -> u64 {
        let size = b.size();
        let n = match c.window > 0 || len >= c.slots {
            true => size,
            // Rows are position-major: the first `len` of `slots` rows.
            false => (size * len as u64).div_ceil(c.slots.max(1) as u64),
        };
        if len == 0 {
            0
        } else {
            n.next_multiple_of(4).min(size)
        }
    }
    [&c.k, &c.v, &c.k_scales, &c.v_scales].map(|b| (b, part(c, b, len)))
}

impl GpuSession {
    /// The tokens held and the adapter they were run with.
    pub fn held(&self) -> (&[u32], u64) {
        (&self.tokens, self.adapter_id)
    }

    /// Copies what the cache holds (on the GPU).
    pub fn snapshot(&mut self, g: &Gpu) -> Result<GpuSnapshot> {
        self.abandon();
        let len = self.tokens.len();
        let mut enc = g.device.create_command_encoder(&Default::default());
        let (mut bufs, mut bytes) = (Vec::new(), 0);
        for (src, n) in self.cache.iter().flat_map(|c| held(c, len)) {
            let copy = match n {
                0 => None,
                n => {
                    let b = g.storage("KV snapshot", n)?;
                    enc.copy_buffer_to_buffer(src, 0, &b, 0, n);
                    bytes += n;
                    Some(b)
                }
            };
            bufs.push(copy);
        }
        g.queue.submit([enc.finish()]);
        g.take_error()?;
        Ok(GpuSnapshot {
            bufs,
            ring_lo: self.ring_lo,
            bytes,
        })
    }

    /// Holds `s` again: the keys and values of `tokens` under adapter `adapter`.
    pub fn restore(
        &mut self,
        g: &Gpu,
        s: &GpuSnapshot,
        tokens: &[u32],
        adapter: u64,
    ) -> Result<()> {
        self.clear();
        let mut enc = g.device.create_command_encoder(&Default::default());
        let dst = self.cache.iter().flat_map(|c| held(c, usize::MAX));
        for ((dst, _), src) in dst.zip(&s.bufs) {
            if let Some(src) = src {
                enc.copy_buffer_to_buffer(src, 0, dst, 0, src.size().min(dst.size()));
            }
        }
        g.queue.submit([enc.finish()]);
        g.take_error()?;
        self.tokens = tokens.to_vec();
        self.ring_lo = s.ring_lo;
        self.adapter_id = adapter;
        Ok(())
    }

    /// The cache's bytes for a saved session: the first position the rings hold, then
    /// each buffer's held bytes.
    pub async fn write_state(&mut self, g: &Gpu) -> Result<Vec<u8>> {
        self.abandon();
        let len = self.tokens.len();
        let mut w = Writer::default();
        w.u64(self.ring_lo as u64);
        for c in &self.cache {
            for (b, n) in held(c, len) {
                let bytes = match n {
                    0 => Vec::new(),
                    n => g.read(b, 0, n).await?,
                };
                w.bytes(&bytes);
            }
        }
        Ok(w.0)
    }

    /// Holds the saved keys and values `bytes` of `tokens` under `adapter`.
    pub fn read_state(
        &mut self,
        g: &Gpu,
        bytes: &[u8],
        tokens: &[u32],
        adapter: u64,
    ) -> Result<()> {
        self.clear();
        let len = tokens.len();
        let mut r = Reader::new(bytes);
        let ring_lo = usize::try_from(r.u64()?).map_err(|_| damaged())?;
        let mut writes = Vec::new();
        for c in &self.cache {
            for (b, n) in held(c, len) {
                let data = r.bytes()?;
                if data.len() as u64 != n || ring_lo > len {
                    return Err(damaged());
                }
                writes.push((b, data));
            }
        }
        if !r.is_empty() {
            return Err(damaged());
        }
        for (b, data) in writes.into_iter().filter(|(_, d)| !d.is_empty()) {
            g.queue.write_buffer(b, 0, data);
        }
        g.take_error()?;
        self.tokens = tokens.to_vec();
        self.ring_lo = ring_lo;
        self.adapter_id = adapter;
        Ok(())
    }
}

impl GpuSession {
    /// What a saved state's bytes depend on besides the model: the KV format and each
    /// ring's slots (a ring is saved whole).
    pub fn layout(&self) -> String {
        let rings = self.cache.iter().filter(|c| c.window > 0);
        let rings: String = rings.map(|c| format!(" {}", c.slots)).collect();
        format!("gpu {}{rings}", self.opts.kv as u8)
    }
}
