//! JavaScript bindings (wasm-bindgen): only translation between JS values and the
//! engine. The hand-written layer in `js/` turns these into the public API (async
//! iterators, AbortSignal, Cache Storage, the Worker).

mod source;

use crate::engine::{
    Adapters, Event, GenerateOptions, Generation, GpuAdapter, GpuBackend, GpuModel, GpuSession,
    SessionOptions, Usage,
};
use crate::gpu::{Caps, Gpu};
use crate::quant::kv::KvFormat;
use crate::tokenizer::{Message, Tokenizer};
use serde::{Deserialize, Serialize};
use source::JsStream;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::prelude::*;

fn js_err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

fn to_js<T: Serialize>(v: &T) -> Result<JsValue, JsError> {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(js_err)
}

/// A Promise of `f`, rejected with a JS `Error` when it fails.
fn promise(
    f: impl std::future::Future<Output = Result<JsValue, JsError>> + 'static,
) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async move { f.await.map_err(JsValue::from) })
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct LoadOptions {
    kv_cache: Option<KvFormat>,
    max_context: Option<usize>,
    /// The page saw a CPU adapter (SwiftShader): wgpu cannot tell from inside.
    software_adapter: bool,
}

struct Inner {
    model: GpuModel,
    session: GpuSession,
    tk: Tokenizer,
    generation: Option<Generation>,
    adapters: Adapters,
    /// The adapter used when a call does not name one.
    active: Option<String>,
    /// The adapter of the running generation.
    current: Option<String>,
}

impl Inner {
    /// The adapter a call asked for: `undefined` = the active one, `null` = none.
    fn pick(&self, requested: &JsValue) -> Result<Option<String>, JsError> {
        let name = if requested.is_undefined() {
            self.active.clone()
        } else if requested.is_null() {
            None
        } else {
            Some(
                requested
                    .as_string()
                    .ok_or_else(|| JsError::new("adapter must be a name or null"))?,
            )
        };
        match name {
            Some(n) if self.adapters.get(&n).is_none() => {
                Err(JsError::new(&format!("no adapter named {n:?} is loaded")))
            }
            other => Ok(other),
        }
    }
}

/// A loaded model and its conversation. Calls that run the GPU are not queued: a
/// second one while one runs is rejected. `stats()` and `info()` answer at any time.
#[wasm_bindgen]
pub struct Engine {
    inner: Rc<RefCell<Option<Inner>>>,
    busy: Rc<Cell<bool>>,
    aborted: Rc<Cell<bool>>,
    stats: Rc<Cell<Stats>>,
    info: serde_json::Value,
}

/// The engine's state, taken out of its slot for one call (so no `RefCell` borrow is
/// held across an await) and put back when the call ends, however it ends.
struct Lease {
    slot: Rc<RefCell<Option<Inner>>>,
    inner: Option<Inner>,
}

impl Lease {
    fn take(slot: &Rc<RefCell<Option<Inner>>>) -> Result<Lease, JsError> {
        let inner = slot
            .borrow_mut()
            .take()
            .ok_or_else(|| JsError::new("this model was disposed"))?;
        Ok(Lease {
            slot: slot.clone(),
            inner: Some(inner),
        })
    }

    fn get(&mut self) -> &mut Inner {
        self.inner
            .as_mut()
            .expect("a lease holds the state until it is dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self.slot.borrow_mut() = self.inner.take();
    }
}

/// Marks the engine busy for the life of one call.
struct Busy(Rc<Cell<bool>>);

impl Busy {
    fn take(flag: &Rc<Cell<bool>>) -> Result<Busy, JsError> {
        if flag.replace(true) {
            return Err(JsError::new(
                "Pippin is already generating on this model: wait for the running call to finish or abort it (calls are not queued)",
            ));
        }
        Ok(Busy(flag.clone()))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

#[wasm_bindgen]
impl Engine {
    /// Loads a GGUF model from a stream of bytes (`Response.body`, `Blob.stream()`),
    /// uploading it to the GPU tensor by tensor. `total` is the size when known;
    /// `onProgress(loaded, total)` is called as bytes arrive.
    pub async fn load(
        stream: web_sys::ReadableStream,
        total: Option<f64>,
        options: JsValue,
        on_progress: Option<js_sys::Function>,
    ) -> Result<Engine, JsError> {
        console_error_panic_hook::set_once();
        let opts: LoadOptions = if options.is_undefined() || options.is_null() {
            LoadOptions::default()
        } else {
            serde_wasm_bindgen::from_value(options).map_err(js_err)?
        };
        let mut gpu = Gpu::new(Caps::all()).await.map_err(js_err)?;
        gpu.adapter.software |= opts.software_adapter;
        let mut src = JsStream::new(stream, total.map(|t| t as u64));
        let mut progress = |loaded: u64, total: u64| {
            if let Some(f) = &on_progress {
                let _ = f.call2(
                    &JsValue::NULL,
                    &(loaded as f64).into(),
                    &(total as f64).into(),
                );
            }
        };
        // The tokenizer is built from the header, before any weight is uploaded.
        let mut tokenizer = None;
        let mut check = |g: &crate::gguf::Gguf| {
            tokenizer = Some(Tokenizer::from_gguf(&g.metadata)?);
            Ok(())
        };
        let (model, _) = GpuModel::load_checked(gpu, &mut src, &mut progress, &mut check)
            .await
            .map_err(js_err)?;
        let tk = tokenizer.ok_or_else(|| JsError::new("the model has no tokenizer"))?;
        let so = SessionOptions {
            max_context: opts.max_context.unwrap_or(2048),
            kv: opts.kv_cache.unwrap_or_default(),
            ..Default::default()
        };
        let session = GpuSession::new(&model, so).map_err(js_err)?;
        let g = &model.gpu;
        let info = serde_json::to_value(Info {
            config: &model.config,
            adapter: &g.adapter.name,
            backend: &g.adapter.backend,
            shader_f16: g.caps.shader_f16,
            subgroups: g.caps.subgroups,
            max_storage_buffer_binding_size: g.limits.max_storage_buffer_binding_size,
            max_buffer_size: g.limits.max_buffer_size,
        })
        .map_err(js_err)?;
        let stats = Stats {
            weight_bytes: model.weight_bytes,
            kv_cache_bytes: session.kv_bytes(),
            ..Default::default()
        };
        let inner = Inner {
            model,
            session,
            tk,
            generation: None,
            adapters: Adapters::default(),
            active: None,
            current: None,
        };
        Ok(Engine {
            inner: Rc::new(RefCell::new(Some(inner))),
            busy: Rc::new(Cell::new(false)),
            aborted: Rc::new(Cell::new(false)),
            stats: Rc::new(Cell::new(stats)),
            info,
        })
    }

    /// Starts a reply to `prompt` (plain text, no chat template). `adapter`: a loaded
    /// adapter's name, `null` for none, `undefined` for the active one.
    pub fn generate(&self, prompt: String, options: JsValue, adapter: JsValue) -> js_sys::Promise {
        self.start(Request::Prompt(prompt), options, adapter)
    }

    /// Starts a reply to `messages` (`[{role, content}]`) in the model's chat template.
    /// The KV cache of the previous turn is reused where the conversation matches.
    pub fn chat(&self, messages: JsValue, options: JsValue, adapter: JsValue) -> js_sys::Promise {
        match serde_wasm_bindgen::from_value::<Vec<Message>>(messages) {
            Ok(m) => self.start(Request::Chat(m), options, adapter),
            Err(e) => js_sys::Promise::reject(
                &js_err(format!("messages must be [{{role, content}}]: {e}")).into(),
            ),
        }
    }

    fn start(&self, req: Request, options: JsValue, adapter: JsValue) -> js_sys::Promise {
        let (inner, busy, aborted) = (self.inner.clone(), self.busy.clone(), self.aborted.clone());
        promise(async move {
            let _busy = Busy::take(&busy)?;
            aborted.set(false);
            let opts: GenerateOptions = if options.is_undefined() || options.is_null() {
                GenerateOptions::default()
            } else {
                serde_wasm_bindgen::from_value(options).map_err(js_err)?
            };
            let mut lease = Lease::take(&inner)?;
            let s = lease.get();
            s.generation = None;
            let prompt = match req {
                Request::Prompt(p) => s.tk.encode_prompt(&p, false),
                Request::Chat(m) => s.tk.encode_chat(&m, true),
            }
            .map_err(js_err)?;
            s.current = s.pick(&adapter)?;
            let ad = s.current.as_deref().and_then(|n| s.adapters.get(n));
            let mut b = GpuBackend::with_adapter(&s.model, &mut s.session, ad);
            s.generation = Some(
                Generation::start(&mut b, &prompt, &opts)
                    .await
                    .map_err(js_err)?,
            );
            Ok(JsValue::UNDEFINED)
        })
    }

    /// The next chunk of the running reply: `{text, tokenId}`, then once
    /// `{done: true, finishReason, usage}`.
    pub fn next(&self) -> js_sys::Promise {
        let (inner, busy, aborted) = (self.inner.clone(), self.busy.clone(), self.aborted.clone());
        let stats = self.stats.clone();
        promise(async move {
            let _busy = Busy::take(&busy)?;
            let mut lease = Lease::take(&inner)?;
            let Inner {
                model,
                session,
                tk,
                generation,
                adapters,
                current,
                ..
            } = lease.get();
            let g = generation.as_mut().ok_or_else(|| {
                JsError::new("no generation is running: call generate() or chat() first")
            })?;
            let event = if aborted.get() {
                g.abort()
            } else {
                let ad = current.as_deref().and_then(|n| adapters.get(n));
                g.next(&mut GpuBackend::with_adapter(model, session, ad), tk)
                    .await
                    .map_err(js_err)?
            };
            let usage = g.usage();
            stats.set(Stats {
                prefill_tokens_per_s: usage.prefill_tokens_per_s(),
                decode_tokens_per_s: usage.decode_tokens_per_s(),
                weight_bytes: model.weight_bytes,
                kv_cache_bytes: session.kv_bytes(),
                context_tokens: session.len(),
            });
            to_js(&match event {
                Event::Text { text, token } => Chunk {
                    text: Some(text),
                    token_id: Some(token),
                    ..Default::default()
                },
                Event::Done { finish, usage } => Chunk {
                    done: true,
                    finish_reason: Some(finish),
                    usage: Some(usage),
                    ..Default::default()
                },
            })
        })
    }

    /// Uploads a PEFT LoRA adapter (the bytes of adapter_config.json and
    /// adapter_model.safetensors) under `name`; the base model is untouched.
    #[wasm_bindgen(js_name = loadAdapter)]
    pub fn load_adapter(&self, name: String, config: &[u8], weights: &[u8]) -> Result<(), JsError> {
        let _busy = Busy::take(&self.busy)?;
        let mut lease = Lease::take(&self.inner)?;
        let s = lease.get();
        let adapter = crate::adapters::parse(config, weights, &s.model.config).map_err(js_err)?;
        let gpu_adapter = GpuAdapter::upload(&s.model.gpu, &adapter).map_err(js_err)?;
        s.adapters.insert(&name, gpu_adapter);
        Ok(())
    }

    /// Makes `name` (or `null`: none) the adapter of calls that do not name one.
    #[wasm_bindgen(js_name = useAdapter)]
    pub fn use_adapter(&self, name: Option<String>) -> Result<(), JsError> {
        let _busy = Busy::take(&self.busy)?;
        let mut lease = Lease::take(&self.inner)?;
        let s = lease.get();
        if let Some(n) = &name {
            if s.adapters.get(n).is_none() {
                return Err(JsError::new(&format!("no adapter named {n:?} is loaded")));
            }
        }
        s.active = name;
        Ok(())
    }

    /// Frees an adapter's GPU memory; false when there was none of that name.
    #[wasm_bindgen(js_name = unloadAdapter)]
    pub fn unload_adapter(&self, name: String) -> Result<bool, JsError> {
        let _busy = Busy::take(&self.busy)?;
        let mut lease = Lease::take(&self.inner)?;
        let s = lease.get();
        if s.active.as_deref() == Some(&name) {
            s.active = None;
        }
        Ok(s.adapters.remove(&name))
    }

    /// `[{ name, bytes, rank, active }]`
    pub fn adapters(&self) -> Result<JsValue, JsError> {
        let _busy = Busy::take(&self.busy)?;
        let mut lease = Lease::take(&self.inner)?;
        let s = lease.get();
        let list: Vec<AdapterInfo> = s
            .adapters
            .list()
            .into_iter()
            .map(|(name, bytes, rank)| AdapterInfo {
                active: s.active.as_deref() == Some(&name),
                name,
                bytes,
                rank,
            })
            .collect();
        to_js(&list)
    }

    /// Asks the running reply to stop; the next `next()` ends it with `abort`.
    pub fn abort(&self) {
        self.aborted.set(true);
    }

    /// Speeds of the current or last reply and GPU memory in use.
    pub fn stats(&self) -> Result<JsValue, JsError> {
        to_js(&self.stats.get())
    }

    /// The model's configuration and the WebGPU adapter.
    pub fn info(&self) -> Result<JsValue, JsError> {
        to_js(&self.info)
    }

    /// Forgets the conversation (the KV cache is kept allocated, its contents dropped).
    pub fn reset(&self) -> Result<(), JsError> {
        let _busy = Busy::take(&self.busy)?;
        let mut guard = self.inner.borrow_mut();
        let s = guard
            .as_mut()
            .ok_or_else(|| JsError::new("this model was disposed"))?;
        s.generation = None;
        s.session.clear();
        self.stats.set(Stats {
            context_tokens: 0,
            ..self.stats.get()
        });
        Ok(())
    }

    /// Frees the GPU memory; the engine cannot be used afterwards.
    pub fn dispose(&self) -> Result<(), JsError> {
        let _busy = Busy::take(&self.busy)?;
        self.inner.borrow_mut().take();
        Ok(())
    }
}

enum Request {
    Prompt(String),
    Chat(Vec<Message>),
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Chunk {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_id: Option<u32>,
    done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<crate::engine::FinishReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Serialize, Clone, Copy, Default)]
#[serde(rename_all = "camelCase")]
struct Stats {
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
    weight_bytes: u64,
    kv_cache_bytes: u64,
    context_tokens: usize,
}

#[derive(Serialize)]
struct AdapterInfo {
    name: String,
    bytes: u64,
    rank: usize,
    active: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Info<'a> {
    config: &'a crate::model::Config,
    adapter: &'a str,
    backend: &'a str,
    shader_f16: bool,
    subgroups: bool,
    max_storage_buffer_binding_size: u64,
    max_buffer_size: u64,
}
