//! `pippin generate`: a prompt or a conversation answered by the CPU reference, the CPU
//! backend or the GPU, streamed to standard output.

use crate::{load_engine, model_tokenizer, parse_kv, read_adapter, DEFAULT_MODEL};
use clap::Args;
use pippin::engine::{
    self, AdapterChoice, Engine, Event, FinishReason, GenerateOptions, Prompt, ReferenceSession,
    SessionOptions, Speculation, ToolChoice, ToolMode, Usage,
};
use pippin::guided::ResponseFormat;
use pippin::quant::kv::KvFormat;
use pippin::sampler::SamplerOptions;
use pippin::tokenizer::Message;
use pippin::tokenizer::ToolCall;
use pippin::{Error, Result};
use std::io::Write;
use std::path::PathBuf;

#[derive(Args)]
pub struct GenerateArgs {
    #[arg(long, default_value = DEFAULT_MODEL)]
    model: PathBuf,
    #[arg(long, short, required_unless_present = "messages")]
    prompt: Option<String>,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    /// A whole conversation instead of --prompt: a JSON file of OpenAI-shaped
    /// messages (tool calls and `tool` results included); implies --chat.
    #[arg(long, value_name = "FILE", conflicts_with = "prompt")]
    messages: Option<PathBuf>,
    /// Tools the model may call: a JSON file of OpenAI-shaped tool definitions
    /// (`[{"type": "function", "function": {"name", "description", "parameters"}}]`);
    /// implies --chat. A call is printed as JSON (`{"tool_calls": [...]}`).
    #[arg(long, value_name = "FILE")]
    tools: Option<PathBuf>,
    /// auto (a call or an answer), required, none, or a tool's name.
    #[arg(long, default_value = "auto", requires = "tools")]
    tool_choice: String,
    /// System message for --chat (default: the template's own).
    #[arg(long)]
    system: Option<String>,
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Run on the CPU backend (quantized weights, SIMD) instead of the GPU.
    #[arg(long)]
    cpu: bool,
    /// Run the plain-Rust f32 reference model (the tests' ground truth).
    #[arg(long, conflicts_with = "cpu")]
    reference: bool,
    /// KV cache format: int8, int4, f16 or f32 on the GPU; f32 or int8 (the others) on the CPU backend.
    #[arg(long, default_value = "int8", value_parser = parse_kv)]
    kv: KvFormat,
    /// Most tokens a conversation may hold.
    #[arg(long, default_value_t = 4096)]
    max_context: usize,
    /// Hold every GPU storage binding to this many MiB (as a device whose
    /// maxStorageBufferBindingSize is that would): big tensors split, and a
    /// model whose KV cache or tables do not fit is refused.
    #[arg(long)]
    max_binding_mib: Option<u64>,
    /// Leave out the recovery adapter the model's file carries (`convert --recover`).
    #[arg(long)]
    no_recovery: bool,
    /// A PEFT LoRA adapter: a folder with adapter_config.json and adapter_model.safetensors.
    #[arg(long)]
    adapter: Option<PathBuf>,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f32,
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Stop before this string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Guided generation: the reply is JSON valid under the JSON Schema in FILE.
    #[arg(long, value_name = "FILE", group = "format")]
    json_schema: Option<PathBuf>,
    /// Guided generation: the reply is some JSON object.
    #[arg(long, group = "format")]
    json_object: bool,
    /// Guided generation: the reply matches this regular expression as a whole.
    #[arg(long, value_name = "RE", group = "format")]
    regex: Option<String>,
    /// Guided generation: the reply follows the Lark grammar in FILE.
    #[arg(long, value_name = "FILE", group = "format")]
    grammar: Option<PathBuf>,
    /// Decode one token a forward (no prompt lookup; the text is the same either way).
    #[arg(long)]
    no_speculation: bool,
    /// A draft model (GGUF, the model's vocabulary) proposing speculative decoding's
    /// guesses instead of prompt lookup (the CPU backend: with --cpu).
    #[arg(long, value_name = "FILE")]
    draft: Option<PathBuf>,
}

/// The response format the flags ask for.
fn response_format(a: &GenerateArgs) -> Result<Option<ResponseFormat>> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p)
            .map_err(|e| Error::invalid(format!("cannot read {}: {e}", p.display())))
    };
    Ok(if let Some(p) = &a.json_schema {
        let schema = serde_json::from_str(&read(p)?)
            .map_err(|e| Error::invalid(format!("{} is not JSON: {e}", p.display())))?;
        Some(ResponseFormat::JsonSchema {
            schema,
            strict: None,
        })
    } else if a.json_object {
        Some(ResponseFormat::JsonObject)
    } else if let Some(r) = &a.regex {
        Some(ResponseFormat::Regex { pattern: r.clone() })
    } else if let Some(p) = &a.grammar {
        Some(ResponseFormat::Grammar { grammar: read(p)? })
    } else {
        None
    })
}

fn read_json<T: serde::de::DeserializeOwned>(p: &std::path::Path) -> Result<T> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| Error::invalid(format!("cannot read {}: {e}", p.display())))?;
    serde_json::from_str(&text).map_err(|e| Error::invalid(format!("{}: {e}", p.display())))
}

fn tool_choice(s: &str) -> ToolChoice {
    match s {
        "auto" => ToolChoice::Mode(ToolMode::Auto),
        "required" => ToolChoice::Mode(ToolMode::Required),
        "none" => ToolChoice::Mode(ToolMode::None),
        name => ToolChoice::Named {
            function: pippin::engine::tools::Named { name: name.into() },
        },
    }
}

/// The conversation the flags give, if it is one.
fn messages(a: &GenerateArgs) -> Result<Option<Vec<Message>>> {
    if let Some(p) = &a.messages {
        return read_json(p).map(Some);
    }
    let prompt = a.prompt.clone().unwrap_or_default();
    if !a.chat && a.tools.is_none() {
        return Ok(None);
    }
    let mut msgs = Vec::new();
    if let Some(s) = &a.system {
        msgs.push(Message::new("system", s));
    }
    msgs.push(Message::new("user", &prompt));
    Ok(Some(msgs))
}

/// The generation options the flags give.
fn options(a: &GenerateArgs) -> Result<GenerateOptions> {
    Ok(GenerateOptions {
        max_tokens: a.max_tokens,
        sampler: SamplerOptions {
            temperature: a.temperature,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            repetition_penalty: a.repetition_penalty,
            seed: a.seed,
            ..Default::default()
        },
        stop: a.stop.clone(),
        response_format: response_format(a)?,
        tools: match &a.tools {
            Some(p) => read_json(p)?,
            None => vec![],
        },
        tool_choice: a.tools.as_ref().map(|_| tool_choice(&a.tool_choice)),
        speculation: if a.no_speculation {
            Speculation::Off
        } else {
            Speculation::Auto
        },
        ..Default::default()
    })
}

/// How a reply ended: its finish, usage and tool calls.
type Ended = (FinishReason, Usage, Vec<ToolCall>);

pub fn generate(a: GenerateArgs) -> Result<()> {
    crate::adapter_flags(a.no_recovery, a.adapter.is_some())?;
    let opts = options(&a)?;
    let prompt = match messages(&a)? {
        Some(m) => Prompt::Chat(m),
        None => Prompt::Text(a.prompt.clone().unwrap_or_default()),
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (e.g. `| head`) ends generation quietly.
    let mut on_text = |piece: &str| {
        out.write_all(piece.as_bytes())
            .and_then(|_| out.flush())
            .is_ok()
    };
    let ((finish, u, tool_calls), engine) = if a.reference {
        let r = reference(&a, &prompt, &opts, |t, _| on_text(t))?;
        (r, "CPU reference".to_string())
    } else {
        let (mut e, name) = load(&a)?;
        (reply(&mut e, &prompt, &opts, on_text)?, name)
    };
    if !tool_calls.is_empty() {
        // OpenAI's shape: arguments as a JSON text.
        let calls: Vec<_> = tool_calls
            .iter()
            .map(|c| {
                serde_json::json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments.to_string()},
                })
            })
            .collect();
        print!("{}", serde_json::json!({ "tool_calls": calls }));
    }
    let _ = writeln!(std::io::stdout());
    eprintln!(
        "[{engine}: {} prompt tokens, {} generated, prefill {:.1} tok/s, decode {:.1} tok/s, first token after {:.0} ms, {}/{} guesses kept, finish: {finish:?}]",
        u.prompt_tokens,
        u.generated_tokens,
        u.prefill_tokens_per_s(),
        u.decode_tokens_per_s(),
        u.time_to_first_token_ms,
        u.speculation.accepted,
        u.speculation.proposed,
    );
    Ok(())
}

/// The engine the flags ask for (the CPU backend or the GPU, with the recovery
/// adapter, a task adapter and a draft model as asked), and its name for the summary.
fn load(a: &GenerateArgs) -> Result<(Engine, String)> {
    let so = SessionOptions {
        max_context: a.max_context,
        kv: a.kv,
        ..Default::default()
    };
    if a.cpu {
        let mut e = pollster::block_on(Engine::load_file_cpu(&a.model, so.clone()))?;
        e.set_recovery(!a.no_recovery)?;
        if let Some(dir) = &a.adapter {
            e.load_adapter_dir("adapter", dir)?;
        }
        if let Some(p) = &a.draft {
            e.set_draft(pollster::block_on(Engine::load_file_cpu(p, so))?)?;
        }
        return Ok((e, "CPU backend".to_string()));
    }
    if a.draft.is_some() {
        return Err(Error::invalid(
            "--draft needs --cpu: the GPU backend does not check guesses in one pass yet",
        ));
    }
    let mut e = load_engine(&a.model, a.adapter.as_deref(), so, a.max_binding_mib)?;
    e.set_recovery(!a.no_recovery)?;
    let adapter = &e.require_gpu()?.gpu.adapter;
    let name = format!("GPU {} ({}), KV {:?}", adapter.name, adapter.backend, a.kv);
    Ok((e, name))
}

/// One reply of `e`, streamed to `on_text` as the browser's replies are (`start`,
/// then `next` until done); `on_text` returning false aborts it.
fn reply(
    e: &mut Engine,
    prompt: &Prompt,
    opts: &GenerateOptions,
    mut on_text: impl FnMut(&str) -> bool,
) -> Result<Ended> {
    let id = pollster::block_on(e.start(prompt, opts, &AdapterChoice::Active))?;
    let last = loop {
        match pollster::block_on(e.next(id))? {
            Event::Text { text, .. } if on_text(&text) => {}
            Event::Text { .. } => break e.abort(id),
            done => break Some(done),
        }
    };
    match last {
        Some(Event::Done {
            finish,
            usage,
            calls,
        }) => Ok((finish, usage, calls)),
        _ => Err(Error::internal("a reply ended without its last event")),
    }
}

/// One reply of the plain-Rust f32 reference (the tests' ground truth), with the
/// recovery adapter and a task adapter merged into its weights.
fn reference(
    a: &GenerateArgs,
    prompt: &Prompt,
    opts: &GenerateOptions,
    on_text: impl FnMut(&str, u32) -> bool,
) -> Result<Ended> {
    let (_, mut model) = pippin::recover::load_recovered_reference(&a.model, !a.no_recovery)?;
    if let Some(dir) = &a.adapter {
        // The reference applies an adapter by merging it: W + s·B·A.
        let ad = read_adapter(dir, &model.config)?;
        pippin::adapters::merge_into(&mut model.weights, &ad);
    }
    let tk = model_tokenizer(&a.model)?;
    let p = prompt.prepare(&tk, opts)?;
    let mut session = ReferenceSession::new(&model);
    let r = engine::generate_calls(&mut session, &tk, &p.ids, &p.opts, p.calls, on_text);
    pollster::block_on(r)
}
