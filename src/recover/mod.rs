//! Accuracy-recovery adapters, as AFM pairs with its palettized weights: LoRA updates
//! trained on the compressed model (its weights frozen) so that its next-token
//! distributions match the original's on calibration text — distillation, the loss
//! being KL(original ‖ compressed + adapter) over the whole vocabulary at every
//! position. candle (`net`) runs both models and gives the gradients; the result is a
//! PEFT folder (`adapters::write`) that every LoRA path of Pippin (and PEFT) reads.
//! The palettes' tables and the norms are trained with the adapter (`refit`) and go
//! back into the palettized file in place of its own.
//! Deterministic for a seed, resumable from its checkpoint, bounded by
//! `batch × seq_len` tokens a step. Native only (`pippin recover`).

mod adam;
mod checkpoint;
mod embed;
mod kl;
mod lora;
pub mod net;
mod qat;
mod refit;
mod samples;
mod tensors;

use crate::adapters::{self, PeftSpec};
use crate::error::{Error, Result};
use crate::gguf::{split::open_model, Gguf, TensorReader};
use crate::model::{load_reference, KvCache, Proj, Reference};
use crate::rng::Rng;
use adam::Adam;
pub use embed::{embed, embed_peft, REFIT};
use lora::Loras;
use net::Net;
use refit::Refit;
/// The refit's file in a `recover` folder.
pub use refit::FILE as REFIT_FILE;
pub use samples::self_written;
use std::path::Path;
use tensors::ce;
use web_time::Instant;

/// How to train.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// LoRA rank (AFM: 16; 8–32 offered).
    pub rank: usize,
    /// PEFT's `lora_alpha`: updates are scaled by alpha / rank.
    pub alpha: f32,
    /// The projections that get an update (AFM: every linear layer).
    pub modules: Vec<Proj>,
    pub steps: usize,
    /// Sequences a step.
    pub batch: usize,
    /// Tokens a sequence (calibration text is cut into such windows).
    pub seq_len: usize,
    /// Peak learning rate (linear warm-up over the first 5% of steps, cosine down to
    /// a tenth of it).
    pub lr: f64,
    pub seed: u64,
    /// Write the adapter and the checkpoint every this many steps (0: at the end).
    pub save_every: usize,
    /// Train the palettes' tables too (`refit`; where the file has palettes), at
    /// `table_lr` at the peak.
    pub tables: bool,
    pub table_lr: f64,
    /// Train the RMSNorm weights too, at `norm_lr` at the peak.
    pub norms: bool,
    pub norm_lr: f64,
    /// Train which table entry each palettized weight uses (`qat`: latent weights
    /// started at the original's, at `index_lr` at the peak); needs `tables`.
    pub indices: bool,
    pub index_lr: f64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            rank: 16,
            alpha: 16.0,
            modules: Proj::ALL.to_vec(),
            // One pass over the ~40k calibration tokens of texts/ (~10 minutes on 2
            // cores for the default model): a second pass fits the text, not the model
            // (4 bits: 17.56 after one, 17.59 after two). 3e-3 beat 1e-3 (17.8
            // against 18.1 after one pass at 4 bits) and 5e-3 diverged without
            // clipping. Sequences as long as the evaluation's window: at 128 tokens
            // the adapter never saw the positions most held-out tokens are scored at
            // (one pass, 4 bits, with the refit: 17.75 at 4 × 128, 17.56 at 1 × 512).
            steps: 80,
            batch: 1,
            seq_len: 512,
            lr: 3e-3,
            seed: 0x5eed,
            save_every: 50,
            // One pass at 4 bits: the palettes alone 20.15, refit 18.10 (tables at
            // 1e-3: entries of ~0.1–1 a level apart by ~0.1–0.2; 1e-4 barely moved
            // them, 19.25).
            tables: true,
            table_lr: 1e-3,
            norms: true,
            norm_lr: 3e-4,
            // Off: with texts/' ~40k tokens it measured worse (4 bits, one pass:
            // 18.17 against 17.56 at 1e-5; 1e-4 trained worse from the first steps).
            indices: false,
            index_lr: 1e-5,
        }
    }
}

impl Options {
    /// What is refit besides the adapter, for the file's record: ", tables and norms
    /// refit", or nothing.
    pub fn refit_words(&self) -> &'static str {
        match (self.tables && self.indices, self.tables, self.norms) {
            (true, _, true) => ", indices, tables and norms refit",
            (true, _, false) => ", indices and tables refit",
            (_, true, true) => ", tables and norms refit",
            (_, true, false) => ", tables refit",
            (_, false, true) => ", norms refit",
            (_, false, false) => "",
        }
    }
}

/// Where training stands, after each step.
#[derive(Clone, Debug)]
pub struct Progress {
    pub step: usize,
    pub steps: usize,
    /// This step's mean KL divergence (nats a token).
    pub loss: f64,
    /// Training tokens a second, over this run's steps.
    pub tokens_per_s: f64,
    /// Seconds left at that rate.
    pub eta_s: f64,
}

/// What a finished run did.
#[derive(Clone, Debug)]
pub struct Summary {
    pub steps: usize,
    /// Mean KL of the first step this run took and of the last.
    pub first_loss: f64,
    pub last_loss: f64,
    pub calibration_tokens: usize,
    pub seconds: f64,
}

/// Trains recovery adapters for `compressed`, a conversion of `source`, on the
/// `calibration` tokens and writes the PEFT folder `out` (with
/// `recover-state.safetensors` beside, from which `resume` continues). `progress`
/// hears every step and returns whether to go on: `false` saves and stops there.
pub fn recover(
    source: &Path,
    compressed: &Path,
    calibration: &[u32],
    out: &Path,
    opts: &Options,
    resume: bool,
    progress: &mut dyn FnMut(&Progress) -> bool,
) -> Result<Summary> {
    check(opts)?;
    let (teacher, student) = pair(source, compressed)?;
    if opts.seq_len > student.config.context_length {
        return Err(Error::invalid(format!(
            "recover: sequences of {} tokens are longer than the model's context ({})",
            opts.seq_len, student.config.context_length
        )));
    }
    let seqs = sequences(calibration, opts.seq_len);
    if seqs.len() < opts.batch {
        return Err(Error::invalid(format!(
            "the calibration text makes {} sequences of {} tokens; a step takes {}",
            seqs.len(),
            opts.seq_len,
            opts.batch
        )));
    }
    let config = student.config.clone();
    let (mut student, teacher) = (
        Net::new(config.clone(), student.weights)?,
        Net::new(config.clone(), teacher.weights)?,
    );
    let loras = Loras::new(&config, opts.rank, opts.alpha, &opts.modules, opts.seed)?;
    let refits = refit_vars(&mut student, &teacher, compressed, opts)?;
    let vars = all_vars(&loras, &refits);
    // Group 0 the adapter, then each refit variable's own group (1 tables, 2 norms,
    // 3 latent weights).
    let groups = std::iter::repeat_n(0, loras.vars().len()).chain(refits.iter().map(|r| r.group));
    let rates = [opts.table_lr, opts.norm_lr, opts.index_lr];
    let mut adam = Adam::new(&vars)?.with_groups(
        groups.collect(),
        std::iter::once(1.0)
            .chain(rates.map(|r| r / opts.lr))
            .collect(),
    );
    let state = out.join(checkpoint::FILE);
    if resume {
        checkpoint::load(&state, opts, calibration, &vars, &mut adam)?;
    }
    let save_all = |adam: &Adam| {
        let trained = (&loras, &refits[..]);
        save(out, &config, trained, opts, calibration, adam, &state)
    };
    let order = Order::new(seqs.len(), opts.seed);
    let (start, t0) = (adam.step, Instant::now());
    let (mut first, mut last) = (f64::NAN, f64::NAN);
    for step in start..opts.steps {
        let rows: Vec<&[u32]> = (0..opts.batch)
            .map(|i| &seqs[order.at(step * opts.batch + i)][..])
            .collect();
        let loss = train_step(
            &teacher,
            &student,
            (&loras, &vars),
            &mut adam,
            &rows,
            lr_at(opts, step),
        )?;
        (first, last) = (if first.is_nan() { loss } else { first }, loss);
        let done = step + 1 - start;
        let tps = (done * opts.batch * opts.seq_len) as f64 / t0.elapsed().as_secs_f64();
        let go_on = progress(&Progress {
            step: step + 1,
            steps: opts.steps,
            loss,
            tokens_per_s: tps,
            eta_s: ((opts.steps - step - 1) * opts.batch * opts.seq_len) as f64 / tps,
        });
        let save_now = opts.save_every > 0 && (step + 1) % opts.save_every == 0;
        if save_now || step + 1 == opts.steps || !go_on {
            save_all(&adam)?;
        }
        if !go_on {
            break;
        }
    }
    if start >= opts.steps {
        save_all(&adam)?;
    }
    Ok(Summary {
        steps: adam.step - start.min(adam.step),
        first_loss: first,
        last_loss: last,
        calibration_tokens: seqs.len() * opts.seq_len,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// The f32 reference of a model file with the recovery adapter it carries merged into
/// its weights (W + s·B·A), unless `recovery` is false.
pub fn load_recovered_reference(path: &Path, recovery: bool) -> Result<(Gguf, Reference)> {
    let (g, mut model) = load_reference(path)?;
    if recovery && adapters::recovery::present(&g.metadata) {
        let (_, mut files) = open_model(path)?;
        let mut read = adapters::recovery::Tensors::new();
        for t in g
            .tensors
            .iter()
            .filter(|t| adapters::recovery::parse_name(&t.name).is_some())
        {
            read.insert(t.name.clone(), (t.ty, files.read_tensor_of(&g, t)?));
        }
        let a = adapters::recovery::read(&g.metadata, &model.config, |n| read.remove(n))?;
        adapters::merge_into(&mut model.weights, &a);
    }
    Ok((g, model))
}

/// The two models' f32 weights, checked to be one model's two versions.
fn pair(source: &Path, compressed: &Path) -> Result<(Reference, Reference)> {
    let (_, teacher) = load_reference(source)?;
    let (_, student) = load_reference(compressed)?;
    if teacher.config != student.config {
        return Err(Error::invalid(format!(
            "{} is not a conversion of {}: their shapes differ",
            compressed.display(),
            source.display()
        )));
    }
    Ok((teacher, student))
}

/// Mean KL(source ‖ compressed [+ adapter]) over `tokens` cut into windows of
/// `seq_len`, through Pippin's own f32 reference and PEFT reader (independent of the
/// training code: what the written adapter does, not what training believed).
pub fn divergence(
    source: &Path,
    compressed: &Path,
    adapter: Option<&Path>,
    tokens: &[u32],
    seq_len: usize,
) -> Result<f64> {
    let (teacher, mut student) = pair(source, compressed)?;
    if let Some(dir) = adapter.filter(|d| d.join(refit::FILE).exists()) {
        // Trained on refit tables and norms: what the folder does is the file
        // `embed_peft` writes from it.
        let tmp = dir.join(".divergence.gguf");
        let made = embed_peft(compressed, dir, "", "", &tmp)
            .and_then(|_| load_recovered_reference(&tmp, true));
        let _ = std::fs::remove_file(&tmp);
        student = made?.1;
    } else if let Some(dir) = adapter {
        let read = |f: &str| std::fs::read(dir.join(f));
        let a = adapters::parse(
            &read("adapter_config.json")?,
            &read("adapter_model.safetensors")?,
            &student.config,
        )?;
        adapters::merge_into(&mut student.weights, &a);
    }
    let (mut sum, mut n) = (0f64, 0usize);
    for seq in sequences(tokens, seq_len) {
        let run = |m: &Reference| m.forward(&mut KvCache::new(&m.config), &seq, true);
        let (p, q) = (run(&teacher)?, run(&student)?);
        let v = teacher.config.vocab_size;
        for (p, q) in p.chunks_exact(v).zip(q.chunks_exact(v)) {
            sum += kl::row(p, q);
            n += 1;
        }
    }
    if n == 0 {
        return Err(Error::invalid(format!(
            "fewer than {seq_len} tokens to measure"
        )));
    }
    Ok(sum / n as f64)
}

/// `pippin convert --recover`: palettizes `input` (`convert`), trains the recovery
/// adapter of the result against `input` on `calibration` (writing its PEFT folder
/// `adapter_dir`), and writes `output`: the palettized model with the adapter inside.
pub fn convert_recovered(
    input: &Path,
    output: &Path,
    convert: &crate::convert::Options,
    opts: &Options,
    calibration: &[u32],
    adapter_dir: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<Summary> {
    let name = output
        .file_name()
        .ok_or_else(|| Error::invalid(format!("{} is not a file name", output.display())))?;
    let plain = output.with_file_name(format!(".{}.palettized", name.to_string_lossy()));
    let mut run = || -> Result<Summary> {
        crate::convert::convert(input, &plain, convert, log)?;
        let s = recover(
            input,
            &plain,
            calibration,
            adapter_dir,
            opts,
            false,
            &mut |p| {
                log(&format!(
                    "recover: step {}/{}  KL {:.4}  {:.0} tokens/s  ETA {:.0} s",
                    p.step, p.steps, p.loss, p.tokens_per_s, p.eta_s
                ));
                true
            },
        )?;
        let source = input
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into());
        let trained = format!(
            "rank {}, {} steps of {} x {} tokens{}, KL {:.4} -> {:.4}",
            opts.rank,
            s.steps,
            opts.batch,
            opts.seq_len,
            opts.refit_words(),
            s.first_loss,
            s.last_loss
        );
        embed_peft(&plain, adapter_dir, &source, &trained, output)?;
        Ok(s)
    };
    let result = run();
    let _ = std::fs::remove_file(&plain);
    result
}

/// The student's tables, norms and latent weights made trainable, as the options ask
/// (the latent weights start at the `teacher`'s).
fn refit_vars(
    student: &mut Net,
    teacher: &Net,
    compressed: &Path,
    opts: &Options,
) -> Result<Vec<Refit>> {
    let mut out = Vec::new();
    if opts.tables {
        let (g, mut files) = open_model(compressed)?;
        let pals = refit::palettes(&g, &mut files, &student.config)?;
        let latent = opts.indices.then_some((teacher, 3));
        out.extend(student.train_tables(pals, 1, latent)?);
    }
    if opts.norms {
        out.extend(student.train_norms(2)?);
    }
    if out.is_empty() && opts.modules.is_empty() {
        return Err(Error::invalid(format!(
            "recover: nothing to train: no modules to adapt, and {} has no palettes or norms to refit",
            compressed.display()
        )));
    }
    Ok(out)
}

/// Every trained variable: the adapter's, then the refit's.
fn all_vars<'a>(loras: &'a Loras, refits: &'a [Refit]) -> Vec<&'a candle_core::Var> {
    let mut v = loras.vars();
    v.extend(refits.iter().map(|r| &r.var));
    v
}

fn check(o: &Options) -> Result<()> {
    let bad = |m: String| Err(Error::invalid(format!("recover: {m}")));
    if o.rank == 0 || o.rank > 256 {
        return bad(format!("rank {} (1 to 256)", o.rank));
    }
    if o.modules.is_empty() && !o.tables && !o.norms {
        return bad("nothing to train: no modules to adapt, no tables or norms".into());
    }
    if o.batch == 0 || o.seq_len < 2 || o.steps == 0 {
        return bad("steps, batch and a sequence of at least 2 tokens are needed".into());
    }
    if o.indices && !o.tables {
        return bad("training the indices needs the tables trained too".into());
    }
    let rates = [
        (true, o.lr),
        (o.tables, o.table_lr),
        (o.norms, o.norm_lr),
        (o.indices, o.index_lr),
    ];
    let positive = |v: f64| v > 0.0 && v.is_finite();
    if !(rates.iter().all(|&(on, r)| !on || positive(r)) && positive(o.alpha as f64)) {
        return bad("the learning rates and alpha must be positive numbers".into());
    }
    Ok(())
}

/// One optimizer step on `rows`; returns the mean KL (nats a token).
fn train_step(
    teacher: &Net,
    student: &Net,
    (loras, vars): (&Loras, &[&candle_core::Var]),
    adam: &mut Adam,
    rows: &[&[u32]],
    lr: f64,
) -> Result<f64> {
    let x = net::batch(rows)?;
    let target = teacher.forward(&x, None)?;
    let logits = student.forward(&x, Some(loras))?;
    let loss = kl::kl(&logits, &target)?;
    let grads = loss.backward().map_err(ce)?;
    adam.update(vars, &grads, lr)?;
    loss.to_scalar::<f32>().map(f64::from).map_err(ce)
}

/// Linear warm-up over the first 5% of the steps, then a cosine down to a tenth.
fn lr_at(o: &Options, step: usize) -> f64 {
    let warm = (o.steps / 20).max(1);
    if step < warm {
        return o.lr * (step + 1) as f64 / warm as f64;
    }
    let t = (step - warm) as f64 / (o.steps - warm).max(1) as f64;
    o.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * t).cos()))
}

/// The text cut into windows of `len` tokens (the tail shorter than one is dropped).
fn sequences(tokens: &[u32], len: usize) -> Vec<Vec<u32>> {
    tokens.chunks_exact(len).map(|c| c.to_vec()).collect()
}

/// The order sequences are taken in: each pass over them shuffled anew, from the seed.
struct Order {
    n: usize,
    seed: u64,
}

impl Order {
    fn new(n: usize, seed: u64) -> Order {
        Order { n, seed }
    }

    /// The sequence taken `k`-th.
    fn at(&self, k: usize) -> usize {
        let (pass, i) = (k / self.n, k % self.n);
        let mut rng = Rng::new(self.seed ^ (pass as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut p: Vec<usize> = (0..self.n).collect();
        for j in (1..self.n).rev() {
            p.swap(j, (rng.next_u64() % (j as u64 + 1)) as usize);
        }
        p[i]
    }
}

fn save(
    out: &Path,
    c: &crate::model::Config,
    (loras, refits): (&Loras, &[Refit]),
    opts: &Options,
    calibration: &[u32],
    adam: &Adam,
    state: &Path,
) -> Result<()> {
    let spec = PeftSpec {
        rank: loras.rank,
        alpha: loras.alpha,
        half: false,
        base_model: "",
    };
    if loras.vars().is_empty() {
        // A refit alone: no adapter (an old one in the folder would not match it).
        for f in ["adapter_config.json", "adapter_model.safetensors"] {
            match std::fs::remove_file(out.join(f)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        std::fs::create_dir_all(out)?;
    } else {
        save_peft(out, &adapters::write::write(c, &spec, &loras.to_peft(c)?)?)?;
    }
    refit::save(&out.join(refit::FILE), refits)?;
    checkpoint::save(state, opts, calibration, &all_vars(loras, refits), adam)
}

/// Writes the two files into `dir` (created), each under a temporary name first.
fn save_peft(dir: &std::path::Path, files: &(String, Vec<u8>)) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in [
        ("adapter_config.json", files.0.as_bytes()),
        ("adapter_model.safetensors", &files.1[..]),
    ] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, dir.join(name))?;
    }
    Ok(())
}
