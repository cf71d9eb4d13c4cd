//! `Engine`: one loaded model with everything a conversation needs — the GPU model, its
//! tokenizer, the resident LoRA adapters and the session (KV cache) — and the rule that
//! a reply owns it until the reply ends. The browser bindings, the CLI and the bench
//! drive this; none of them assembles its own.
//!
//! A reply is started by `start` and identified by its id: while it runs, only `next`,
//! `abort` and `release` with that id touch the engine; every other call that would
//! change what the reply reads (another reply, an adapter change, `reset`) is refused
//! with the "already generating" error. A reply ends when it is done, stopped, aborted,
//! released (the caller dropped it) or failed; a failed reply reports its error again
//! if asked, never a quiet end.

mod adapters;
mod draft;
mod saved;

use saved::model_print;

use super::backend::{AnyBackend, BackendKind, GpuBytes};
use super::backend::{LoadedAdapter, LoadedModel, SessionOptions};
use super::cpu::team::Team;
use super::cpu::{CpuLoaded, CpuState};
use super::gpu::{GpuLoaded, GpuModel, GpuSession};
use super::prefix_cache::{Fingerprint, PrefixCache};
use super::tools::{self, Prepared};
use super::{Event, GenerateOptions, Generation, Usage};
use crate::adapters::Adapter;
use crate::error::{Error, Result};
use crate::gguf::{ByteSource, Gguf};
use crate::gpu::Gpu;
use crate::guided::GrammarCache;
use crate::model::Config;
use crate::tokenizer::{Message, Tokenizer};
use std::any::Any;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

/// An adapter resident on the engine's backend, shared with the replies that use it.
type Resident = Rc<dyn LoadedAdapter>;

/// What a reply answers: a text to continue, or a conversation in the chat template.
#[derive(Clone, Debug)]
pub enum Prompt {
    Text(String),
    Chat(Vec<Message>),
}

impl Prompt {
    /// Its token ids under `tk`, as a reply with `opts` runs them, with the options
    /// that reply runs with (a tool call's grammar added) and its call reader.
    pub fn prepare(&self, tk: &Tokenizer, opts: &GenerateOptions) -> Result<Prepared> {
        match self {
            Prompt::Text(_) if !opts.tools.is_empty() => Err(Error::invalid(
                "tools need a conversation: use chat(), not generate()",
            )),
            Prompt::Text(t) => Ok(Prepared {
                ids: tk.encode_prompt(t, false)?,
                opts: opts.clone(),
                calls: None,
            }),
            Prompt::Chat(m) => tools::prepare(tk, m, opts),
        }
    }
}

/// The adapter a reply uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdapterChoice {
    /// The one `use_adapter` made active (none when none was).
    Active,
    /// The base model.
    None,
    Named(String),
}

/// The message of every call refused because a reply owns the engine.
pub fn busy() -> Error {
    Error::Busy(
        "Pippin is already generating on this model: wait for the running reply to finish or abort it (calls are not queued)"
            .into(),
    )
}

/// A resident adapter, shared with the reply that uses it.
pub struct ResidentAdapter {
    pub name: String,
    pub bytes: u64,
    pub rank: usize,
    pub active: bool,
}

struct Running {
    id: u64,
    generation: Generation,
    adapter: Option<Resident>,
}

/// How the last reply ended, so its caller can ask again and get the same answer.
enum Ended {
    Done(Event),
    Failed(Error),
}

pub struct Engine {
    body: Box<dyn LoadedModel>,
    tokenizer: Tokenizer,
    /// Why this backend runs the model (shown by `info().backend`).
    reason: String,
    adapters: BTreeMap<String, Resident>,
    active: Option<String>,
    running: Option<Running>,
    ended: Option<(u64, Ended)>,
    next_id: u64,
    /// The vocabulary compiled for guided replies, on the first one.
    grammars: GrammarCache,
    /// A draft model proposing speculative decoding's guesses (`set_draft`), on any
    /// backend; its backend never carries an adapter.
    draft: Option<Box<dyn LoadedModel>>,
    /// Copies of KV state other conversations and prefixes left (`prefix_cache`).
    prefix: PrefixCache,
    /// What identifies the model's computation in a saved session: its GGUF header.
    print: u64,
    /// Each loaded adapter's fingerprint (of its files), by name.
    adapter_prints: Vec<(String, u64)>,
    /// The recovery adapter the model's file carries (`adapters::recovery`), parsed
    /// and resident: it runs under every reply, and task adapters stack on it.
    recovery: Option<(Adapter, Resident)>,
    recovery_on: bool,
}

/// What a prefill did: prompt tokens found in the KV cache (or a kept snapshot) and
/// tokens run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Prefilled {
    pub cached_tokens: usize,
    pub computed_tokens: usize,
}

impl Engine {
    /// Loads a model from a byte stream (the tokenizer is built from the header,
    /// before any weight is read) and opens its session; `warm` compiles its pipelines.
    pub async fn load<S: ByteSource>(
        gpu: Gpu,
        src: &mut S,
        session: SessionOptions,
        progress: crate::gguf::Progress<'_>,
    ) -> Result<Engine> {
        let (mut tokenizer, mut print) = (None, 0);
        let max_binding = gpu.max_binding();
        let mut check = |g: &Gguf| {
            let c = crate::model::Config::from_gguf(g)?;
            super::gpu::GpuFootprint::check(g, &c, &session, max_binding)?;
            tokenizer = Some(Tokenizer::from_gguf(&g.metadata)?);
            print = model_print(g);
            Ok(())
        };
        let (mut model, gguf) =
            GpuModel::load_checked(gpu, src, progress, &mut check, Some(&session)).await?;
        let tokenizer =
            tokenizer.ok_or_else(|| Error::Tokenizer("no tokenizer was built".into()))?;
        let tensors = std::mem::take(&mut model.adapter_tensors);
        let mut e = Self::new(model, tokenizer, session)?;
        e.print = print;
        e.take_recovery(&gguf, tensors)?;
        Ok(e)
    }

    /// Loads a model for the CPU backend (weights in their quantized form), `reason`
    /// saying why it runs there.
    pub async fn load_cpu<S: ByteSource>(
        src: &mut S,
        session: SessionOptions,
        progress: crate::gguf::Progress<'_>,
        reason: &str,
    ) -> Result<Engine> {
        Self::load_cpu_shared(src, session, progress, reason, None).await
    }

    /// As `load_cpu`, the large matrices' rows split across `team`'s threads (the
    /// browser's workers); `session.cpu_memory` is then each thread's limit.
    pub async fn load_cpu_shared<S: ByteSource>(
        src: &mut S,
        session: SessionOptions,
        progress: crate::gguf::Progress<'_>,
        reason: &str,
        team: Option<Arc<dyn Team>>,
    ) -> Result<Engine> {
        let threads = team.as_ref().map_or(1, |t| t.helpers() + 1);
        let (mut tokenizer, mut print) = (None, 0);
        let mut check = |g: &Gguf| {
            print = model_print(g);
            if let Some(limit) = session.cpu_memory {
                let c = crate::model::Config::from_gguf(g)?;
                let context = c.context_length.min(session.max_context.max(1));
                let need = super::cpu::Footprint::of(g, &c, context, session.kv);
                need.shared_by(threads).check(limit)?;
            }
            tokenizer = Some(Tokenizer::from_gguf(&g.metadata)?);
            Ok(())
        };
        let max = session.max_context;
        let (model, gguf, tensors) =
            super::cpu::load_shared(src, max, progress, &mut check, team.as_ref()).await?;
        let tokenizer =
            tokenizer.ok_or_else(|| Error::Tokenizer("no tokenizer was built".into()))?;
        let budget = session.snapshot_budget(&model.config);
        let body = Box::new(CpuLoaded {
            model: Box::new(model),
            state: CpuState::new(session.kv).with_team(team),
        });
        let mut e = Self::with_body(body, tokenizer, reason, budget);
        e.print = print;
        e.take_recovery(&gguf, tensors)?;
        Ok(e)
    }

    /// Opens a GGUF file (natively).
    pub async fn load_file(
        gpu: Gpu,
        path: &std::path::Path,
        session: SessionOptions,
    ) -> Result<Engine> {
        let mut src = Self::open(path)?;
        let mut e = Self::load(gpu, &mut src, session, &mut |_, _| {}).await?;
        e.warm()?;
        Ok(e)
    }

    /// Opens a GGUF file for the CPU backend (natively).
    pub async fn load_file_cpu(path: &std::path::Path, session: SessionOptions) -> Result<Engine> {
        let mut src = Self::open(path)?;
        Self::load_cpu(&mut src, session, &mut |_, _| {}, "asked for").await
    }

    /// A GGUF file, or every file of a split model given its first.
    fn open(path: &std::path::Path) -> Result<impl ByteSource> {
        crate::gguf::split::open_files(path)
    }

    /// Compiles every pipeline a conversation uses and records the decode step, so
    /// the first reply does not (the browser shows this as the "compile" phase).
    pub fn warm(&mut self) -> Result<()> {
        self.idle()?;
        self.body.warm()
    }

    /// Dispatches of a decode step with the active adapter, and how many of them are
    /// outside the layers.
    pub fn decode_dispatches(&mut self) -> Result<(usize, usize)> {
        self.idle()?;
        let adapter = self.active_adapter();
        let (model, session) = self.gpu_parts()?;
        let adapter = adapter
            .as_ref()
            .and_then(|a| (a.as_ref() as &dyn Any).downcast_ref());
        session.decode_dispatch_counts(model, adapter)
    }

    /// Dispatches per token of the running (or last) reply's decode steps.
    pub fn dispatches_per_token(&self) -> Option<usize> {
        let id = self
            .running
            .as_ref()
            .and_then(|r| r.adapter.as_ref())
            .map_or(0, |a| a.id());
        self.body.recorded_dispatches(id)
    }

    pub fn new(model: GpuModel, tokenizer: Tokenizer, session: SessionOptions) -> Result<Engine> {
        let budget = session.snapshot_budget(&model.config);
        let session = GpuSession::new(&model, session)?;
        let body = Box::new(GpuLoaded {
            model: Box::new(model),
            session: Box::new(session),
        });
        Ok(Self::with_body(body, tokenizer, "asked for", budget))
    }

    fn with_body(
        body: Box<dyn LoadedModel>,
        tokenizer: Tokenizer,
        reason: &str,
        budget: u64,
    ) -> Engine {
        // Without a GGUF header (a model built in memory), its shape identifies it.
        let c = body.config();
        let shape = [
            c.n_layers,
            c.hidden,
            c.n_heads,
            c.n_kv_heads,
            c.head_dim,
            c.vocab_size,
        ];
        let shape: Vec<u8> = shape
            .iter()
            .flat_map(|d| (*d as u64).to_le_bytes())
            .collect();
        let print = Fingerprint::default().with(&shape).value();
        Engine {
            body,
            tokenizer,
            reason: reason.to_string(),
            adapters: BTreeMap::new(),
            active: None,
            running: None,
            ended: None,
            next_id: 1,
            grammars: GrammarCache::default(),
            draft: None,
            prefix: PrefixCache::new(budget),
            print,
            adapter_prints: Vec::new(),
            recovery: None,
            recovery_on: false,
        }
    }

    /// Says why this backend was chosen (shown with `backend_kind`).
    pub fn set_reason(&mut self, reason: &str) {
        self.reason = reason.to_string();
    }

    /// The backend that runs the model, and why it was chosen.
    pub fn backend_kind(&self) -> (BackendKind, &str) {
        (self.body.kind(), &self.reason)
    }

    /// Threads the CPU backend runs on (1 on the GPU).
    pub fn threads(&self) -> usize {
        self.body.threads()
    }

    pub fn config(&self) -> &Config {
        self.body.config()
    }

    /// The GPU model (none on the CPU backend).
    pub fn gpu_model(&self) -> Option<&GpuModel> {
        let gpu = (self.body.as_ref() as &dyn Any).downcast_ref::<GpuLoaded>();
        gpu.map(|g| g.model.as_ref())
    }

    /// The GPU model, or the error of asking the CPU backend for one.
    pub fn require_gpu(&self) -> Result<&GpuModel> {
        self.gpu_model().ok_or_else(not_gpu)
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn gpu_parts(&mut self) -> Result<(&GpuModel, &mut GpuSession)> {
        match (self.body.as_mut() as &mut dyn Any).downcast_mut::<GpuLoaded>() {
            Some(g) => Ok((&g.model, &mut g.session)),
            None => Err(not_gpu()),
        }
    }

    /// The model and its session, for the bench and tests (refused while a reply
    /// runs, and on the CPU backend).
    pub fn parts(&mut self) -> Result<(&GpuModel, &mut GpuSession)> {
        self.idle()?;
        self.gpu_parts()
    }

    /// The model as a generate-loop backend with the active adapter (perplexity,
    /// benchmarks), refused while a reply runs.
    pub fn backend(&mut self) -> Result<AnyBackend<'_>> {
        Ok(self.backends()?.0)
    }

    /// As `backend`, with the draft model's backend when there is one
    /// (`generate_drafted`).
    pub fn backends(&mut self) -> Result<(AnyBackend<'_>, Option<AnyBackend<'_>>)> {
        self.idle()?;
        // Field by field (the body is borrowed mutably beside): `active_adapter`.
        let adapter = self
            .active
            .as_deref()
            .and_then(|n| self.adapters.get(n))
            .or(self
                .recovery
                .as_ref()
                .filter(|_| self.recovery_on)
                .map(|r| &r.1))
            .map(|a| a.as_ref());
        let draft = self.draft.as_deref_mut().map(|d| d.backend(None));
        Ok((self.body.backend(adapter), draft))
    }

    /// Loads a PEFT adapter folder (`adapter_config.json`, `adapter_model.safetensors`)
    /// and makes it active (natively).
    pub fn load_adapter_dir(&mut self, name: &str, dir: &std::path::Path) -> Result<()> {
        let read = |f: &str| {
            std::fs::read(dir.join(f))
                .map_err(|e| Error::invalid(format!("cannot read {}: {e}", dir.join(f).display())))
        };
        self.load_adapter(
            name,
            &read("adapter_config.json")?,
            &read("adapter_model.safetensors")?,
        )?;
        self.use_adapter(Some(name))
    }

    /// Whether a reply owns the engine.
    pub fn is_busy(&self) -> bool {
        self.running.is_some()
    }

    fn idle(&self) -> Result<()> {
        if self.running.is_some() {
            return Err(busy());
        }
        Ok(())
    }

    /// Token ids of a prompt, as a reply with `opts` would run them, with the
    /// options that reply runs with (a tool call's grammar added) and its call reader.
    pub fn prepare(&self, prompt: &Prompt, opts: &GenerateOptions) -> Result<Prepared> {
        prompt.prepare(&self.tokenizer, opts)
    }

    /// Starts a reply: checks the request, runs the prompt (the part of the
    /// conversation not already in the KV cache) and returns the reply's id.
    pub async fn start(
        &mut self,
        prompt: &Prompt,
        opts: &GenerateOptions,
        adapter: &AdapterChoice,
    ) -> Result<u64> {
        let asked = web_time::Instant::now();
        self.idle()?;
        let p = self.prepare(prompt, opts)?;
        let adapter = self.adapter(adapter)?;
        self.reuse(&p.ids, adapter.as_ref().map_or(0, |a| a.id()))?;
        let mut backend = self.body.backend(adapter.as_deref());
        let mut generation = Generation::start_cached(
            &mut backend,
            &self.tokenizer,
            &p.ids,
            &p.opts,
            &self.grammars,
        )
        .await?;
        drop(backend);
        if let Some(d) = self.draft.as_deref_mut() {
            generation.prefill_draft(&mut d.backend(None)).await?;
        }
        generation.asked_at(asked);
        if let Some(r) = p.calls {
            generation.expect_calls(r);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.ended = None;
        self.running = Some(Running {
            id,
            generation,
            adapter,
        });
        Ok(id)
    }

    /// The next piece of reply `id`, or its end. A reply that ended answers with how it
    /// ended (its last event, or its error) again.
    pub async fn next(&mut self, id: u64) -> Result<Event> {
        let Some(r) = self.running.as_mut().filter(|r| r.id == id) else {
            return self.ended_as(id);
        };
        let mut backend = self.body.backend(r.adapter.as_deref());
        let mut draft = self.draft.as_deref_mut().map(|d| d.backend(None));
        let next = r
            .generation
            .next_with(&mut backend, draft.as_mut(), &self.tokenizer)
            .await;
        // The backends borrow the engine; `end` takes it.
        drop((backend, draft));
        match next {
            Ok(e @ Event::Done { .. }) => {
                self.end(id, Ended::Done(e.clone()));
                Ok(e)
            }
            Ok(e) => Ok(e),
            Err(e) => {
                let again = e.clone();
                self.end(id, Ended::Failed(e));
                Err(again)
            }
        }
    }

    fn end(&mut self, id: u64, how: Ended) {
        self.running = None;
        self.ended = Some((id, how));
    }

    fn ended_as(&self, id: u64) -> Result<Event> {
        match &self.ended {
            Some((e, Ended::Done(ev))) if *e == id => Ok(ev.clone()),
            Some((e, Ended::Failed(err))) if *e == id => Err(err.clone()),
            _ if self.running.is_some() => Err(busy()),
            _ => Err(Error::invalid(
                "this reply has ended: start another with generate() or chat()",
            )),
        }
    }

    /// Ends reply `id` now (what was run stays in the KV cache); its last event. Other
    /// ids are ignored: a stale reply cannot stop a newer one.
    pub fn abort(&mut self, id: u64) -> Option<Event> {
        let r = self.running.as_mut().filter(|r| r.id == id)?;
        let done = r.generation.abort();
        self.end(id, Ended::Done(done.clone()));
        Some(done)
    }

    /// The caller let go of reply `id` (dropped it, or returned from its iterator).
    pub fn release(&mut self, id: u64) {
        self.abort(id);
    }

    /// The usage so far of the running reply (or the last one).
    pub fn usage(&self) -> Option<Usage> {
        if let Some(r) = &self.running {
            return Some(r.generation.usage().clone());
        }
        match &self.ended {
            Some((_, Ended::Done(Event::Done { usage, .. }))) => Some(usage.clone()),
            _ => None,
        }
    }

    /// Most tokens a conversation may hold: the KV cache's length.
    pub fn context_window(&self) -> usize {
        self.body.context_window()
    }

    /// Forgets the conversation (the KV cache stays allocated).
    pub fn reset(&mut self) -> Result<()> {
        self.idle()?;
        self.body.clear();
        if let Some(d) = &mut self.draft {
            d.clear();
        }
        Ok(())
    }

    /// GPU memory Pippin holds for this model, by kind (all zero on the CPU backend).
    pub fn gpu_bytes(&self) -> GpuBytes {
        let held = self.body.gpu_bytes();
        match self.body.kind() {
            BackendKind::Webgpu => GpuBytes {
                adapters: self.adapters.values().map(|a| a.bytes()).sum(),
                ..held
            },
            BackendKind::Cpu => held,
        }
    }

    /// Bytes of the model's weights (on the GPU, or in memory on the CPU backend).
    pub fn weight_bytes(&self) -> u64 {
        self.body.weight_bytes()
    }

    pub fn kv_cache_bytes(&self) -> u64 {
        self.body.kv_bytes()
    }

    /// Tokens the KV cache holds.
    pub fn context_tokens(&self) -> usize {
        self.body.len()
    }
}

fn not_gpu() -> Error {
    Error::unsupported("this model runs on the CPU backend, not on a GPU")
}
