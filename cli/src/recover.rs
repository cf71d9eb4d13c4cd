//! `pippin recover`: flags ⇄ `pippin::recover` (accuracy-recovery adapters).

use clap::Args;
use pippin::gguf::Gguf;
use pippin::model::Proj;
use pippin::recover::{self, Options};
use pippin::tokenizer::Tokenizer;
use pippin::{Error, Result};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct RecoverArgs {
    /// The original model (the teacher), e.g. the Q4_1 file a palettized one came from.
    pub source: PathBuf,
    /// Its compressed conversion (`pippin convert`), which the adapter is trained on.
    pub compressed: PathBuf,
    /// Folder for the PEFT adapter (adapter_config.json, adapter_model.safetensors)
    /// and the training state beside them.
    #[arg(long)]
    pub out: PathBuf,
    /// Calibration text files (UTF-8), joined in order. Never the evaluation text.
    #[arg(long, num_args = 1..)]
    pub calibration: Vec<PathBuf>,
    /// Also this many samples (of --seq-len tokens) that the source model writes
    /// itself from random first tokens (LLM-QAT's data-free calibration).
    #[arg(long, default_value_t = 0)]
    pub generate: usize,
    /// LoRA rank (AFM: 16).
    #[arg(long, default_value_t = 16)]
    pub rank: usize,
    /// lora_alpha (default: the rank, a scale of 1).
    #[arg(long)]
    pub alpha: Option<f32>,
    /// Projections to adapt: "all", "none" (with --tables or --norms: a refit
    /// alone), or Hugging Face names (q_proj,v_proj,...).
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub modules: Vec<String>,
    #[arg(long, default_value_t = Options::default().steps)]
    pub steps: usize,
    /// Sequences a step.
    #[arg(long, default_value_t = Options::default().batch)]
    pub batch: usize,
    /// Tokens a sequence.
    #[arg(long, default_value_t = Options::default().seq_len)]
    pub seq_len: usize,
    /// Peak learning rate.
    #[arg(long, default_value_t = Options::default().lr)]
    pub lr: f64,
    #[arg(long, default_value_t = Options::default().seed)]
    pub seed: u64,
    /// Save the adapter and the training state every N steps (0: at the end only).
    #[arg(long, default_value_t = 50)]
    pub save_every: usize,
    /// Leave the palettes' tables as they are (by default they are trained with the
    /// adapter, saved beside it as palette-refit.safetensors, and --gguf writes them
    /// into the file: the adapter expects them).
    #[arg(long)]
    pub no_tables: bool,
    /// The tables' peak learning rate.
    #[arg(long, default_value_t = Options::default().table_lr)]
    pub table_lr: f64,
    /// Leave the RMSNorm weights as they are (by default trained, saved and written
    /// as the tables are).
    #[arg(long)]
    pub no_norms: bool,
    /// The norms' peak learning rate.
    #[arg(long, default_value_t = Options::default().norm_lr)]
    pub norm_lr: f64,
    /// Train which table entry each palettized weight uses too (latent weights
    /// started at the source's, the straight-through estimator): the indices change.
    #[arg(long)]
    pub indices: bool,
    /// The latent weights' peak learning rate.
    #[arg(long, default_value_t = Options::default().index_lr)]
    pub index_lr: f64,
    /// Continue from the training state in --out.
    #[arg(long)]
    pub resume: bool,
    /// Also write the compressed model with the adapter inside, as one GGUF file
    /// (every loader then runs it: `convert --recover` does all three steps).
    #[arg(long)]
    pub gguf: Option<PathBuf>,
}

impl RecoverArgs {
    pub fn options(&self) -> Result<Options> {
        let modules = if self.modules.iter().any(|m| m == "all") {
            Proj::ALL.to_vec()
        } else if self.modules == ["none"] {
            Vec::new()
        } else {
            self.modules
                .iter()
                .map(|m| {
                    Proj::ALL
                        .into_iter()
                        .find(|p| p.hf_name() == m)
                        .ok_or_else(|| Error::invalid(format!("--modules: unknown module {m:?}")))
                })
                .collect::<Result<_>>()?
        };
        Ok(Options {
            rank: self.rank,
            alpha: self.alpha.unwrap_or(self.rank as f32),
            modules,
            steps: self.steps,
            batch: self.batch,
            seq_len: self.seq_len,
            lr: self.lr,
            seed: self.seed,
            save_every: self.save_every,
            tables: !self.no_tables,
            table_lr: self.table_lr,
            norms: !self.no_norms,
            norm_lr: self.norm_lr,
            indices: self.indices,
            index_lr: self.index_lr,
        })
    }

    /// The calibration files' texts, joined by blank lines.
    pub fn calibration_text(&self) -> Result<String> {
        let texts = self
            .calibration
            .iter()
            .map(|p| {
                std::fs::read_to_string(p)
                    .map_err(|e| Error::invalid(format!("cannot read {}: {e}", p.display())))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(texts.join("\n\n"))
    }
}

/// The calibration tokens: `text` in `source`'s tokenizer, then `generate` samples of
/// `opts.seq_len` tokens that `source` writes itself (seeded by `opts.seed`).
pub fn calibration_tokens(
    source: &Path,
    text: &str,
    generate: usize,
    opts: &Options,
) -> Result<Vec<u32>> {
    if text.is_empty() && generate == 0 {
        return Err(Error::invalid(
            "recovery needs calibration: text files, or samples the model writes (--generate)",
        ));
    }
    let (g, _) = Gguf::open(source)?;
    let mut tokens = match text.is_empty() {
        true => Vec::new(),
        false => Tokenizer::from_gguf(&g.metadata)?.encode_prompt(text, false)?,
    };
    if generate > 0 {
        let t0 = web_time::Instant::now();
        let mut log = |i: usize, n: usize| {
            if i.is_multiple_of(16) || i == n {
                eprintln!("recover: the model wrote {i}/{n} samples");
            }
        };
        let (len, seed) = (opts.seq_len, opts.seed);
        let written =
            pollster::block_on(recover::self_written(source, generate, len, seed, &mut log))?;
        eprintln!(
            "recover: {} tokens written by the model in {:.0} s",
            written.len(),
            t0.elapsed().as_secs_f64()
        );
        tokens.extend(written);
    }
    Ok(tokens)
}

pub fn recover_cmd(a: RecoverArgs) -> Result<()> {
    let opts = a.options()?;
    let tokens = calibration_tokens(&a.source, &a.calibration_text()?, a.generate, &opts)?;
    let s = recover::recover(
        &a.source,
        &a.compressed,
        &tokens,
        &a.out,
        &opts,
        a.resume,
        &mut |p| {
            eprintln!(
                "recover: step {}/{}  KL {:.4}  {:.0} tokens/s  ETA {:.0} s",
                p.step, p.steps, p.loss, p.tokens_per_s, p.eta_s
            );
            true
        },
    )?;
    if s.steps == 0 {
        eprintln!(
            "recover: the training state is at step {} already",
            opts.steps
        );
    } else {
        eprintln!(
        "recover: {} steps in {:.0} s over {} calibration tokens; KL {:.4} -> {:.4}; adapter in {}",
        s.steps,
        s.seconds,
        s.calibration_tokens,
        s.first_loss,
        s.last_loss,
        a.out.display()
        );
    }
    let refit = a.out.join(recover::REFIT_FILE);
    if a.gguf.is_none() && refit.exists() {
        eprintln!(
            "recover: the adapter was trained on refit tables and norms ({}): run with --gguf FILE to write the model that has both",
            refit.display()
        );
    }
    if let Some(out) = &a.gguf {
        let source = a
            .source
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into());
        let what = match opts.modules.is_empty() {
            true => "no adapter".to_string(),
            false => format!("rank {}", opts.rank),
        };
        let trained = format!("{what}, {} steps{}", opts.steps, opts.refit_words());
        let bytes = recover::embed_peft(&a.compressed, &a.out, &source, &trained, out)?;
        eprintln!(
            "recover: wrote {} ({:.1} MB)",
            out.display(),
            bytes as f64 / 1e6
        );
    }
    Ok(())
}
