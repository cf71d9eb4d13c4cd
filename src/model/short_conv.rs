//! LFM2's gated short convolution: the step's plain reference, and the state a
//! conversation keeps for it instead of keys and values — B ⊙ x of each
//! convolution layer's last positions.

use super::Config;

/// Positions of B ⊙ x a state keeps beyond what the next token needs: how far back
/// a conversation can be cut (the tokens after a reply's end, a regenerated reply)
/// and still continue from the cut without running everything again.
pub const CONV_ROLLBACK: usize = 64;

/// `out[t][ch] = Σ_j taps[ch][j] · s[t + j][ch]` over `s` = `prev` (the `n_taps − 1`
/// rows before the new ones) followed by `bx` (the new rows): a causal depthwise
/// convolution whose last tap weighs the current position.
pub fn short_conv(prev: &[f32], bx: &[f32], taps: &[f32], n_taps: usize) -> Vec<f32> {
    let hidden = taps.len() / n_taps;
    let row = |p: usize| match p.checked_sub(n_taps - 1) {
        None => &prev[p * hidden..][..hidden],
        Some(i) => &bx[i * hidden..][..hidden],
    };
    let mut out = vec![0f32; bx.len()];
    for (t, o) in out.chunks_exact_mut(hidden).enumerate() {
        for j in 0..n_taps {
            let s = row(t + j);
            for (ch, o) in o.iter_mut().enumerate() {
                *o += taps[ch * n_taps + j] * s[ch];
            }
        }
    }
    out
}

/// Every convolution layer's B ⊙ x rows of positions `lo..`, the last
/// `CONV_ROLLBACK + taps` of them at least.
#[derive(Clone, Debug, Default)]
pub struct ConvState {
    rows: Vec<Vec<f32>>,
    lo: Vec<usize>,
}

impl ConvState {
    pub fn new(layers: usize) -> Self {
        ConvState {
            rows: vec![Vec::new(); layers],
            lo: vec![0; layers],
        }
    }

    /// Each layer's rows and the position of its first (a saved session's state).
    pub fn parts(&self) -> (&[Vec<f32>], &[usize]) {
        (&self.rows, &self.lo)
    }

    /// The state `parts` gave, when it is one a conversation of `len` positions can
    /// have under `c` (a convolution layer's rows end at `len`, other layers have none);
    /// `None` otherwise.
    pub fn from_parts(rows: Vec<Vec<f32>>, lo: Vec<usize>, len: usize, c: &Config) -> Option<Self> {
        let fits = |l: usize| match c.is_conv(l) {
            true => {
                rows[l].len().checked_rem(c.hidden) == Some(0)
                    && lo[l] + rows[l].len() / c.hidden == len
            }
            false => rows[l].is_empty() && lo[l] == 0,
        };
        let ok = rows.len() == c.n_layers && lo.len() == c.n_layers && (0..c.n_layers).all(fits);
        ok.then_some(ConvState { rows, lo })
    }

    /// Layer `l`'s convolution of new rows `bx` at positions `pos0..` (the state
    /// holds every earlier one the taps reach; zeros before position 0), which
    /// become part of the state.
    pub fn run(
        &mut self,
        l: usize,
        pos0: usize,
        bx: &[f32],
        taps: &[f32],
        n_taps: usize,
    ) -> Vec<f32> {
        let hidden = taps.len() / n_taps;
        let (rows, lo) = (&mut self.rows[l], &mut self.lo[l]);
        let mut prev = vec![0f32; (n_taps - 1) * hidden];
        for (j, p) in (pos0 as isize - (n_taps as isize - 1)..pos0 as isize).enumerate() {
            if p >= *lo as isize {
                let at = (p as usize - *lo) * hidden;
                prev[j * hidden..][..hidden].copy_from_slice(&rows[at..at + hidden]);
            }
        }
        let out = short_conv(&prev, bx, taps, n_taps);
        rows.extend_from_slice(bx);
        let keep = CONV_ROLLBACK + n_taps;
        if rows.len() > 2 * keep * hidden {
            let drop = rows.len() / hidden - keep;
            rows.drain(..drop * hidden);
            *lo += drop;
        }
        out
    }

    /// `short_conv.wgsl`'s step on `[n][stride]` rows of B | C | x (its CPU
    /// reference): y = C ⊙ conv(B ⊙ x) of layer `l` at positions `pos0..`, as `run`.
    pub fn gated(
        &mut self,
        l: usize,
        pos0: usize,
        bcx: &[f32],
        stride: usize,
        taps: &[f32],
        n_taps: usize,
    ) -> Vec<f32> {
        let hidden = taps.len() / n_taps;
        let part = |r: &[f32], i: usize| r[i * hidden..][..hidden].to_vec();
        let rows = || bcx.chunks_exact(stride);
        let bx: Vec<f32> = rows()
            .flat_map(|r| part(r, 0).into_iter().zip(part(r, 2)).map(|(b, x)| b * x))
            .collect();
        let mut y = self.run(l, pos0, &bx, taps, n_taps);
        for (y, r) in y.chunks_exact_mut(hidden).zip(rows()) {
            y.iter_mut().zip(part(r, 1)).for_each(|(y, c)| *y *= c);
        }
        y
    }

    /// Cuts every layer back to `len` positions where each still holds the rows
    /// position `len` convolves, else to 0 (the caller runs the conversation from the
    /// start); returns the positions kept, which the KV store keeps too.
    pub fn cut(&mut self, len: usize, n_taps: usize, hidden: usize) -> usize {
        if self.truncate(len, n_taps, hidden) {
            len
        } else {
            self.truncate(0, n_taps, hidden);
            0
        }
    }

    /// Cuts every layer back to `len` positions. False (nothing cut) where a layer
    /// no longer holds the rows position `len` would convolve.
    fn truncate(&mut self, len: usize, n_taps: usize, hidden: usize) -> bool {
        if len == 0 {
            self.rows.iter_mut().for_each(Vec::clear);
            self.lo.iter_mut().for_each(|lo| *lo = 0);
            return true;
        }
        let need = len.saturating_sub(n_taps.saturating_sub(1));
        let kept = |(r, &lo): (&Vec<f32>, &usize)| r.is_empty() || lo <= need;
        if !self.rows.iter().zip(&self.lo).all(kept) {
            return false;
        }
        for (r, &lo) in self.rows.iter_mut().zip(&self.lo) {
            r.truncate((len - lo.min(len)) * hidden);
        }
        true
    }

    pub fn bytes(&self) -> u64 {
        self.rows.iter().map(|r| 4 * r.len() as u64).sum()
    }
}
