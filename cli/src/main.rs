//! The native command line: `pippin generate`, `bench`, `convert`, `perplexity`,
//! `recover`, `make-adapter`, `info`.

mod bench;
mod bench_guided;
mod bench_sessions;
mod bench_speculation;
mod quality;
mod recover;

use clap::{Args, Parser, Subcommand};
use pippin::engine::tools::{self, Prepared};
use pippin::engine::{
    self, Engine, GenerateOptions, ReferenceSession, SessionOptions, Speculation, ToolChoice,
    ToolMode,
};
use pippin::gguf::Gguf;
use pippin::gpu::{Caps, Gpu};
use pippin::guided::ResponseFormat;
use pippin::model::Config;
use pippin::quant::kv::KvFormat;
use pippin::sampler::SamplerOptions;
use pippin::tokenizer::{Message, Tokenizer};
use pippin::{Error, Result};
use std::io::Write;
use std::path::PathBuf;

/// Counts the heap, for `bench --json`'s memory figures (see `pippin::memory`).
#[global_allocator]
static HEAP: pippin::memory::Counting = pippin::memory::Counting;

const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

#[derive(Parser)]
#[command(
    name = "pippin",
    version,
    about = "On-device language models, natively and in the browser"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text from a prompt, streamed to stdout.
    Generate(Box<GenerateArgs>),
    /// Measure the GPU kernels and the whole model (see docs/performance.md).
    Bench {
        #[arg(long, default_value = DEFAULT_MODEL)]
        model: PathBuf,
        /// Repetitions per kernel timing.
        #[arg(long, default_value_t = 20)]
        reps: usize,
        /// Prompt tokens for the prefill measurement (also the GEMM chunk).
        #[arg(long, default_value_t = 64)]
        prompt: usize,
        /// Decode steps to time.
        #[arg(long, default_value_t = 16)]
        steps: usize,
        #[arg(long, default_value = "int8", value_parser = parse_kv)]
        kv: KvFormat,
        /// One JSON object on stdout (device-independent figures included) instead of
        /// the tables.
        #[arg(long)]
        json: bool,
        /// The CPU backend instead of the GPU: prefill and decode tokens/s, memory
        /// and the guided reply (natively its plain loops, on rayon's threads).
        #[arg(long)]
        cpu: bool,
        /// Hold every GPU storage binding to this many MiB (as a device whose
        /// maxStorageBufferBindingSize is that would): big tensors split, and a
        /// model whose KV cache or tables do not fit is refused.
        #[arg(long)]
        max_binding_mib: Option<u64>,
        /// With --cpu: the speculative-decoding figures again with this draft model
        /// (GGUF, the model's vocabulary) proposing the guesses.
        #[arg(long, value_name = "FILE")]
        draft: Option<PathBuf>,
        /// Leave out the recovery adapter the model's file carries.
        #[arg(long)]
        no_recovery: bool,
        /// Only these parts of the GPU bench (default: all), e.g. `--only kernels` or
        /// `--only speculation` while tuning a kernel.
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<BenchPart>,
    },
    /// Write a random LoRA adapter for a model in PEFT's file layout (a test fixture).
    MakeAdapter {
        /// Folder to write adapter_config.json and adapter_model.safetensors into.
        out: PathBuf,
        #[arg(long, default_value = DEFAULT_MODEL)]
        model: PathBuf,
        #[arg(long, default_value_t = 8)]
        rank: usize,
        /// Hugging Face module names, comma-separated.
        #[arg(
            long,
            default_value = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
        )]
        modules: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// B = 0: an adapter that changes nothing.
        #[arg(long)]
        zero_b: bool,
    },
    /// Write the large synthetic model the memory tests load (~500 MB, random
    /// weights, a vocabulary of "t0".."t99999").
    MakeLarge { out: PathBuf },
    /// Write a ~3.2B-parameter Q4_K_M model of AFM-on-device's shape (random valid
    /// K-quant blocks, ~1.9 GB) with the vocabulary and tokenizer of `--vocab-from`,
    /// for benchmarks at that size without a model hub.
    MakeAfm {
        out: PathBuf,
        #[arg(long, default_value = DEFAULT_MODEL)]
        vocab_from: PathBuf,
    },
    /// Palettize a model (AFM-style 2/4-bit lookup tables) into a new GGUF.
    Convert(quality::ConvertArgs),
    /// Token-level perplexity of a model over a text (sliding window).
    Perplexity(quality::PerplexityArgs),
    /// Train accuracy-recovery LoRA adapters for a compressed model against its
    /// original (distillation on calibration text); writes a PEFT folder.
    Recover(recover::RecoverArgs),
    /// Print a model's configuration, metadata and tensor table.
    Info {
        /// A GGUF file.
        model: PathBuf,
    },
}

#[derive(Args)]
struct GenerateArgs {
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

fn main() {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Generate(a) => generate(*a),
        Cmd::Info { model } => info(&model),
        Cmd::Convert(a) => quality::convert_cmd(a),
        Cmd::Perplexity(a) => quality::perplexity_cmd(a),
        Cmd::Recover(a) => recover::recover_cmd(a),
        Cmd::MakeAdapter {
            out,
            model,
            rank,
            modules,
            seed,
            zero_b,
        } => make_adapter(&out, &model, rank, &modules, seed, zero_b),
        Cmd::MakeLarge { out } => pippin::testing::synthetic::Spec::large()
            .write(&out)
            .map_err(Error::from),
        Cmd::MakeAfm { out, vocab_from } => {
            pippin::gguf::Gguf::open(&vocab_from).and_then(|(gguf, _)| {
                let spec = pippin::testing::synthetic::Spec::afm(&gguf.metadata);
                spec.write(&out).map_err(Error::from)
            })
        }
        Cmd::Bench {
            model,
            prompt,
            steps,
            kv,
            json,
            cpu: true,
            draft,
            no_recovery,
            ..
        } => run_bench_cpu(
            &model,
            prompt,
            steps,
            kv,
            json,
            draft.as_deref(),
            !no_recovery,
        ),
        Cmd::Bench {
            model,
            reps,
            prompt,
            steps,
            kv,
            json,
            cpu: false,
            max_binding_mib,
            no_recovery,
            only,
            ..
        } => run_bench(
            &model,
            reps,
            prompt,
            steps,
            kv,
            json,
            max_binding_mib,
            !no_recovery,
            &only,
        ),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn parse_kv(s: &str) -> std::result::Result<KvFormat, String> {
    KvFormat::parse(s)
        .ok_or_else(|| format!("{s:?} is not a KV cache format (int8, int4, f16, f32)"))
}

fn generate(a: GenerateArgs) -> Result<()> {
    if a.no_recovery && a.adapter.is_some() {
        return Err(Error::invalid(
            "--no-recovery with --adapter: on a recovered model a task adapter runs on top of the recovery adapter",
        ));
    }
    let (gguf, _) = Gguf::open(&a.model)?;
    let tk = Tokenizer::from_gguf(&gguf.metadata)?;
    let opts = GenerateOptions {
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
        response_format: response_format(&a)?,
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
    };
    let Prepared {
        ids: prompt,
        opts,
        calls,
    } = match messages(&a)? {
        Some(m) => tools::prepare(&tk, &m, &opts)?,
        None => Prepared {
            ids: tk.encode_prompt(a.prompt.as_deref().unwrap_or_default(), false)?,
            opts,
            calls: None,
        },
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (e.g. `| head`) ends generation quietly.
    let on_text = |piece: &str, _| {
        out.write_all(piece.as_bytes())
            .and_then(|_| out.flush())
            .is_ok()
    };
    let so = SessionOptions {
        max_context: a.max_context,
        kv: a.kv,
        ..Default::default()
    };
    let (finish, u, tool_calls, engine) = if a.reference {
        let (_, mut model) = pippin::recover::load_recovered_reference(&a.model, !a.no_recovery)?;
        if let Some(dir) = &a.adapter {
            // The reference applies an adapter by merging it: W + s·B·A.
            let ad = read_adapter(dir, &model.config)?;
            pippin::adapters::merge_into(&mut model.weights, &ad);
        }
        let mut session = ReferenceSession::new(&model);
        let r = engine::generate_calls(&mut session, &tk, &prompt, &opts, calls, on_text);
        let (f, u, c) = pollster::block_on(r)?;
        (f, u, c, "CPU reference".to_string())
    } else if a.cpu {
        let mut e = pollster::block_on(Engine::load_file_cpu(&a.model, so.clone()))?;
        e.set_recovery(!a.no_recovery)?;
        if let Some(dir) = &a.adapter {
            e.load_adapter_dir("adapter", dir)?;
        }
        if let Some(p) = &a.draft {
            e.set_draft(pollster::block_on(Engine::load_file_cpu(p, so))?)?;
        }
        let (mut b, mut d) = e.backends()?;
        let r = engine::generate_drafted(&mut b, d.as_mut(), &tk, &prompt, &opts, calls, on_text);
        let (f, u, c) = pollster::block_on(r)?;
        (f, u, c, "CPU backend".to_string())
    } else {
        if a.draft.is_some() {
            return Err(Error::invalid(
                "--draft needs --cpu: the GPU backend does not check guesses in one pass yet",
            ));
        }
        let mut e = load_engine(&a.model, a.adapter.as_deref(), so, a.max_binding_mib)?;
        e.set_recovery(!a.no_recovery)?;
        let name = format!(
            "GPU {} ({})",
            e.require_gpu()?.gpu.adapter.name,
            e.require_gpu()?.gpu.adapter.backend
        );
        let mut b = e.backend()?;
        let r = engine::generate_calls(&mut b, &tk, &prompt, &opts, calls, on_text);
        let (f, u, c) = pollster::block_on(r)?;
        (f, u, c, format!("{name}, KV {:?}", a.kv))
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

/// The session `pippin bench` measures: room for the prompt and the steps, and for
/// the guided and speculative replies (chat prompts and up to `SPECULATED` tokens).
fn bench_session(prompt: usize, steps: usize, kv: KvFormat) -> SessionOptions {
    SessionOptions {
        max_context: (prompt + steps + 1).max(1024),
        kv,
        ..Default::default()
    }
}

// The bench's flags, passed on as they are.
#[allow(clippy::too_many_arguments)]
fn run_bench(
    path: &std::path::Path,
    reps: usize,
    prompt: usize,
    steps: usize,
    kv: KvFormat,
    json: bool,
    max_binding_mib: Option<u64>,
    recovery: bool,
    only: &[BenchPart],
) -> Result<()> {
    pippin::memory::reset_peak();
    let before = pippin::memory::heap();
    let session = bench_session(prompt, steps, kv);
    let t0 = web_time::Instant::now();
    let mut engine = load_engine(path, None, session, max_binding_mib)?;
    engine.set_recovery(recovery)?;
    // Natively the file is local and the compile runs before the upload, not beside it.
    let load = serde_json::json!({
        "total_ms": t0.elapsed().as_secs_f64() * 1e3,
        "header_compile_ms": engine.require_gpu()?.header_compile_ms,
    });
    let memory = serde_json::json!({
        "load_heap_peak_bytes": pippin::memory::heap().peak_bytes - before.live_bytes,
        "heap_after_load_bytes": pippin::memory::heap().live_bytes - before.live_bytes,
        "gpu_bytes": engine.gpu_bytes(),
    });
    let wants = |p: BenchPart| only.is_empty() || only.contains(&p);
    let kernels = match wants(BenchPart::Kernels) {
        true => Some(bench::kernels(
            engine.require_gpu()?,
            reps,
            prompt.clamp(2, 64),
        )?),
        false => None,
    };
    let figures = match wants(BenchPart::Model) {
        true => Some(bench::figures(&mut engine, path, prompt, steps)?),
        false => None,
    };
    let guided = match wants(BenchPart::Guided) {
        true => Some(bench_guided::guided(&mut engine, 48)?),
        false => None,
    };
    let speculation = match wants(BenchPart::Speculation) {
        true => speculation(&mut engine, path)?,
        false => Vec::new(),
    };
    let prefix = match wants(BenchPart::Prefix) {
        true => Some(bench_sessions::prefix_cache(&mut engine)?),
        false => None,
    };
    if json {
        let mut v = figures.map_or_else(|| serde_json::json!({}), |f| f.to_json());
        if let Some(g) = guided {
            v["guided"] = g.to_json();
        }
        if wants(BenchPart::Speculation) {
            v["speculation"] = speculation.iter().map(|t| t.to_json()).collect();
        }
        if let Some(p) = prefix {
            v["prefix_cache"] = p.to_json();
        }
        v["memory"] = memory;
        v["load"] = load;
        if let Some(k) = kernels {
            v["kernels"] = serde_json::to_value(&k).map_err(|e| Error::invalid(e.to_string()))?;
        }
        println!("{v:#}");
        return Ok(());
    }
    let a = &engine.require_gpu()?.gpu.adapter;
    println!(
        "adapter: {} ({}, {}; software: {}, subgroup size: {})",
        a.name, a.backend, a.driver, a.software, a.subgroup_size
    );
    println!(
        "model: {} ({} MB of weights on the GPU)\n",
        path.display(),
        engine.require_gpu()?.weight_bytes / 1_000_000
    );
    if let Some(k) = &kernels {
        print_kernels(k);
    }
    for s in [
        figures.map(|f| f.to_string()),
        guided.map(|g| g.to_string()),
    ] {
        s.into_iter().for_each(|s| println!("{s}"));
    }
    for t in &speculation {
        println!("{t}");
    }
    if let Some(p) = prefix {
        println!("{p}");
    }
    println!("memory: {memory}");
    println!("load: {load}");
    Ok(())
}

/// The parts of `pippin bench` (GPU) that `--only` picks.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BenchPart {
    /// The matmul table (decode, a speculative check, a prefill chunk).
    Kernels,
    /// Prefill and decode tokens/s, dispatches, GPU objects and CPU time a step.
    Model,
    Guided,
    Speculation,
    /// The prefix cache's time to first token.
    Prefix,
}

fn print_kernels(kernels: &[bench::KernelRow]) {
    println!("| matmul | rows × cols | tokens | format | ms | GB/s | GFLOP/s | naive GEMV ms | speed-up |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in kernels {
        let (naive, ratio) = match r.naive_ms {
            Some(n) => (format!("{n:.3}"), format!("{:.1}×", n / r.ms)),
            None => ("".into(), "".into()),
        };
        println!(
            "| {} | {} × {} | {} | {} | {:.3} | {:.2} | {:.2} | {naive} | {ratio} |",
            r.name,
            r.rows,
            r.cols,
            r.tokens,
            r.format,
            r.ms,
            r.gbps(),
            r.gflops()
        );
    }
    println!();
}

/// `pippin bench --cpu`: the CPU backend's speed, memory and guided reply.
fn run_bench_cpu(
    path: &std::path::Path,
    prompt: usize,
    steps: usize,
    kv: KvFormat,
    json: bool,
    draft: Option<&std::path::Path>,
    recovery: bool,
) -> Result<()> {
    pippin::memory::reset_peak();
    let before = pippin::memory::heap();
    let so = bench_session(prompt, steps, kv);
    let mut engine = pollster::block_on(Engine::load_file_cpu(path, so.clone()))?;
    engine.set_recovery(recovery)?;
    let (peak, live) = (
        pippin::memory::heap().peak_bytes - before.live_bytes,
        pippin::memory::heap().live_bytes - before.live_bytes,
    );
    let (prefill, decode) = bench::cpu_model(&mut engine, prompt, steps)?;
    let guided = bench_guided::guided(&mut engine, 48)?;
    let mut speculation = speculation(&mut engine, path)?;
    let prefix = bench_sessions::prefix_cache(&mut engine)?;
    if let Some(d) = draft {
        engine.set_draft(pollster::block_on(Engine::load_file_cpu(d, so))?)?;
        speculation.extend(self::speculation(&mut engine, path)?);
    }
    if json {
        let v = serde_json::json!({
            "backend": "cpu",
            "model": path.display().to_string(),
            "threads": rayon::current_num_threads(),
            "prefill_tokens_per_s": prefill,
            "decode_tokens_per_s": decode,
            "guided": guided.to_json(),
            "speculation": speculation.iter().map(|t| t.to_json()).collect::<Vec<_>>(),
            "prefix_cache": prefix.to_json(),
            "memory": {"load_heap_peak_bytes": peak, "heap_after_load_bytes": live},
        });
        println!("{v:#}");
        return Ok(());
    }
    println!(
        "CPU backend, {} ({} threads)\nprefill {prefill:.1} tokens/s ({prompt}-token prompt), decode {decode:.1} tokens/s ({steps} steps)\nheap after load {} MB (peak {} MB)\n{guided}",
        path.display(),
        rayon::current_num_threads(),
        live / 1_000_000,
        peak / 1_000_000,
    );
    for t in &speculation {
        println!("{t}");
    }
    println!("{prefix}");
    Ok(())
}

/// Longest reply of the speculation figures.
const SPECULATED: usize = 160;

/// `bench_speculation` on the engine, with the model file's tokenizer.
fn speculation(
    engine: &mut Engine,
    path: &std::path::Path,
) -> Result<Vec<bench_speculation::Task>> {
    let (gguf, _) = Gguf::open(path)?;
    let tk = Tokenizer::from_gguf(&gguf.metadata)?;
    bench_speculation::speculation(engine, &tk, SPECULATED)
}

/// The engine on the GPU (every optional feature the adapter has, bindings held to
/// `max_binding_mib` when given), with a LoRA adapter folder made active when given.
fn load_engine(
    model: &std::path::Path,
    adapter: Option<&std::path::Path>,
    session: SessionOptions,
    max_binding_mib: Option<u64>,
) -> Result<Engine> {
    let cap = max_binding_mib.map(|m| m.saturating_mul(1 << 20));
    let gpu = pollster::block_on(Gpu::with_max_binding(Caps::all(), cap))?;
    let mut e = pollster::block_on(Engine::load_file(gpu, model, session))?;
    if let Some(dir) = adapter {
        e.load_adapter_dir("adapter", dir)?;
    }
    Ok(e)
}

/// Reads a PEFT adapter folder for a model.
fn read_adapter(
    dir: &std::path::Path,
    c: &pippin::model::Config,
) -> Result<pippin::adapters::Adapter> {
    let read = |f: &str| {
        std::fs::read(dir.join(f))
            .map_err(|e| Error::invalid(format!("cannot read {}: {e}", dir.join(f).display())))
    };
    pippin::adapters::parse(
        &read("adapter_config.json")?,
        &read("adapter_model.safetensors")?,
        c,
    )
}

fn make_adapter(
    out: &std::path::Path,
    model: &std::path::Path,
    rank: usize,
    modules: &str,
    seed: u64,
    zero_b: bool,
) -> Result<()> {
    use pippin::adapters::fixture::{self, FixtureSpec};
    let (g, _) = Gguf::open(model)?;
    let c = Config::from_gguf(&g)?;
    let modules: Vec<&str> = modules.split(',').map(str::trim).collect();
    let spec = FixtureSpec {
        zero_b,
        ..FixtureSpec::new(rank, &modules, seed)
    };
    let (config, weights) = fixture::write(&c, &spec);
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("adapter_config.json"), config)?;
    std::fs::write(out.join("adapter_model.safetensors"), weights)?;
    println!(
        "wrote {} (rank {rank}, {})",
        out.display(),
        modules.join(", ")
    );
    Ok(())
}

fn info(path: &std::path::Path) -> Result<()> {
    // Every file of a split model: its tensors are in all of them.
    let (g, _) = pippin::gguf::split::open_model(path)?;
    // Built whole, then written once: `pippin info … | head` must not panic.
    let mut s = String::new();
    write_info(&mut s, path, &g).map_err(|e| Error::invalid(e.to_string()))?;
    let _ = std::io::stdout().write_all(s.as_bytes());
    Ok(())
}

fn write_info(s: &mut String, path: &std::path::Path, g: &Gguf) -> std::fmt::Result {
    use std::fmt::Write;
    let (nm, nt) = (g.metadata.len(), g.tensors.len());
    writeln!(
        s,
        "{}: GGUF v{}, {nm} metadata keys, {nt} tensors",
        path.display(),
        g.version
    )?;
    match Config::from_gguf(g) {
        Ok(c) => {
            let f = c.arch.family();
            writeln!(s, "\nfamily: {} ({})", f.name(), f.module())?;
            writeln!(s, "\nconfig: {c:#?}")?
        }
        Err(e) => writeln!(s, "\nconfig: {e}")?,
    }
    writeln!(s, "\nmetadata:")?;
    for (k, v) in g.metadata.iter() {
        writeln!(s, "  {k:<44} {}", v.summary())?;
    }
    writeln!(s, "\ntensors:")?;
    let mut by_type = std::collections::BTreeMap::<(&str, bool), (usize, u64, u64)>::new();
    for t in &g.tensors {
        let dims = format!("{:?}", t.dims);
        writeln!(
            s,
            "  {:<36} {:<5} {dims:<18} {:>11} bytes",
            t.name,
            t.ty.name(),
            t.n_bytes
        )?;
        let e = by_type
            .entry((t.ty.name(), t.ty.can_dequantize()))
            .or_default();
        *e = (e.0 + 1, e.1 + t.n_elements, e.2 + t.n_bytes);
    }
    write_palettes(s, g)?;
    writeln!(s, "\nby type:")?;
    for ((ty, decodable), (n, elems, bytes)) in by_type {
        let bpw = bytes as f64 * 8.0 / elems as f64;
        let note = if decodable {
            ""
        } else {
            " — Pippin cannot decode this type"
        };
        writeln!(
            s,
            "  {ty:<6} {n:>4} tensors {elems:>12} weights {bytes:>11} bytes ({bpw:.2} bits/weight){note}"
        )?;
    }
    Ok(())
}

/// A summary of the palettized matrices (`pippin convert` output), if any.
fn write_palettes(s: &mut String, g: &Gguf) -> std::fmt::Result {
    use std::fmt::Write;
    let (mut n, mut weights, mut bytes, mut two) = (0, 0u64, 0u64, 0);
    for idx in g.tensors.iter().filter(|t| t.name.ends_with(".pidx")) {
        let lut_name = idx.name.replace(".pidx", ".plut");
        let Some(lut) = g.tensor(&lut_name) else {
            continue;
        };
        let bits = if lut.dims.first() == Some(&4) { 2 } else { 4 };
        n += 1;
        two += (bits == 2) as usize;
        weights += idx.n_elements * 32 / bits;
        bytes += idx.n_bytes + lut.n_bytes;
    }
    if n > 0 {
        writeln!(
            s,
            "\npalettized: {n} matrices ({two} at 2 bits, {} at 4), {weights} weights, {:.3} bits/weight with their tables",
            n - two,
            bytes as f64 * 8.0 / weights as f64
        )?;
    }
    Ok(())
}
