//! Weight matrices of the CPU backend, kept in their file's form: GGML blocks as the
//! GGUF stores them, or palettes (packed indices + tables). A matmul reads each row
//! once for all the tokens it multiplies: formats with an integer dot product
//! (`dot::has_int_dot`) multiply 16-bit quantized activations in integers (K-quants
//! and palettes only for one token), the others decode a row to f32 and take f32 dot
//! products.

use super::dot::{self, Format, Q16};
use super::team::{self, Job, Remote, Slice, Team};
use crate::error::{Error, Result};
use crate::model::Linear;
use crate::par::*;
use crate::quant::{dequant, palette, GgmlType};
use half::f16;
use pippin_cpu_kernels::palette::Levels;
use std::sync::Arc;

pub enum Storage {
    Ggml {
        ty: GgmlType,
        data: Vec<u8>,
        row_bytes: usize,
    },
    Palette {
        bits: u32,
        rows_per_lut: usize,
        /// Packed index words, `palette::row_words(bits, cols)` a row.
        words: Vec<u32>,
        /// `[group][1 << bits]` table entries.
        luts: Vec<f32>,
        /// Each group's table as integers (one token's integer dot products).
        levels: Vec<Levels>,
    },
}

pub struct QMatrix {
    /// Rows of the whole matrix (`storage` holds the first `held()` of them).
    pub rows: usize,
    pub cols: usize,
    pub storage: Storage,
    /// The rows other threads hold (`team`), if any.
    pub remote: Option<Remote>,
}

/// Rows per parallel task: enough work to outweigh scheduling.
const ROWS_PER_TASK: usize = 64;

/// Up to this many tokens a call, each token takes the one-token kernels: so a
/// speculative step's check (`Backend::verify`, at most this many positions) gives
/// one-token decode's logits bit for bit, while reading each row from memory once.
pub const TOKENWISE: usize = 8;

impl QMatrix {
    /// A matrix of GGML blocks, checked to be `rows` rows of whole blocks.
    pub fn ggml(ty: GgmlType, rows: usize, cols: usize, data: Vec<u8>) -> Result<QMatrix> {
        let row_bytes = ty
            .bytes_for(cols as u64)
            .filter(|_| ty.can_dequantize())
            .ok_or_else(|| Error::unsupported(format!("{ty} rows of {cols} values")))?
            as usize;
        if row_bytes * rows != data.len() {
            return Err(Error::gguf(format!(
                "a {ty} matrix of {rows}x{cols} needs {} bytes, not {}",
                row_bytes * rows,
                data.len()
            )));
        }
        Ok(QMatrix {
            rows,
            cols,
            storage: Storage::Ggml {
                ty,
                data,
                row_bytes,
            },
            remote: None,
        })
    }

    /// This matrix with its rows split across `team`'s threads: the helpers get their
    /// slices now, this thread keeps the first. Palettes, and matrices too small to
    /// pay for a round or too large for one token's round, stay whole here.
    pub fn shard(mut self, id: u32, team: &Arc<dyn Team>) -> Result<QMatrix> {
        let threads = team.helpers() + 1;
        let split = team::split(self.rows, threads);
        let remote_rows = self.rows - split[0];
        let Storage::Ggml {
            ty,
            data,
            row_bytes,
        } = &mut self.storage
        else {
            return Ok(self);
        };
        if threads < 2
            || self.rows < team::MIN_ROWS_PER_THREAD * threads
            || self.cols + remote_rows > team.capacity()
        {
            return Ok(self);
        }
        let mut first = split[0];
        for (k, &rows) in split[1..].iter().enumerate() {
            team.give(
                k,
                Slice {
                    id,
                    ty: *ty,
                    first,
                    slot: first - split[0],
                    rows,
                    cols: self.cols,
                    bytes: &data[first * *row_bytes..][..rows * *row_bytes],
                },
            )?;
            first += rows;
        }
        data.truncate(split[0] * *row_bytes);
        data.shrink_to_fit();
        self.remote = Some(Remote {
            id,
            team: team.clone(),
            bytes: (remote_rows * *row_bytes) as u64,
            split,
        });
        Ok(self)
    }

    /// Rows this thread holds.
    pub fn held(&self) -> usize {
        self.remote.as_ref().map_or(self.rows, |r| r.split[0])
    }

    /// A palettized matrix from its GGUF tensors (packed index words, f16 tables).
    pub fn palette(
        bits: u32,
        (rows, cols): (usize, usize),
        rows_per_lut: usize,
        idx: &[u8],
        lut: &[u8],
    ) -> Result<QMatrix> {
        palette::check_gguf((rows, cols), bits, rows_per_lut, idx, lut)?;
        let entries = 1usize << bits;
        let words = bytemuck::pod_collect_to_vec::<u8, u32>(idx);
        let luts: Vec<f32> = lut
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect();
        let levels = luts.chunks_exact(entries).map(Levels::new).collect();
        Ok(QMatrix {
            rows,
            cols,
            storage: Storage::Palette {
                bits,
                rows_per_lut: rows_per_lut.max(1),
                words,
                luts,
                levels,
            },
            remote: None,
        })
    }

    /// Bytes the weights take (on every thread that holds some).
    pub fn bytes(&self) -> u64 {
        let here = match &self.storage {
            Storage::Ggml { data, .. } => data.len() as u64,
            Storage::Palette {
                words,
                luts,
                levels,
                ..
            } => 4 * (words.len() + luts.len()) as u64 + std::mem::size_of_val(&levels[..]) as u64,
        };
        here + self.remote.as_ref().map_or(0, |r| r.bytes)
    }

    /// Row `r` (of those held here) decoded to f32 into `out` (`cols` long).
    pub fn decode_row(&self, r: usize, out: &mut [f32]) {
        match &self.storage {
            Storage::Ggml {
                ty,
                data,
                row_bytes,
            } => {
                // The constructor checked the sizes: failing is a bug, shown as NaNs (a
                // bug in the team's rows is shown the same way) rather than stale values.
                let row = &data[r * row_bytes..][..*row_bytes];
                if dequant::dequantize_into(*ty, row, out).is_err() {
                    out.fill(f32::NAN);
                }
            }
            Storage::Palette {
                bits,
                rows_per_lut,
                words,
                luts,
                ..
            } => {
                let per_word = 32 / *bits as usize;
                let n = palette::row_words(*bits, self.cols);
                let lut = &luts[(r / rows_per_lut) << bits..][..1 << bits];
                let mask = (1u32 << bits) - 1;
                for (o, &w) in out.chunks_exact_mut(per_word).zip(&words[r * n..][..n]) {
                    for (j, v) in o.iter_mut().enumerate() {
                        *v = lut[((w >> (j as u32 * bits)) & mask) as usize];
                    }
                }
            }
        }
    }

    /// `[held rows][t]`: each task computes its rows for every token.
    fn apply_transposed(&self, x: &[f32], t: usize) -> Vec<f32> {
        let mut yt = vec![0f32; self.held() * t];
        let tokenwise = t <= TOKENWISE;
        // The integer kernel, chosen once per matrix (not per row).
        let format = match &self.storage {
            Storage::Ggml { ty, .. } => dot::format(*ty),
            _ => None,
        };
        let q16 = match (&self.storage, format) {
            // K-quants: integers for a few tokens; a prefill chunk decodes each row to
            // f32 once for all its tokens, which measured faster (Chromium, ~3B Q4_K_M,
            // 128-token prompt: 1.9 tok/s against 1.2 with integer tiles of 8 tokens;
            // with the K-quant kernel of checks, 47 s against 51–58 s, 5 Dec late).
            // Palettes likewise: a look-up per index and token, or one per index.
            (Storage::Ggml { .. }, Some(f)) if tokenwise || !matches!(f, Format::K(_)) => {
                let q = Q16::quantize(x);
                Some(match t > 1 && dot::wants_lanes(f) {
                    true => q.with_lanes(self.cols),
                    false => q,
                })
            }
            (Storage::Palette { .. }, _) if tokenwise => Some(Q16::quantize(x)),
            _ => None,
        };
        let cols = self.cols;
        yt.par_chunks_mut(ROWS_PER_TASK * t)
            .enumerate()
            .for_each(|(task, out)| {
                let r0 = task * ROWS_PER_TASK;
                match (&self.storage, &q16, format) {
                    (
                        Storage::Ggml {
                            data, row_bytes, ..
                        },
                        Some(q),
                        Some(f),
                    ) => {
                        for (i, o) in out.chunks_exact_mut(t).enumerate() {
                            let row = &data[(r0 + i) * row_bytes..][..*row_bytes];
                            // Each token's sum is the one-token kernel's, bit for bit
                            // (a verified step's logits are one-token steps').
                            dot::dots(f, row, q, cols, o);
                        }
                    }
                    (
                        Storage::Palette {
                            bits,
                            rows_per_lut,
                            words,
                            levels,
                            ..
                        },
                        Some(q),
                        _,
                    ) => {
                        let n = palette::row_words(*bits, cols);
                        for (i, o) in out.chunks_exact_mut(t).enumerate() {
                            let r = r0 + i;
                            let (lv, row) = (&levels[r / rows_per_lut], &words[r * n..][..n]);
                            for (ti, y) in o.iter_mut().enumerate() {
                                *y = dot::palette(*bits, row, lv, q.row(ti, cols));
                            }
                        }
                    }
                    _ => {
                        let mut w = vec![0f32; cols];
                        for (i, o) in out.chunks_exact_mut(t).enumerate() {
                            self.decode_row(r0 + i, &mut w);
                            for (ti, y) in o.iter_mut().enumerate() {
                                *y = dot::dot_f32(&w, &x[ti * cols..][..cols]);
                            }
                        }
                    }
                }
            });
        yt
    }
}

impl QMatrix {
    /// `x` `[t][cols]` times the rows held here: `[t][held]`.
    pub fn apply_held(&self, x: &[f32]) -> Vec<f32> {
        let (t, n) = (x.len() / self.cols, self.held());
        let yt = self.apply_transposed(x, t);
        if t == 1 {
            return yt;
        }
        let mut y = vec![0f32; t * n];
        for (r, row) in yt.chunks_exact(t).enumerate() {
            for (ti, &v) in row.iter().enumerate() {
                y[ti * n + r] = v;
            }
        }
        y
    }

    /// A sharded matmul: rounds of as many tokens as the team carries, each the
    /// helpers' rows beside this thread's. A failed round leaves NaNs (the team
    /// records why; the backend fails the call with it).
    fn apply_shared(&self, r: &Remote, x: &[f32]) -> Vec<f32> {
        let (cols, rows, held) = (self.cols, self.rows, r.split[0]);
        // Rounds of even size (they differ by one token at most): a round of up to
        // `TOKENWISE` tokens would take the one-token kernels where the whole prefill
        // takes others (the same logits within the tolerance, but not bit for bit as
        // on one thread); a team carrying 18 tokens or more never makes one.
        let (t_all, most) = (
            x.len() / cols,
            (r.team.capacity() / (cols + r.rows())).max(1),
        );
        let rounds = t_all.div_ceil(most);
        let mut y = vec![0f32; t_all * rows];
        for k in 0..rounds {
            let (a, b) = (t_all * k / rounds, t_all * (k + 1) / rounds);
            let (xc, yc) = (&x[a * cols..b * cols], &mut y[a * rows..b * rows]);
            let t = b - a;
            r.team.start(Job::Matmul { id: r.id, t, x: xc });
            let mine = self.apply_held(xc);
            let mut theirs = vec![0f32; t * r.rows()];
            if r.team.finish(&mut theirs).is_err() {
                theirs.fill(f32::NAN);
            }
            // Helper k's block is `[t][its rows]`, at `t · slot`.
            for (yr, m) in yc.chunks_exact_mut(rows).zip(mine.chunks_exact(held)) {
                yr[..held].copy_from_slice(m);
            }
            let mut slot = 0;
            for &n in &r.split[1..] {
                let block = &theirs[t * slot..][..t * n];
                for (yr, o) in yc.chunks_exact_mut(rows).zip(block.chunks_exact(n)) {
                    yr[held + slot..][..n].copy_from_slice(o);
                }
                slot += n;
            }
        }
        y
    }
}

impl Linear for QMatrix {
    fn apply(&self, x: &[f32], cols: usize) -> Vec<f32> {
        debug_assert_eq!(cols, self.cols);
        match &self.remote {
            Some(r) => self.apply_shared(r, x),
            None => self.apply_held(x),
        }
    }

    fn append_row(&self, r: usize, cols: usize, out: &mut Vec<f32>) {
        self.append_rows(&[r as u32], cols, out);
    }

    /// Rows held elsewhere come in one round for all of them.
    fn append_rows(&self, rows: &[u32], cols: usize, out: &mut Vec<f32>) {
        let at = out.len();
        out.resize(at + rows.len() * cols, 0.0);
        let out = &mut out[at..];
        let held = self.held();
        let far = rows.iter().any(|&r| r as usize >= held);
        if let (Some(remote), true) = (&self.remote, far) {
            let per_round = (remote.team.capacity() / (cols + 1)).max(1);
            for (rc, oc) in rows.chunks(per_round).zip(out.chunks_mut(per_round * cols)) {
                remote.team.start(Job::Rows {
                    id: remote.id,
                    rows: rc,
                });
                if remote.team.finish(oc).is_err() {
                    oc.fill(f32::NAN);
                }
            }
        }
        for (&r, o) in rows.iter().zip(out.chunks_exact_mut(cols)) {
            if (r as usize) < held {
                self.decode_row(r as usize, o);
            }
        }
    }
}
