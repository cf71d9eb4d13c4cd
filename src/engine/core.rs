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

use super::gpu_adapter::GpuAdapter;
use super::tools::{self, Prepared};
use super::{Event, GenerateOptions, Generation, GpuBackend, GpuModel, GpuSession, Usage};
use crate::error::{Error, Result};
use crate::gguf::{ByteSource, Gguf};
use crate::gpu::Gpu;
use crate::guided::GrammarCache;
use crate::model::Config;
use crate::tokenizer::{Message, Tokenizer};
use std::collections::BTreeMap;
use std::rc::Rc;

pub use super::gpu_session::SessionOptions;

/// What a reply answers: a text to continue, or a conversation in the chat template.
#[derive(Clone, Debug)]
pub enum Prompt {
    Text(String),
    Chat(Vec<Message>),
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
    adapter: Option<Rc<GpuAdapter>>,
}

/// Bytes of the GPU buffers an engine holds, by what they hold (the quantized weights
/// as uploaded; norms and other vectors, a few KB, are not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuBytes {
    pub weights: u64,
    pub kv_cache: u64,
    pub scratch: u64,
    pub adapters: u64,
}

/// How the last reply ended, so its caller can ask again and get the same answer.
enum Ended {
    Done(Event),
    Failed(Error),
}

pub struct Engine {
    model: GpuModel,
    tokenizer: Tokenizer,
    session: GpuSession,
    adapters: BTreeMap<String, Rc<GpuAdapter>>,
    active: Option<String>,
    running: Option<Running>,
    ended: Option<(u64, Ended)>,
    next_id: u64,
    /// The vocabulary compiled for guided replies, on the first one.
    grammars: GrammarCache,
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
        let mut tokenizer = None;
        let mut check = |g: &Gguf| {
            tokenizer = Some(Tokenizer::from_gguf(&g.metadata)?);
            Ok(())
        };
        let (model, _) = GpuModel::load_checked(gpu, src, progress, &mut check).await?;
        let tokenizer =
            tokenizer.ok_or_else(|| Error::Tokenizer("no tokenizer was built".into()))?;
        Self::new(model, tokenizer, session)
    }

    /// Opens a GGUF file (natively).
    pub async fn load_file(
        gpu: Gpu,
        path: &std::path::Path,
        session: SessionOptions,
    ) -> Result<Engine> {
        let file = std::fs::File::open(path)
            .map_err(|e| Error::invalid(format!("cannot open {}: {e}", path.display())))?;
        let len = file.metadata()?.len();
        let mut src = crate::gguf::ReadSource {
            reader: std::io::BufReader::with_capacity(1 << 20, file),
            len: Some(len),
        };
        let mut e = Self::load(gpu, &mut src, session, &mut |_, _| {}).await?;
        e.warm()?;
        Ok(e)
    }

    /// Compiles every pipeline a conversation uses and records the decode step, so
    /// the first reply does not (the browser shows this as the "compile" phase).
    pub fn warm(&mut self) -> Result<()> {
        self.idle()?;
        self.session.warm(&self.model)
    }

    /// Dispatches of a decode step with the active adapter, and how many of them are
    /// outside the layers.
    pub fn decode_dispatches(&mut self) -> Result<(usize, usize)> {
        self.idle()?;
        let adapter = self
            .active
            .as_deref()
            .and_then(|n| self.adapters.get(n))
            .cloned();
        self.session
            .decode_dispatch_counts(&self.model, adapter.as_deref())
    }

    /// Dispatches per token of the running (or last) reply's decode steps.
    pub fn dispatches_per_token(&self) -> Option<usize> {
        let id = self
            .running
            .as_ref()
            .and_then(|r| r.adapter.as_ref())
            .map_or(0, |a| a.id);
        self.session.recorded_dispatches(id)
    }

    pub fn new(model: GpuModel, tokenizer: Tokenizer, session: SessionOptions) -> Result<Engine> {
        let session = GpuSession::new(&model, session)?;
        Ok(Engine {
            model,
            tokenizer,
            session,
            adapters: BTreeMap::new(),
            active: None,
            running: None,
            ended: None,
            next_id: 1,
            grammars: GrammarCache::default(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.model.config
    }

    pub fn model(&self) -> &GpuModel {
        &self.model
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The model and its session, for the bench and tests (refused while a reply
    /// runs).
    pub fn parts(&mut self) -> Result<(&GpuModel, &mut GpuSession)> {
        self.idle()?;
        Ok((&self.model, &mut self.session))
    }

    /// The session as a generate-loop backend with the active adapter (perplexity,
    /// benchmarks), refused while a reply runs.
    pub fn backend(&mut self) -> Result<GpuBackend<'_>> {
        self.idle()?;
        let adapter = self
            .active
            .as_deref()
            .and_then(|n| self.adapters.get(n))
            .map(|a| a.as_ref());
        Ok(GpuBackend::with_adapter(
            &self.model,
            &mut self.session,
            adapter,
        ))
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
        match prompt {
            Prompt::Text(_) if !opts.tools.is_empty() => Err(Error::invalid(
                "tools need a conversation: use chat(), not generate()",
            )),
            Prompt::Text(t) => Ok(Prepared {
                ids: self.tokenizer.encode_prompt(t, false)?,
                opts: opts.clone(),
                calls: None,
            }),
            Prompt::Chat(m) => tools::prepare(&self.tokenizer, m, opts),
        }
    }

    fn adapter(&self, choice: &AdapterChoice) -> Result<Option<Rc<GpuAdapter>>> {
        let name = match choice {
            AdapterChoice::Active => self.active.as_deref(),
            AdapterChoice::None => None,
            AdapterChoice::Named(n) => Some(n.as_str()),
        };
        match name {
            None => Ok(None),
            Some(n) => self
                .adapters
                .get(n)
                .cloned()
                .map(Some)
                .ok_or_else(|| Error::invalid(format!("no adapter named {n:?} is loaded"))),
        }
    }

    /// Starts a reply: checks the request, runs the prompt (the part of the
    /// conversation not already in the KV cache) and returns the reply's id.
    pub async fn start(
        &mut self,
        prompt: &Prompt,
        opts: &GenerateOptions,
        adapter: &AdapterChoice,
    ) -> Result<u64> {
        self.idle()?;
        let p = self.prepare(prompt, opts)?;
        let adapter = self.adapter(adapter)?;
        let mut backend =
            GpuBackend::with_adapter(&self.model, &mut self.session, adapter.as_deref());
        let mut generation = Generation::start_cached(
            &mut backend,
            &self.tokenizer,
            &p.ids,
            &p.opts,
            &self.grammars,
        )
        .await?;
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
        let mut backend =
            GpuBackend::with_adapter(&self.model, &mut self.session, r.adapter.as_deref());
        match r.generation.next(&mut backend, &self.tokenizer).await {
            Ok(e @ Event::Done { .. }) => {
                self.end(id, Ended::Done(e.clone()));
                Ok(e)
            }
            Ok(e) => Ok(e),
            Err(e) => {
                let again = e.again();
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
            Some((e, Ended::Failed(err))) if *e == id => Err(err.again()),
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

    /// Uploads a PEFT LoRA adapter under `name` (replacing one of that name).
    pub fn load_adapter(&mut self, name: &str, config: &[u8], weights: &[u8]) -> Result<()> {
        self.idle()?;
        let adapter = crate::adapters::parse(config, weights, &self.model.config)?;
        let gpu = GpuAdapter::upload(&self.model.gpu, &adapter)?;
        self.adapters.insert(name.to_string(), Rc::new(gpu));
        Ok(())
    }

    /// The adapter of replies that do not name one (`None`: the base model).
    pub fn use_adapter(&mut self, name: Option<&str>) -> Result<()> {
        self.idle()?;
        if let Some(n) = name {
            self.adapter(&AdapterChoice::Named(n.into()))?;
        }
        self.active = name.map(str::to_string);
        Ok(())
    }

    /// Frees an adapter's GPU memory; false when there was none of that name.
    pub fn unload_adapter(&mut self, name: &str) -> Result<bool> {
        self.idle()?;
        if self.active.as_deref() == Some(name) {
            self.active = None;
        }
        Ok(self.adapters.remove(name).is_some())
    }

    pub fn adapters(&self) -> Vec<ResidentAdapter> {
        self.adapters
            .iter()
            .map(|(name, a)| ResidentAdapter {
                name: name.clone(),
                bytes: a.bytes,
                rank: a.rank,
                active: self.active.as_deref() == Some(name),
            })
            .collect()
    }

    /// Forgets the conversation (the KV cache stays allocated).
    pub fn reset(&mut self) -> Result<()> {
        self.idle()?;
        self.session.clear();
        Ok(())
    }

    /// GPU memory Pippin holds for this model, by kind.
    pub fn gpu_bytes(&self) -> GpuBytes {
        GpuBytes {
            weights: self.model.weight_bytes,
            kv_cache: self.session.kv_bytes(),
            scratch: self.session.scratch_bytes(),
            adapters: self.adapters.values().map(|a| a.bytes).sum(),
        }
    }

    pub fn weight_bytes(&self) -> u64 {
        self.model.weight_bytes
    }

    pub fn kv_cache_bytes(&self) -> u64 {
        self.session.kv_bytes()
    }

    /// Tokens the KV cache holds.
    pub fn context_tokens(&self) -> usize {
        self.session.len()
    }
}
