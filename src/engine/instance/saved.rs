//! What the engine keeps of conversations: the live KV cache reused by the next
//! prompt that shares its start, snapshots in the prefix cache, prefills, and a
//! conversation saved as bytes and restored.

use super::{AdapterChoice, Engine, Prefilled, Prompt};
use crate::engine::backend::{common_prefix, Backend, Want};
use crate::engine::prefix_cache::{Fingerprint, PrefixStats, Saved, Snapshot};
use crate::engine::tools;
use crate::engine::GenerateOptions;
use crate::error::{Error, Result};
use crate::gguf::Gguf;

impl Engine {
    /// Keeps what the live KV cache holds before a prompt of `ids` under `adapter`
    /// overwrites it, and restores the kept snapshot that shares more of `ids` than
    /// the live cache does (the next step reuses what it shares, as ever).
    pub(super) fn reuse(&mut self, ids: &[u32], adapter: u64) -> Result<()> {
        let (live, held_by) = self.body.held();
        let shared = match held_by == adapter {
            true => common_prefix(live, ids),
            false => 0,
        };
        let best = self.prefix.best(ids, adapter, shared);
        if shared < live.len() && !self.prefix.covers(live, held_by) {
            let s = self.snapshot()?;
            self.prefix.insert(s);
        }
        // The snapshot was looked up before one was inserted: it is found again by
        // its tokens (inserting may have dropped it, covered by the live cache's).
        if let Some((_, n)) = best {
            if let Some((i, n)) = self.prefix.best(ids, adapter, n - 1) {
                let s = self.prefix.take(i, n.min(ids.len().saturating_sub(1)));
                self.body.restore(s.state.as_ref(), &s.tokens, s.adapter)?;
            }
        }
        Ok(())
    }

    /// A copy of the live KV cache with the tokens it holds.
    pub(super) fn snapshot(&mut self) -> Result<Snapshot> {
        let state = self.body.snapshot()?;
        let (tokens, adapter) = self.body.held();
        Ok(Snapshot {
            tokens: tokens.to_vec(),
            adapter,
            state,
        })
    }

    /// Runs what the KV cache does not hold of `prompt` (a conversation without the
    /// assistant's turn opened, so later messages extend it), and nothing else: a
    /// session's `append`, or a prefix computed ahead for later conversations.
    pub async fn prefill(
        &mut self,
        prompt: &Prompt,
        opts: &GenerateOptions,
        adapter: &AdapterChoice,
    ) -> Result<Prefilled> {
        self.idle()?;
        let ids = match prompt {
            Prompt::Text(t) => self.tokenizer.encode_prompt(t, false)?,
            Prompt::Chat(m) => tools::prepare_as(&self.tokenizer, m, opts, false)?.ids,
        };
        let adapter = self.adapter(adapter)?;
        let ctx = self.config().context_length.min(self.context_window());
        if ids.len() >= ctx {
            return Err(Error::context_full(format!(
                "the conversation has {} tokens but the context holds {ctx} (and one more is needed to answer)",
                ids.len()
            )));
        }
        self.reuse(&ids, adapter.as_ref().map_or(0, |a| a.id()))?;
        let mut backend = self.body.backend(adapter.as_deref());
        let keep = common_prefix(backend.tokens(), &ids);
        backend.truncate(keep);
        let keep = backend.tokens().len().min(keep);
        if keep < ids.len() {
            let run = backend.forward(&ids[keep..], Want::top(1)).await;
            if let Err(e) = run {
                // What the cache holds is unknown after a failed step: forget it.
                backend.truncate(0);
                return Err(e);
            }
        }
        Ok(Prefilled {
            cached_tokens: keep,
            computed_tokens: ids.len() - keep,
        })
    }

    /// A conversation's state as bytes: the KV cache of `prompt` (as `prefill` leaves
    /// it) and what identifies its computation, for `restore` after a reload.
    pub async fn save(
        &mut self,
        prompt: &Prompt,
        opts: &GenerateOptions,
        adapter: &AdapterChoice,
    ) -> Result<Vec<u8>> {
        self.prefill(prompt, opts, adapter).await?;
        let name = match self.adapter(adapter)? {
            Some(_) => self.adapter_name(adapter),
            None => None,
        };
        let saved = Saved {
            fingerprint: self.fingerprint(name.as_deref()),
            tokens: self.body.held().0.to_vec(),
            state: self.body.write_state().await?,
        };
        Ok(saved.to_bytes())
    }

    /// The model's, adapter `name`'s and the KV cache's identity.
    pub(super) fn fingerprint(&self, adapter: Option<&str>) -> u64 {
        let a = adapter.and_then(|n| self.adapter_prints.iter().find(|p| p.0 == n));
        let a = a.map(|p| p.1);
        let mut f = Fingerprint::default()
            .with(&self.print.to_le_bytes())
            .with(&a.unwrap_or(0).to_le_bytes())
            .with(self.body.layout().as_bytes());
        // The base model's KV differs with its recovery adapter on or off (files
        // without one keep the fingerprint they always had).
        if adapter.is_none() && self.recovery.is_some() {
            f = f.with(&[u8::from(self.recovery_on)]);
        }
        f.value()
    }

    /// Makes the KV cache hold a saved conversation again (`save`'s bytes): the next
    /// reply that continues it runs only what is new. Refused (`BadOptions`) for bytes
    /// saved from another model, adapter (none loaded here with the same files), KV
    /// format or backend, or damaged.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<usize> {
        self.idle()?;
        let saved = Saved::from_bytes(bytes)?;
        let names = std::iter::once(None).chain(self.adapters.keys().map(|n| Some(n.clone())));
        let names: Vec<Option<String>> = names.collect();
        let Some(name) = names
            .into_iter()
            .find(|n| self.fingerprint(n.as_deref()) == saved.fingerprint)
        else {
            return Err(Error::invalid(
                "this session was saved from another model, adapter, KV cache format or backend: it can only be restored where it was computed",
            ));
        };
        if saved.tokens.len() >= self.context_window() {
            return Err(Error::context_full(
                "this saved session is longer than the context",
            ));
        }
        let id = match &name {
            Some(n) => self.adapters.get(n).map_or(0, |a| a.id()),
            None => self.base_adapter().map_or(0, |a| a.id()),
        };
        let (live, held_by) = self.body.held();
        if !live.is_empty() && !self.prefix.covers(live, held_by) {
            let s = self.snapshot()?;
            self.prefix.insert(s);
        }
        if let Err(e) = self.body.read_state(&saved.state, &saved.tokens, id) {
            self.reset()?;
            return Err(e);
        }
        Ok(saved.tokens.len())
    }

    /// The prefix cache's contents and what it saved.
    pub fn prefix_stats(&self) -> PrefixStats {
        self.prefix.stats()
    }

    /// Bytes the prefix cache may hold (snapshots over it are dropped, oldest first).
    pub fn set_prefix_budget(&mut self, bytes: u64) {
        self.prefix.set_budget(bytes);
    }
}

/// A model's fingerprint: its header (metadata and tensor table), which names and
/// shapes every weight and where it lies in the file.
pub(super) fn model_print(g: &Gguf) -> u64 {
    use crate::gguf::{Array, Value};
    let mut f = Fingerprint::default();
    for (k, v) in g.metadata.iter() {
        f = f.with(k.as_bytes());
        // Strings and the vocabulary as they are; other values by their JSON-free
        // integer form (a float's bits), arrays of numbers by their length.
        f = match v {
            Value::Str(s) => f.with(s.as_bytes()),
            Value::Array(Array::Str(v)) => v.iter().fold(f, |f, s| f.with(s.as_bytes())),
            Value::Array(_) => f,
            Value::U32(x) => f.with(&x.to_le_bytes()),
            Value::U64(x) => f.with(&x.to_le_bytes()),
            Value::F32(x) => f.with(&x.to_le_bytes()),
            _ => f,
        };
    }
    for t in &g.tensors {
        let at = [t.ty.id() as u64, t.shard as u64, t.offset, t.n_bytes];
        let dims = t.dims.iter().chain(&at).flat_map(|d| d.to_le_bytes());
        f = f.with(t.name.as_bytes()).with(&dims.collect::<Vec<u8>>());
    }
    f.value()
}
