//! `pippin convert` (palettization) and `pippin perplexity` (what it costs).

use crate::recover::calibration_tokens;
use clap::{Args, ValueEnum};
use pippin::convert::{self, Bits, Embedding};
use pippin::engine::perplexity::perplexity;
use pippin::engine::{Engine, ReferenceSession, SessionOptions};
use pippin::quant::kv::KvFormat;
use pippin::recover;
use pippin::{Error, Result};
use std::path::{Path, PathBuf};
use web_time::Instant;

#[derive(Clone, Copy, ValueEnum)]
pub enum BitsArg {
    #[value(name = "4")]
    Four,
    #[value(name = "2")]
    Two,
    Mixed,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum EmbeddingArg {
    #[value(name = "q8_0")]
    Q8_0,
    F16,
    Keep,
}

#[derive(Args)]
pub struct ConvertArgs {
    /// A GGUF file, or a Hugging Face checkpoint folder (config.json, *.safetensors,
    /// tokenizer.json).
    input: PathBuf,
    /// The palettized GGUF to write.
    output: PathBuf,
    /// 4, 2, or mixed (2 or 4 per matrix by sensitivity, to reach --target-bpw).
    #[arg(long, value_enum, default_value = "mixed")]
    bits: BitsArg,
    /// Bits per weight of the palettized matrices for --bits mixed (tables included).
    #[arg(long, default_value_t = 3.5)]
    target_bpw: f64,
    /// Output rows sharing one lookup table in 4-bit matrices.
    #[arg(long, default_value_t = 16)]
    rows_per_lut: usize,
    /// Output rows sharing one lookup table in 2-bit matrices (1: a table per row,
    /// which costs 2-bit matrices ~0.1 bit per weight and keeps far more quality).
    #[arg(long, default_value_t = 1)]
    rows_per_lut_2bit: usize,
    /// Storage of the embedding (and an untied output head).
    #[arg(long, value_enum, default_value = "q8_0")]
    embedding: EmbeddingArg,
    /// Calibration text: importance-weighted k-means and (for mixed) sensitivities.
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// Calibration tokens for importance and Hessians, from the start of the text.
    #[arg(long, default_value_t = 1024)]
    calibration_tokens: usize,
    /// Of those, the tokens each sensitivity (--bits mixed) is measured on.
    #[arg(long, default_value_t = 128)]
    sensitivity_tokens: usize,
    /// GPTQ-style error feedback when assigning weights to table entries (slower; on
    /// the default model it helps only when every matrix is 2-bit).
    #[arg(long)]
    error_feedback: bool,
    #[arg(long, default_value_t = 0x9e3779b9)]
    seed: u64,
    /// Then train an accuracy-recovery adapter against the input (`pippin recover`)
    /// and write it inside the output (its PEFT folder beside: OUTPUT.recovery/).
    #[arg(long)]
    recover: bool,
    /// Calibration text for --recover (default: --calibration). Never the evaluation text.
    #[arg(long, num_args = 1..)]
    recover_text: Vec<PathBuf>,
    /// --recover: also this many samples of 512 tokens (a training sequence) that the input model writes
    /// itself from random first tokens (LLM-QAT's data-free calibration).
    #[arg(long, default_value_t = 0)]
    recover_generate: usize,
    /// --recover: LoRA rank.
    #[arg(long, default_value_t = 16)]
    rank: usize,
    /// --recover: training steps (each one sequence of 512 tokens).
    #[arg(long, default_value_t = recover::Options::default().steps)]
    recover_steps: usize,
    /// --recover: peak learning rate.
    #[arg(long, default_value_t = recover::Options::default().lr)]
    recover_lr: f64,
    /// --recover: leave the palettes' tables as k-means made them (by default they
    /// are trained with the adapter and written into the file).
    #[arg(long)]
    recover_no_tables: bool,
    /// --recover: the tables' peak learning rate.
    #[arg(long, default_value_t = recover::Options::default().table_lr)]
    recover_table_lr: f64,
    /// --recover: leave the RMSNorm weights as they are (by default trained too).
    #[arg(long)]
    recover_no_norms: bool,
    /// --recover: the norms' peak learning rate.
    #[arg(long, default_value_t = recover::Options::default().norm_lr)]
    recover_norm_lr: f64,
    /// --recover: train which table entry each weight uses too (`recover --indices`).
    #[arg(long)]
    recover_indices: bool,
    /// --recover: the latent weights' peak learning rate.
    #[arg(long, default_value_t = recover::Options::default().index_lr)]
    recover_index_lr: f64,
}

pub fn convert_cmd(a: ConvertArgs) -> Result<()> {
    let calibration = match &a.calibration {
        Some(p) => Some(read_text(p)?),
        None => None,
    };
    let opts = convert::Options {
        bits: match a.bits {
            BitsArg::Four => Bits::Four,
            BitsArg::Two => Bits::Two,
            BitsArg::Mixed => Bits::Mixed,
        },
        target_bpw: a.target_bpw,
        rows_per_lut: a.rows_per_lut,
        rows_per_lut_2bit: a.rows_per_lut_2bit,
        embedding: match a.embedding {
            EmbeddingArg::Q8_0 => Embedding::Q8_0,
            EmbeddingArg::F16 => Embedding::F16,
            EmbeddingArg::Keep => Embedding::Keep,
        },
        seed: a.seed,
        calibration,
        calibration_tokens: a.calibration_tokens,
        sensitivity_tokens: a.sensitivity_tokens,
        error_feedback: a.error_feedback,
    };
    let t0 = Instant::now();
    let mut log = |m: &str| eprintln!("convert: {m}");
    if a.recover {
        let mut files = a.recover_text.clone();
        files.extend(a.calibration.clone().filter(|_| a.recover_text.is_empty()));
        let text = files
            .iter()
            .map(|p| read_text(p))
            .collect::<Result<Vec<_>>>()?
            .join("\n\n");
        let ro = recover::Options {
            rank: a.rank,
            alpha: a.rank as f32,
            steps: a.recover_steps,
            lr: a.recover_lr,
            tables: !a.recover_no_tables,
            table_lr: a.recover_table_lr,
            norms: !a.recover_no_norms,
            norm_lr: a.recover_norm_lr,
            indices: a.recover_indices,
            index_lr: a.recover_index_lr,
            save_every: 0,
            ..Default::default()
        };
        let tokens = calibration_tokens(&a.input, &text, a.recover_generate, &ro)?;
        let dir = a.output.with_extension("recovery");
        recover::convert_recovered(&a.input, &a.output, &opts, &ro, &tokens, &dir, &mut log)?;
    } else {
        convert::convert(&a.input, &a.output, &opts, &mut log)?;
    }
    eprintln!("convert: done in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

fn read_text(p: &Path) -> Result<String> {
    std::fs::read_to_string(p)
        .map_err(|e| Error::invalid(format!("cannot read {}: {e}", p.display())))
}

#[derive(Args)]
pub struct PerplexityArgs {
    #[arg(long, default_value = super::DEFAULT_MODEL)]
    model: PathBuf,
    /// A UTF-8 text file (scripts/fetch-text puts some in texts/).
    #[arg(long)]
    text: PathBuf,
    /// KV cache format (GPU: int8, int4, f16, f32; CPU backend: f32, else int8).
    #[arg(long, default_value = "int8", value_parser = super::parse_kv)]
    kv: KvFormat,
    /// A PEFT LoRA adapter folder.
    #[arg(long)]
    adapter: Option<PathBuf>,
    /// Leave out the recovery adapter the model's file carries (`convert --recover`).
    #[arg(long)]
    no_recovery: bool,
    /// Run on the CPU backend (quantized weights; --kv f32, else int8) instead of the GPU.
    #[arg(long)]
    cpu: bool,
    /// Run the f32 CPU reference (f32 KV).
    #[arg(long, conflicts_with = "cpu")]
    reference: bool,
    /// Tokens per window.
    #[arg(long, default_value_t = 512)]
    window: usize,
    /// Tokens a window advances (each token is scored once).
    #[arg(long, default_value_t = 256)]
    stride: usize,
    /// Score only the first N tokens of the text (0 = all).
    #[arg(long, default_value_t = 0)]
    max_tokens: usize,
}

pub fn perplexity_cmd(a: PerplexityArgs) -> Result<()> {
    crate::adapter_flags(a.no_recovery, a.adapter.is_some())?;
    let tk = crate::model_tokenizer(&a.model)?;
    let mut tokens = tk.encode_prompt(&read_text(&a.text)?, false)?;
    if a.max_tokens > 0 {
        tokens.truncate(a.max_tokens);
    }
    let t0 = Instant::now();
    if a.reference && a.kv != KvFormat::Int8 && a.kv != KvFormat::F32 {
        eprintln!("perplexity: --kv applies to the GPU and the CPU backend; the reference keeps f32 keys and values");
    }
    let (p, engine) = if a.cpu {
        let so = SessionOptions {
            max_context: a.window,
            kv: a.kv,
            ..Default::default()
        };
        let mut e = pollster::block_on(Engine::load_file_cpu(&a.model, so))?;
        e.set_recovery(!a.no_recovery)?;
        if let Some(dir) = &a.adapter {
            e.load_adapter_dir("adapter", dir)?;
        }
        let mut b = e.backend()?;
        (
            pollster::block_on(perplexity(&mut b, &tokens, a.window, a.stride))?,
            "CPU backend".to_string(),
        )
    } else if a.reference {
        let (_, mut model) = pippin::recover::load_recovered_reference(&a.model, !a.no_recovery)?;
        if let Some(dir) = &a.adapter {
            let ad = super::read_adapter(dir, &model.config)?;
            pippin::adapters::merge_into(&mut model.weights, &ad);
        }
        let mut s = ReferenceSession::new(&model);
        (
            pollster::block_on(perplexity(&mut s, &tokens, a.window, a.stride))?,
            "CPU reference".to_string(),
        )
    } else {
        let so = SessionOptions {
            max_context: a.window,
            kv: a.kv,
            ..Default::default()
        };
        let mut e = super::load_engine(&a.model, a.adapter.as_deref(), so, None)?;
        e.set_recovery(!a.no_recovery)?;
        let name = format!("GPU {}, KV {:?}", e.require_gpu()?.gpu.adapter.name, a.kv);
        let mut b = e.backend()?;
        (
            pollster::block_on(perplexity(&mut b, &tokens, a.window, a.stride))?,
            name,
        )
    };
    println!(
        "perplexity {:.3} (mean NLL {:.4} nats over {} tokens; window {}, stride {}; {engine}; {:.1} s)",
        p.perplexity,
        p.nll,
        p.tokens,
        a.window,
        a.stride,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
