//! The native command line: `pippin generate`, `bench`, `convert`, `perplexity`,
//! `recover`, `make-adapter`, `info`.

mod bench;
mod bench_guided;
mod bench_sessions;
mod bench_speculation;
mod generate;
mod info;
mod quality;
mod recover;

use generate::{generate, GenerateArgs};
use info::info;

use clap::{Parser, Subcommand};
use pippin::engine::{Engine, SessionOptions};
use pippin::gguf::Gguf;
use pippin::gpu::{Caps, Gpu};
use pippin::model::Config;
use pippin::quant::kv::KvFormat;
use pippin::tokenizer::Tokenizer;
use pippin::{Error, Result};
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
        /// Only these parts of the bench (default: all), e.g. `--only kernels` or
        /// `--only speculation` while tuning a kernel (the CPU bench has no kernels).
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
            only,
            ..
        } => run_bench_cpu(
            &model,
            (prompt, steps, kv),
            json,
            draft.as_deref(),
            !no_recovery,
            &only,
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

/// The tokenizer of the model at `path`, its options checked: `--no-recovery` with
/// `--adapter` is refused (a task adapter runs on top of the recovery adapter).
/// A task adapter runs on top of a recovered model's recovery adapter: refused without it.
fn adapter_flags(no_recovery: bool, adapter: bool) -> Result<()> {
    if no_recovery && adapter {
        return Err(Error::invalid(
            "--no-recovery with --adapter: on a recovered model a task adapter runs on top of the recovery adapter",
        ));
    }
    Ok(())
}

fn model_tokenizer(path: &std::path::Path) -> Result<Tokenizer> {
    let (gguf, _) = Gguf::open(path)?;
    Tokenizer::from_gguf(&gguf.metadata)
}

fn parse_kv(s: &str) -> std::result::Result<KvFormat, String> {
    KvFormat::parse(s)
        .ok_or_else(|| format!("{s:?} is not a KV cache format (int8, int4, f16, f32)"))
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
    (prompt, steps, kv): (usize, usize, KvFormat),
    json: bool,
    draft: Option<&std::path::Path>,
    recovery: bool,
    only: &[BenchPart],
) -> Result<()> {
    let wants = |p: BenchPart| only.is_empty() || only.contains(&p);
    pippin::memory::reset_peak();
    let before = pippin::memory::heap();
    let so = bench_session(prompt, steps, kv);
    let mut engine = pollster::block_on(Engine::load_file_cpu(path, so.clone()))?;
    engine.set_recovery(recovery)?;
    let (peak, live) = (
        pippin::memory::heap().peak_bytes - before.live_bytes,
        pippin::memory::heap().live_bytes - before.live_bytes,
    );
    let (prefill, decode) = match wants(BenchPart::Model) {
        true => bench::cpu_model(&mut engine, prompt, steps)?,
        false => (0.0, 0.0),
    };
    let guided = match wants(BenchPart::Guided) {
        true => Some(bench_guided::guided(&mut engine, 48)?),
        false => None,
    };
    let mut speculation = Vec::new();
    if wants(BenchPart::Speculation) {
        speculation = self::speculation(&mut engine, path)?;
        if let Some(d) = draft {
            engine.set_draft(pollster::block_on(Engine::load_file_cpu(d, so))?)?;
            speculation.extend(self::speculation(&mut engine, path)?);
        }
    }
    let prefix = match wants(BenchPart::Prefix) {
        true => Some(bench_sessions::prefix_cache(&mut engine)?),
        false => None,
    };
    if json {
        let mut v = serde_json::json!({
            "backend": "cpu",
            "model": path.display().to_string(),
            "threads": rayon::current_num_threads(),
            "memory": {"load_heap_peak_bytes": peak, "heap_after_load_bytes": live},
        });
        if wants(BenchPart::Model) {
            v["prefill_tokens_per_s"] = prefill.into();
            v["decode_tokens_per_s"] = decode.into();
        }
        if let Some(g) = &guided {
            v["guided"] = g.to_json();
        }
        if wants(BenchPart::Speculation) {
            v["speculation"] = speculation.iter().map(|t| t.to_json()).collect();
        }
        if let Some(p) = &prefix {
            v["prefix_cache"] = p.to_json();
        }
        println!("{v:#}");
        return Ok(());
    }
    println!(
        "CPU backend, {} ({} threads)\nheap after load {} MB (peak {} MB)",
        path.display(),
        rayon::current_num_threads(),
        live / 1_000_000,
        peak / 1_000_000,
    );
    if wants(BenchPart::Model) {
        println!("prefill {prefill:.1} tokens/s ({prompt}-token prompt), decode {decode:.1} tokens/s ({steps} steps)");
    }
    if let Some(g) = &guided {
        println!("{g}");
    }
    for t in &speculation {
        println!("{t}");
    }
    if let Some(p) = &prefix {
        println!("{p}");
    }
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
