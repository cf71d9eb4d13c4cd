//! JavaScript bindings (wasm-bindgen): translation between JS values and
//! `engine::Engine`, nothing else. The hand-written layer in `js/` turns these into the
//! public API (async iterators, AbortSignal, Cache Storage, the Worker).

mod report;
mod source;
mod threads;

use report::{AdapterInfo, Chunk, Info, LoadTimes, Stats};

use crate::engine::choice::{choose, without_webgpu, BackendRequest, WebGpuProbe};
use crate::engine::{
    busy, AdapterChoice, BackendKind, Engine, GenerateOptions, Prompt, SessionOptions,
};
use crate::error::Error;
use crate::gpu::{Caps, Gpu};
use crate::quant::kv::KvFormat;
use crate::tokenizer::Message;
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
pub use threads::{Helper, JsTeam};
use wasm_bindgen::prelude::*;

/// Counts the heap, for `stats()` (see `memory`).
#[global_allocator]
static HEAP: crate::memory::Counting = crate::memory::Counting;

/// What every call returns to JavaScript: its value, or a thrown `PippinError`.
type JsResult<T> = Result<T, JsValue>;

/// A JS `Error` named "PippinError" with a stable `code` (js/errors.js documents the
/// codes; `Error::code` gives the engine's).
fn js_error(code: &str, msg: &str) -> JsValue {
    let e = js_sys::Error::new(msg);
    e.set_name("PippinError");
    // Setting a property on a fresh Error object cannot fail.
    let _ = js_sys::Reflect::set(&e, &"code".into(), &code.into());
    e.into()
}

fn js_err(e: Error) -> JsValue {
    js_error(e.code(), &e.to_string())
}

/// An option or argument JavaScript passed that the engine cannot take.
fn bad(e: impl std::fmt::Display) -> JsValue {
    js_error("BadOptions", &e.to_string())
}

/// Values cross to JavaScript as JSON text (`JSON.parse`): serde_json is linked
/// anyway, and a second serde format for JS values (serde-wasm-bindgen) cost the
/// wasm ~30 KB.
fn to_js<T: Serialize>(v: &T) -> JsResult<JsValue> {
    let text = serde_json::to_string(v).map_err(|e| js_error("Internal", &e.to_string()))?;
    js_sys::JSON::parse(&text)
}

/// `v` read as a `T` through `JSON.stringify` (functions and `undefined` fields are
/// left out, as a missing field). The error names what was wrong, not where in the
/// JSON text the engine made of it.
fn from_js<T: for<'de> Deserialize<'de>>(v: &JsValue) -> Result<T, String> {
    let text: String = js_sys::JSON::stringify(v)
        .map_err(|_| "cannot be read as JSON (a cycle, or a BigInt)".to_string())?
        .into();
    serde_json::from_str(&text).map_err(|e| {
        let msg = e.to_string();
        let at = format!(" at line {} column {}", e.line(), e.column());
        msg.strip_suffix(&at).unwrap_or(&msg).to_string()
    })
}

/// A Promise of `f`, rejected with a JS `Error` when it fails.
fn promise(f: impl std::future::Future<Output = JsResult<JsValue>> + 'static) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(f)
}

fn options<T: for<'de> Deserialize<'de> + Default>(v: JsValue) -> JsResult<T> {
    if v.is_undefined() || v.is_null() {
        Ok(T::default())
    } else {
        from_js(&v).map_err(bad)
    }
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct LoadOptions {
    kv_cache: Option<KvFormat>,
    max_context: Option<usize>,
    /// The page saw a CPU adapter (SwiftShader): wgpu cannot tell from inside.
    software_adapter: bool,
    /// "auto" (default), "webgpu" or "cpu".
    backend: BackendRequest,
    /// What the page found of WebGPU (`engine::choice::WebGpuProbe`).
    webgpu: WebGpuProbe,
    /// Limits to hold the GPU to, under what it has (to try a model as a smaller
    /// device would run it).
    gpu_limits: Option<GpuLimits>,
    /// Bytes of KV state kept for other sessions and common prefixes.
    session_memory: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct GpuLimits {
    max_storage_buffer_binding_size: Option<u64>,
}

/// `undefined`: the active adapter; `null`: none; a string: that one.
fn adapter_choice(v: &JsValue) -> JsResult<AdapterChoice> {
    if v.is_undefined() {
        Ok(AdapterChoice::Active)
    } else if v.is_null() {
        Ok(AdapterChoice::None)
    } else {
        v.as_string()
            .map(AdapterChoice::Named)
            .ok_or_else(|| bad("adapter must be a name or null"))
    }
}

/// The engine, held in a slot that an async call (a reply's start or step) takes for
/// its duration: no `RefCell` borrow spans an await, and a call arriving meanwhile
/// finds the slot empty and is refused as busy.
struct Slot {
    core: RefCell<Option<Engine>>,
    disposed: Cell<bool>,
    /// An abort that arrived while a step held the engine: the next call ends it.
    abort: Cell<Option<u64>>,
    /// What `stats()` and `adapters()` answer, also while a step holds the engine.
    stats: Cell<Stats>,
    load: LoadTimes,
    adapters: RefCell<Vec<AdapterInfo>>,
}

impl Slot {
    fn missing(&self) -> JsValue {
        if self.disposed.get() {
            js_error("Disposed", "this model was disposed")
        } else {
            js_err(busy())
        }
    }

    /// Runs `f` on the engine now (between async calls).
    fn with<T>(&self, f: impl FnOnce(&mut Engine) -> T) -> JsResult<T> {
        let mut guard = self.core.borrow_mut();
        let core = guard.as_mut().ok_or_else(|| self.missing())?;
        let out = f(core);
        self.snapshot(core);
        Ok(out)
    }

    fn snapshot(&self, core: &Engine) {
        self.stats.set(Stats::of(core));
        *self.adapters.borrow_mut() = AdapterInfo::of(core);
    }
}

/// The engine taken out of its slot for one async call, put back however it ends.
struct Lease {
    slot: Rc<Slot>,
    core: Option<Engine>,
}

impl Lease {
    fn take(slot: &Rc<Slot>) -> JsResult<Lease> {
        let core = slot
            .core
            .borrow_mut()
            .take()
            .ok_or_else(|| slot.missing())?;
        Ok(Lease {
            slot: slot.clone(),
            core: Some(core),
        })
    }

    fn get(&mut self) -> JsResult<&mut Engine> {
        self.core.as_mut().ok_or_else(|| self.slot.missing())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(core) = self.core.take() {
            self.slot.snapshot(&core);
            *self.slot.core.borrow_mut() = Some(core);
        }
    }
}

/// Sets how the guided-generation module is loaded (js/index.js): `load()` returns a
/// promise of its initialized exports. Called on the first guided reply only.
#[wasm_bindgen(js_name = setGuidedLoader)]
pub fn set_guided_loader(load: js_sys::Function) {
    crate::guided::set_loader(load);
}

/// A loaded model. One reply at a time owns it (see `engine::Engine`); other calls
/// meanwhile are refused, never queued. `stats()` and `info()` answer at any time.
#[wasm_bindgen(js_name = Engine)]
pub struct JsEngine {
    slot: Rc<Slot>,
    info: serde_json::Value,
}

#[wasm_bindgen(js_class = Engine)]
impl JsEngine {
    /// Loads a GGUF model from streams of bytes (`Response.body`, `Blob.stream()`): one
    /// file's, or a split model's files' in order, uploading it to the GPU tensor by
    /// tensor. `totals` are their sizes when known;
    /// `onProgress(loaded, total)` is called as bytes arrive, `onPhase("compile")` when
    /// the pipelines compile. On the CPU backend, `team` (js/team.js) holds the worker
    /// threads the matrices' rows are split across.
    pub async fn load(
        streams: js_sys::Array,
        totals: js_sys::Array,
        options: JsValue,
        on_progress: Option<js_sys::Function>,
        on_phase: Option<js_sys::Function>,
        team: Option<JsTeam>,
    ) -> JsResult<JsEngine> {
        console_error_panic_hook::set_once();
        // stats().wasmHeapPeakBytes: the most this load (and what follows) held.
        crate::memory::reset_peak();
        let opts: LoadOptions = self::options(options)?;
        let mut src = source::files(streams, totals);
        let mut progress = |loaded: u64, total: u64| {
            if let Some(f) = &on_progress {
                let _ = f.call2(
                    &JsValue::NULL,
                    &(loaded as f64).into(),
                    &(total as f64).into(),
                );
            }
        };
        // A wasm32 instance addresses 4 GiB: less what it holds now, and room for its
        // code, stack and the loader's slices.
        let addressable =
            (4u64 << 30).saturating_sub(crate::memory::heap().live_bytes + (64 << 20));
        let base = SessionOptions::in_browser(addressable);
        let so = SessionOptions {
            max_context: opts.max_context.unwrap_or(base.max_context),
            kv: opts.kv_cache.unwrap_or_default(),
            session_memory: opts.session_memory,
            ..base
        };
        let t0 = web_time::Instant::now();
        let ms = |t: web_time::Instant| t.elapsed().as_secs_f64() * 1000.0;
        let mut load = LoadTimes::default();
        let (kind, reason) = choose(opts.backend, opts.webgpu);
        let cap = opts
            .gpu_limits
            .and_then(|l| l.max_storage_buffer_binding_size);
        let gpu = match kind {
            BackendKind::Cpu => Err(reason.to_string()),
            BackendKind::Webgpu => match Gpu::with_max_binding(Caps::all(), cap).await {
                Ok(gpu) => Ok(gpu),
                Err(e) => Err(without_webgpu(opts.backend, e).map_err(js_err)?),
            },
        };
        let core = match gpu {
            Err(why) => {
                let team = team.map(|t| Arc::new(threads::Threads(t)) as _);
                let core = Engine::load_cpu_shared(&mut src, so, &mut progress, &why, team)
                    .await
                    .map_err(js_err)?;
                load.weights_ms = ms(t0);
                core
            }
            Ok(mut gpu) => {
                gpu.adapter.software |= opts.software_adapter;
                let mut core = Engine::load(gpu, &mut src, so, &mut progress)
                    .await
                    .map_err(js_err)?;
                core.set_reason(reason);
                load.weights_ms = ms(t0);
                if let Some(f) = &on_phase {
                    let _ = f.call1(&JsValue::NULL, &"compile".into());
                }
                let t1 = web_time::Instant::now();
                core.warm().map_err(js_err)?;
                load.compile_ms = ms(t1);
                load.header_compile_ms = core.gpu_model().map_or(0.0, |m| m.header_compile_ms);
                core
            }
        };
        let info = serde_json::to_value(Info::of(&core)?)
            .map_err(|e| js_error("Internal", &e.to_string()))?;
        let slot = Rc::new(Slot {
            core: RefCell::new(None),
            disposed: Cell::new(false),
            abort: Cell::new(None),
            stats: Cell::new(Stats::default()),
            load,
            adapters: RefCell::new(Vec::new()),
        });
        slot.snapshot(&core);
        *slot.core.borrow_mut() = Some(core);
        Ok(JsEngine { slot, info })
    }

    /// Starts a reply continuing `prompt` (plain text, no chat template); resolves to
    /// the reply's id. `adapter`: a loaded adapter's name, `null` for none, `undefined`
    /// for the active one.
    pub fn generate(&self, prompt: String, options: JsValue, adapter: JsValue) -> js_sys::Promise {
        self.start(Ok(Prompt::Text(prompt)), options, adapter)
    }

    /// Starts a reply to `messages` (`[{role, content}]`) in the model's chat template;
    /// the KV cache of the previous turn is reused where the conversation matches.
    pub fn chat(&self, messages: JsValue, options: JsValue, adapter: JsValue) -> js_sys::Promise {
        self.start(chat(&messages), options, adapter)
    }

    /// Runs what the KV cache lacks of the conversation `messages` (the assistant's
    /// turn not opened: later messages extend it); resolves to `{cachedTokens,
    /// computedTokens}`.
    pub fn prefill(
        &self,
        messages: JsValue,
        options: JsValue,
        adapter: JsValue,
    ) -> js_sys::Promise {
        let slot = self.slot.clone();
        promise(async move {
            let (prompt, opts, choice) = request(&messages, options, &adapter)?;
            let mut lease = Lease::take(&slot)?;
            let done = lease.get()?.prefill(&prompt, &opts, &choice).await;
            to_js(&done.map_err(js_err)?)
        })
    }

    /// Tokens of the prompt that `chat(messages, options)` would run.
    #[wasm_bindgen(js_name = countTokens)]
    pub fn count_tokens(&self, messages: JsValue, options: JsValue) -> JsResult<f64> {
        let (prompt, opts) = (chat(&messages)?, self::options(options)?);
        let n = self
            .slot
            .with(|c| c.prepare(&prompt, &opts).map(|p| p.ids.len()))?;
        Ok(n.map_err(js_err)? as f64)
    }

    /// The conversation `messages` as bytes (its KV cache and what computed it), for
    /// `restore` in a later page.
    pub fn save(&self, messages: JsValue, options: JsValue, adapter: JsValue) -> js_sys::Promise {
        let slot = self.slot.clone();
        promise(async move {
            let (prompt, opts, choice) = request(&messages, options, &adapter)?;
            let mut lease = Lease::take(&slot)?;
            let bytes = lease.get()?.save(&prompt, &opts, &choice).await;
            Ok(js_sys::Uint8Array::from(&bytes.map_err(js_err)?[..]).into())
        })
    }

    /// Holds a saved conversation's KV cache again; the tokens it holds.
    pub fn restore(&self, bytes: &[u8]) -> JsResult<f64> {
        let n = self.slot.with(|c| c.restore(bytes))?;
        Ok(n.map_err(js_err)? as f64)
    }

    fn start(
        &self,
        prompt: JsResult<Prompt>,
        options: JsValue,
        adapter: JsValue,
    ) -> js_sys::Promise {
        let slot = self.slot.clone();
        promise(async move {
            let prompt = prompt?;
            let opts: GenerateOptions = self::options(options)?;
            let choice = adapter_choice(&adapter)?;
            let mut lease = Lease::take(&slot)?;
            let id = lease
                .get()?
                .start(&prompt, &opts, &choice)
                .await
                .map_err(js_err)?;
            Ok(JsValue::from(id as f64))
        })
    }

    /// The next chunk of reply `id`: `{text, tokenId}`, then `{done: true,
    /// finishReason, usage}` (again, if asked after the end).
    pub fn next(&self, id: f64) -> js_sys::Promise {
        let slot = self.slot.clone();
        let id = id as u64;
        promise(async move {
            let mut lease = Lease::take(&slot)?;
            let core = lease.get()?;
            let event = match slot.abort.take() {
                Some(a) if a == id => core.abort(id),
                _ => None,
            };
            let event = match event {
                Some(e) => e,
                None => core.next(id).await.map_err(js_err)?,
            };
            to_js(&Chunk::from(event))
        })
    }

    /// Ends reply `id` within a step (`finishReason: "abort"`); other ids are ignored.
    pub fn abort(&self, id: f64) {
        let id = id as u64;
        if self.slot.with(|c| c.abort(id)).is_err() {
            // A step holds the engine: it ends the reply when it returns.
            self.slot.abort.set(Some(id));
        }
    }

    /// The caller let go of reply `id`: it ends, and the engine is free.
    pub fn release(&self, id: f64) {
        self.abort(id);
    }

    /// Makes `draft` (a model of this one's vocabulary, on either backend) the draft
    /// of speculative decoding: it proposes the guesses instead of prompt lookup
    /// (`Engine::set_draft`: `BadOptions` for another vocabulary, or where this
    /// model's backend does not check guesses in one pass). `draft` is emptied either
    /// way. (`js/index.js` loads drafts on the CPU backend beside a CPU model.)
    #[wasm_bindgen(js_name = setDraft)]
    pub fn set_draft(&self, draft: &JsEngine) -> JsResult<()> {
        let d = draft.slot.core.borrow_mut().take();
        draft.slot.disposed.set(true);
        let d = d.ok_or_else(|| draft.slot.missing())?;
        self.slot.with(|c| c.set_draft(d))?.map_err(js_err)
    }

    /// Uploads a PEFT LoRA adapter (the bytes of adapter_config.json and
    /// adapter_model.safetensors) under `name`; the base model is untouched.
    #[wasm_bindgen(js_name = loadAdapter)]
    pub fn load_adapter(&self, name: String, config: &[u8], weights: &[u8]) -> JsResult<()> {
        self.slot
            .with(|c| c.load_adapter(&name, config, weights))?
            .map_err(js_err)
    }

    /// Makes `name` (or `null`: none) the adapter of calls that do not name one.
    #[wasm_bindgen(js_name = useAdapter)]
    pub fn use_adapter(&self, name: Option<String>) -> JsResult<()> {
        self.slot
            .with(|c| c.use_adapter(name.as_deref()))?
            .map_err(js_err)
    }

    /// Frees an adapter's GPU memory; false when there was none of that name.
    #[wasm_bindgen(js_name = unloadAdapter)]
    pub fn unload_adapter(&self, name: String) -> JsResult<bool> {
        self.slot.with(|c| c.unload_adapter(&name))?.map_err(js_err)
    }

    /// `[{ name, bytes, rank, active }]`
    pub fn adapters(&self) -> JsResult<JsValue> {
        if self.slot.disposed.get() {
            return Err(self.slot.missing());
        }
        to_js(&*self.slot.adapters.borrow())
    }

    /// Speeds of the current or last reply and GPU memory in use.
    pub fn stats(&self) -> JsResult<JsValue> {
        let mut s = self.slot.stats.get();
        s.load = self.slot.load;
        let heap = crate::memory::heap();
        s.wasm_heap_bytes = heap.live_bytes;
        s.wasm_heap_peak_bytes = heap.peak_bytes;
        s.wasm_memory_bytes = (core::arch::wasm32::memory_size::<0>() as u64) << 16;
        to_js(&s)
    }

    /// The model's configuration and the WebGPU adapter (`gpuAdapter`).
    pub fn info(&self) -> JsResult<JsValue> {
        to_js(&self.info)
    }

    /// Forgets the conversation (the KV cache is kept allocated, its contents dropped).
    pub fn reset(&self) -> JsResult<()> {
        self.slot.with(|c| c.reset())?.map_err(js_err)
    }

    /// Frees the GPU memory; the engine cannot be used afterwards. Refused while a
    /// reply runs.
    pub fn dispose(&self) -> JsResult<()> {
        if self.slot.with(|c| c.is_busy())? {
            return Err(js_err(busy()));
        }
        self.slot.core.borrow_mut().take();
        self.slot.disposed.set(true);
        Ok(())
    }
}

/// A chat call's arguments: its messages, generation options and adapter.
fn request(
    messages: &JsValue,
    options: JsValue,
    adapter: &JsValue,
) -> JsResult<(Prompt, GenerateOptions, AdapterChoice)> {
    Ok((
        chat(messages)?,
        self::options(options)?,
        adapter_choice(adapter)?,
    ))
}

fn chat(messages: &JsValue) -> JsResult<Prompt> {
    from_js::<Vec<Message>>(messages)
        .map(Prompt::Chat)
        .map_err(|e| {
            bad(format!(
                "messages must be [{{role, content}}] (OpenAI's shape): {e}"
            ))
        })
}
