//! The prefix cache: copies of a model's KV state (a snapshot: the tokens it holds and
//! their keys and values), kept within a byte budget, least recently used out first.
//!
//! The engine holds one live KV cache. Before a reply or a prefill overwrites what the
//! live cache holds, it is kept here; a prompt that shares more tokens with a kept
//! snapshot than with the live cache has that snapshot restored. So sessions, clones and
//! conversations sharing a system prompt all find their keys and values by their tokens:
//! nothing here knows sessions, and a snapshot evicted is only recomputed.
//!
//! A snapshot is also what a saved session carries (`Saved`): its tokens, the state's
//! bytes and a fingerprint of the model, adapter and KV format that computed them.

use super::backend::{common_prefix, damaged, KvSnapshot, Reader, Writer};
use crate::error::{Error, Result};

/// A copy of the live KV cache: the tokens it holds, under which adapter.
pub struct Snapshot {
    pub tokens: Vec<u32>,
    /// The adapter (its id) whose keys and values these are.
    pub adapter: u64,
    pub state: Box<dyn KvSnapshot>,
}

/// What the cache holds and has done, for `stats()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefixStats {
    pub entries: usize,
    pub bytes: u64,
    pub budget: u64,
    /// Prompt tokens whose keys and values came from a snapshot, over every reply.
    pub restored_tokens: u64,
}

pub struct PrefixCache {
    /// Snapshots and when each was last used (a tick of `clock`).
    entries: Vec<(Snapshot, u64)>,
    budget: u64,
    clock: u64,
    restored: u64,
}

impl PrefixCache {
    pub fn new(budget: u64) -> Self {
        PrefixCache {
            entries: Vec::new(),
            budget,
            clock: 0,
            restored: 0,
        }
    }

    pub fn set_budget(&mut self, budget: u64) {
        self.budget = budget;
        self.evict();
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The snapshot sharing the most leading tokens with `tokens` under `adapter`, and
    /// how many, when it shares more than `than`.
    pub fn best(&self, tokens: &[u32], adapter: u64, than: usize) -> Option<(usize, usize)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, (s, _))| s.adapter == adapter)
            .map(|(i, (s, _))| (i, common_prefix(&s.tokens, tokens)))
            .filter(|&(_, n)| n > than)
            .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
    }

    /// Snapshot `i`, marked as just used; `used` of its tokens serve a prompt.
    pub fn take(&mut self, i: usize, used: usize) -> &Snapshot {
        self.clock += 1;
        self.restored += used as u64;
        let e = &mut self.entries[i];
        e.1 = self.clock;
        &e.0
    }

    /// Whether a snapshot of `tokens` (or of more, starting with them) is kept.
    pub fn covers(&self, tokens: &[u32], adapter: u64) -> bool {
        self.entries
            .iter()
            .any(|(s, _)| s.adapter == adapter && s.tokens.starts_with(tokens))
    }

    /// Keeps `s`, dropping the snapshots it covers (those of a prefix of its tokens)
    /// and the least recently used while over budget. One larger than the whole
    /// budget is not kept.
    pub fn insert(&mut self, s: Snapshot) {
        if s.state.bytes() > self.budget {
            return;
        }
        self.entries
            .retain(|(e, _)| e.adapter != s.adapter || !s.tokens.starts_with(&e.tokens));
        self.clock += 1;
        self.entries.push((s, self.clock));
        self.evict();
    }

    /// Forgets the snapshots of an adapter no longer loaded.
    pub fn forget_adapter(&mut self, adapter: u64) {
        self.entries.retain(|(e, _)| e.adapter != adapter);
    }

    fn bytes(&self) -> u64 {
        self.entries.iter().map(|(s, _)| s.state.bytes()).sum()
    }

    fn evict(&mut self) {
        while self.bytes() > self.budget {
            let oldest = (0..self.entries.len()).min_by_key(|&i| self.entries[i].1);
            match oldest {
                Some(i) => drop(self.entries.swap_remove(i)),
                None => return,
            }
        }
    }

    pub fn stats(&self) -> PrefixStats {
        PrefixStats {
            entries: self.entries.len(),
            bytes: self.bytes(),
            budget: self.budget,
            restored_tokens: self.restored,
        }
    }
}

/// A saved session's state as bytes: what identifies its computation, its tokens and
/// the backend's own bytes of its keys and values (`CpuSnapshot::write`,
/// `GpuSession::write_state`).
pub struct Saved {
    /// `Fingerprint::of` the model, adapter and KV format.
    pub fingerprint: u64,
    pub tokens: Vec<u32>,
    pub state: Vec<u8>,
}

const MAGIC: &[u8; 8] = b"PIPPINKV";
const VERSION: u32 = 1;

impl Saved {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.raw(MAGIC);
        w.u32(VERSION);
        w.u64(self.fingerprint);
        w.u32s(&self.tokens);
        w.raw(&self.state);
        // A check of every byte before it: a damaged save is refused, not run.
        let sum = Fingerprint::default().with(&w.0).value();
        w.u64(sum);
        w.0
    }

    /// Reads `bytes` (the caller checks the fingerprint).
    pub fn from_bytes(bytes: &[u8]) -> Result<Saved> {
        let body = bytes.len().checked_sub(8).ok_or_else(damaged)?;
        let (bytes, sum) = bytes.split_at(body);
        let mut r = Reader::new(sum);
        if r.u64()? != Fingerprint::default().with(bytes).value() {
            return Err(damaged());
        }
        let mut r = Reader::new(bytes);
        if r.raw(MAGIC.len())? != MAGIC {
            return Err(Error::invalid(
                "these bytes are not a session saved by Pippin",
            ));
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(Error::invalid(format!(
                "this session was saved in format {version}; this Pippin reads format {VERSION}"
            )));
        }
        let fingerprint = r.u64()?;
        let tokens = r.u32s()?;
        Ok(Saved {
            fingerprint,
            tokens,
            state: r.rest().to_vec(),
        })
    }
}

/// A 64-bit FNV-1a hash: what identifies a model (its header), an adapter (its bytes)
/// and the format of a KV cache in a saved session.
#[derive(Clone, Copy)]
pub struct Fingerprint(u64);

impl Default for Fingerprint {
    fn default() -> Self {
        Fingerprint(0xcbf2_9ce4_8422_2325)
    }
}

impl Fingerprint {
    pub fn with(mut self, bytes: &[u8]) -> Self {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        self.0 = (self.0 ^ 0xff).wrapping_mul(0x100_0000_01b3);
        self
    }

    pub fn value(self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_save_is_an_error_at_every_length() {
        let s = Saved {
            fingerprint: 7,
            tokens: vec![1, 2, 3],
            state: vec![9; 5],
        };
        let b = s.to_bytes();
        let back = Saved::from_bytes(&b).unwrap();
        assert_eq!(back.fingerprint, 7);
        assert_eq!((back.tokens, back.state), (vec![1, 2, 3], vec![9; 5]));
        // Cut anywhere, or any byte changed: refused, never a panic.
        for n in 0..b.len() {
            assert!(Saved::from_bytes(&b[..n]).is_err(), "{n} bytes");
            let mut c = b.clone();
            c[n] ^= 1;
            assert!(Saved::from_bytes(&c).is_err(), "byte {n} changed");
        }
    }
}
