//! What the bindings hand JavaScript about a model and a reply: a reply's chunks, load
//! times, `stats()`, `adapters()` and `info()`, as serde shapes.

use super::{js_err, JsResult};
use crate::engine::{BackendKind, Engine, Event, Usage};
use serde::Serialize;

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct Chunk {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_id: Option<u32>,
    done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<crate::engine::FinishReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<crate::tokenizer::ToolCall>,
    /// With `logprobs` asked for: the tokens of this piece.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    logprobs: Vec<crate::engine::TokenLogprob>,
}

impl From<Event> for Chunk {
    fn from(e: Event) -> Chunk {
        match e {
            Event::Text {
                text,
                token,
                logprobs,
            } => Chunk {
                text: Some(text),
                token_id: Some(token),
                logprobs,
                ..Default::default()
            },
            Event::Done {
                finish,
                usage,
                calls,
            } => Chunk {
                done: true,
                finish_reason: Some(finish),
                usage: Some(usage),
                tool_calls: calls,
                ..Default::default()
            },
        }
    }
}

/// Where a load's time went, from the engine's side (JS adds the whole load's).
#[derive(Serialize, Clone, Copy, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct LoadTimes {
    /// The header and every weight: downloaded (or read from the cache) and
    /// uploaded as they arrive — one phase, as they overlap.
    pub(super) weights_ms: f64,
    /// Of `weights_ms`: creating every pipeline from the header, before the first
    /// weight byte (the GPU compiles them while the weights download; 0 on the CPU).
    pub(super) header_compile_ms: f64,
    /// Recording the decode step, and any pipeline not yet created (0 on the CPU).
    pub(super) compile_ms: f64,
}

#[derive(Serialize, Clone, Copy, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct Stats {
    pub(super) prefill_tokens_per_s: f64,
    pub(super) decode_tokens_per_s: f64,
    /// The current or last reply's, from its start to its first text.
    pub(super) time_to_first_token_ms: f64,
    pub(super) load: LoadTimes,
    pub(super) weight_bytes: u64,
    pub(super) kv_cache_bytes: u64,
    pub(super) context_tokens: usize,
    /// GPU dispatches a decode step records (the base model's, or the reply's adapter).
    pub(super) dispatches_per_token: usize,
    /// The current or last reply's speculative decoding.
    pub(super) speculation: crate::engine::SpeculationStats,
    pub(super) gpu_bytes: crate::engine::GpuBytes,
    /// Snapshots of KV state kept for other sessions and common prefixes.
    pub(super) prefix_cache: crate::engine::prefix_cache::PrefixStats,
    /// Heap bytes allocated now, and the most at once since the last load began.
    pub(super) wasm_heap_bytes: u64,
    pub(super) wasm_heap_peak_bytes: u64,
    /// The wasm module's linear memory (it never shrinks: the high-water mark).
    pub(super) wasm_memory_bytes: u64,
}

impl Stats {
    pub(super) fn of(c: &Engine) -> Stats {
        let u = c.usage().unwrap_or_default();
        Stats {
            prefill_tokens_per_s: u.prefill_tokens_per_s(),
            decode_tokens_per_s: u.decode_tokens_per_s(),
            time_to_first_token_ms: u.time_to_first_token_ms,
            weight_bytes: c.weight_bytes(),
            kv_cache_bytes: c.kv_cache_bytes(),
            context_tokens: c.context_tokens(),
            dispatches_per_token: c.dispatches_per_token().unwrap_or(0),
            speculation: u.speculation,
            gpu_bytes: c.gpu_bytes(),
            prefix_cache: c.prefix_stats(),
            ..Stats::default()
        }
    }
}

#[derive(Serialize, Clone)]
pub(super) struct AdapterInfo {
    name: String,
    bytes: u64,
    rank: usize,
    active: bool,
}

impl AdapterInfo {
    pub(super) fn of(c: &Engine) -> Vec<AdapterInfo> {
        c.adapters()
            .into_iter()
            .map(|a| AdapterInfo {
                name: a.name,
                bytes: a.bytes,
                rank: a.rank,
                active: a.active,
            })
            .collect()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Info<'a> {
    config: &'a crate::model::Config,
    /// "webgpu" or "cpu".
    backend: BackendKind,
    /// Why that backend runs the model.
    backend_reason: &'a str,
    gpu_adapter: &'a str,
    /// wgpu's backend ("BrowserWebGpu" in the browser); empty on the CPU backend.
    gpu_backend: String,
    shader_f16: bool,
    subgroups: bool,
    max_storage_buffer_binding_size: u64,
    max_buffer_size: u64,
    /// Most tokens a conversation may hold.
    context_window: usize,
    /// The recovery adapter the model's file carries (`pippin convert --recover`),
    /// which runs under every reply: its rank and bytes; `null` without one.
    recovery: Option<RecoveryInfo>,
}

#[derive(Serialize)]
pub(super) struct RecoveryInfo {
    rank: usize,
    bytes: u64,
}

fn recovery_info(core: &Engine) -> Option<RecoveryInfo> {
    core.recovery()
        .map(|(rank, bytes, _)| RecoveryInfo { rank, bytes })
}

impl<'a> Info<'a> {
    pub(super) fn of(core: &'a Engine) -> JsResult<Info<'a>> {
        match core.backend_kind().0 {
            BackendKind::Cpu => Self::cpu(core),
            BackendKind::Webgpu => Self::gpu(core),
        }
    }

    fn cpu(core: &'a Engine) -> JsResult<Info<'a>> {
        let (backend, backend_reason) = core.backend_kind();
        Ok(Info {
            config: core.config(),
            backend,
            backend_reason,
            gpu_adapter: "",
            gpu_backend: String::new(),
            shader_f16: false,
            subgroups: false,
            max_storage_buffer_binding_size: 0,
            max_buffer_size: 0,
            context_window: core.context_window(),
            recovery: recovery_info(core),
        })
    }

    fn gpu(core: &'a Engine) -> JsResult<Info<'a>> {
        let g = &core.require_gpu().map_err(js_err)?.gpu;
        let (backend, backend_reason) = core.backend_kind();
        Ok(Info {
            config: core.config(),
            backend,
            backend_reason,
            gpu_adapter: &g.adapter.name,
            gpu_backend: g.adapter.backend.clone(),
            shader_f16: g.caps.shader_f16,
            subgroups: g.caps.subgroups,
            // What Pippin binds: the device's limit, or less where `gpuLimits` asked.
            max_storage_buffer_binding_size: g.max_binding(),
            max_buffer_size: g.limits.max_buffer_size,
            context_window: core.context_window(),
            recovery: recovery_info(core),
        })
    }
}
