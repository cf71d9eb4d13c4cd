//! `pippin convert`: a GGUF or a Hugging Face checkpoint in, a palettized GGUF out
//! (AFM-style compression). Each layer matrix becomes `<name>.pidx` (I32 words of
//! packed 2- or 4-bit indices, `[cols·bits/32, rows]`) and `<name>.plut` (F16 tables,
//! `[2^bits, ⌈rows / rows_per_lut⌉]`; 2-bit matrices get a table per row by default);
//! the embedding becomes Q8_0; everything else
//! (norms, tokenizer, chat template) is carried over. `pippin.palette.*` keys record
//! the layout. The output appears only once complete: it is written beside its final
//! name and renamed.

pub mod gptq;
mod hf;
pub mod plan;

use crate::error::{Error, Result};
use crate::gguf::{Gguf, TensorInfo, Value, Writer};
use crate::model::reference::Reference;
use crate::model::weights::{find, Weights, ROWS_PER_LUT_2BIT_KEY, ROWS_PER_LUT_KEY};
use crate::model::Config;
use crate::model::Proj;
use crate::quant::palette::bits_per_weight;
use crate::quant::{self, encode, GgmlType};
use crate::tokenizer::Tokenizer;
use hf::HfCheckpoint;
use plan::Calibration;
use std::io::Write as _;
use std::path::Path;

pub const LAYOUT_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bits {
    Four,
    Two,
    /// 2 or 4 per matrix, by sensitivity, to reach `target_bpw`.
    Mixed,
}

/// How the embedding (and an untied output head) is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Embedding {
    Q8_0,
    F16,
    /// As in the input.
    Keep,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub bits: Bits,
    pub target_bpw: f64,
    /// Output rows sharing one table in 4-bit matrices.
    pub rows_per_lut: usize,
    /// The same for 2-bit matrices. A table per row costs 2-bit matrices 0.04–0.11
    /// bits per weight and cut the all-2-bit default model's perplexity from 28,778
    /// to 2,009 (tables per 16 rows); at 4 bits the same costs 0.35 bpw for 20.1 → 18.9.
    pub rows_per_lut_2bit: usize,
    pub embedding: Embedding,
    pub seed: u64,
    /// Text for the importance weights and the mixed plan's sensitivities.
    pub calibration: Option<String>,
    /// Calibration tokens for the statistics (from the start of the text).
    pub calibration_tokens: usize,
    /// Of those, the tokens each sensitivity is measured on (mixed plans).
    pub sensitivity_tokens: usize,
    /// GPTQ-style error feedback when assigning indices (needs calibration). Off by
    /// default: on the default model it did not lower held-out perplexity at 4 bits
    /// or mixed, only when every matrix is 2-bit (docs/palettization.md).
    pub error_feedback: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bits: Bits::Mixed,
            target_bpw: 3.5,
            rows_per_lut: 16,
            rows_per_lut_2bit: 1,
            embedding: Embedding::Q8_0,
            seed: 0x9e3779b9,
            calibration: None,
            calibration_tokens: 1024,
            sensitivity_tokens: 128,
            error_feedback: false,
        }
    }
}

impl Options {
    /// Rows sharing a table in a `bits`-wide matrix.
    pub fn rows_per_lut_for(&self, bits: u32) -> usize {
        if bits == 2 {
            self.rows_per_lut_2bit
        } else {
            self.rows_per_lut
        }
    }
}

/// One matrix's outcome.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    pub bits: u32,
    /// KL divergence on the calibration text with only this matrix at 2 bits.
    pub sensitivity: Option<f64>,
}

#[derive(Clone, Debug)]
pub struct Report {
    pub entries: Vec<Entry>,
    /// Bits per weight of the palettized matrices, tables included.
    pub palettized_bpw: f64,
    /// Bits per weight of every tensor in the output.
    pub file_bpw: f64,
    pub bytes: u64,
}

/// The input: a GGUF file, or a Hugging Face checkpoint directory seen as one.
enum Source {
    Gguf(crate::gguf::split::ModelFiles),
    Hf(HfCheckpoint),
}

impl Source {
    fn open(path: &Path) -> Result<(Gguf, Source)> {
        if path.is_dir() {
            let (g, ckpt) = HfCheckpoint::open(path)?;
            return Ok((g, Source::Hf(ckpt)));
        }
        let (g, files) = crate::gguf::split::open_model(path)?;
        Ok((g, Source::Gguf(files)))
    }

    fn read(&mut self, g: &Gguf, t: &TensorInfo) -> Result<Vec<u8>> {
        match self {
            Source::Gguf(r) => g.read_tensor(r, t),
            Source::Hf(h) => h.read(t),
        }
    }

    fn read_f32(&mut self, g: &Gguf, t: &TensorInfo) -> Result<Vec<f32>> {
        quant::dequantize_tensor(t, &self.read(g, t)?)
    }
}

/// Converts `input` to a palettized GGUF at `output`; `log` hears the progress and
/// the plan. On error nothing is left at `output`.
pub fn convert(
    input: &Path,
    output: &Path,
    opts: &Options,
    log: &mut dyn FnMut(&str),
) -> Result<Report> {
    check_options(input, output, opts)?;
    let (g, mut src) = Source::open(input)?;
    if g.tensors.iter().any(|t| t.name.ends_with(".pidx")) {
        return Err(Error::invalid(format!(
            "{} is already palettized",
            input.display()
        )));
    }
    let config = Config::from_gguf(&g)?;
    // The output names each matrix; a family that fuses matrices (phi3) would have to
    // fuse them back.
    if crate::model::weights::layer_specs(&config, 0)
        .iter()
        .any(|s| s.rows_of.is_some())
    {
        return Err(Error::unsupported(format!(
            "palettizing a {} model (its files fuse Q|K|V and gate|up)",
            config.arch.name()
        )));
    }
    let weights = Weights::build(&config, |s| {
        let t = find(&g, s)?;
        src.read_f32(&g, &t)
    })?;
    let mut reference = Reference::new(config.clone(), weights);
    let cal = match &opts.calibration {
        Some(text) => Some(calibrate(&g, &reference, text, opts, log)?),
        None if opts.bits == Bits::Mixed => return Err(Error::invalid(
            "--bits mixed needs a calibration text (--calibration FILE) to measure sensitivities",
        )),
        None => None,
    };
    let entries = plan_bits(&mut reference, cal.as_ref(), opts, log)?;
    let mut w = Writer::new();
    carry_metadata(&g, &mut w, opts, &entries);
    write_tensors(
        &g,
        &mut src,
        &reference,
        cal.as_ref(),
        &entries,
        opts,
        &mut w,
    )?;
    let bytes = write_atomically(&w, output)?;
    let report = summarize(&g, entries, bytes, opts);
    log(&format!(
        "wrote {} ({:.1} MB): palettized matrices {:.3} bits/weight, whole file {:.3}",
        output.display(),
        bytes as f64 / 1e6,
        report.palettized_bpw,
        report.file_bpw
    ));
    Ok(report)
}

fn check_options(input: &Path, output: &Path, opts: &Options) -> Result<()> {
    if input == output {
        return Err(Error::invalid("the output must not overwrite the input"));
    }
    for (rows, flag) in [
        (opts.rows_per_lut, "--rows-per-lut"),
        (opts.rows_per_lut_2bit, "--rows-per-lut-2bit"),
    ] {
        if !(1..=4096).contains(&rows) {
            return Err(Error::invalid(format!("{flag} must be between 1 and 4096")));
        }
    }
    if !(2.0..=4.1).contains(&opts.target_bpw) && opts.bits == Bits::Mixed {
        return Err(Error::invalid(
            "--target-bpw must be between 2 and 4 for --bits mixed",
        ));
    }
    Ok(())
}

fn calibrate(
    g: &Gguf,
    r: &Reference,
    text: &str,
    opts: &Options,
    log: &mut dyn FnMut(&str),
) -> Result<Calibration> {
    let tk = Tokenizer::from_gguf(&g.metadata)?;
    let mut tokens = tk.encode_prompt(text, false)?;
    tokens.truncate(opts.calibration_tokens.min(r.config.context_length));
    log(&format!(
        "calibrating on {} tokens{}",
        tokens.len(),
        if opts.error_feedback {
            " (importance, Hessians for error feedback)"
        } else {
            " (importance)"
        }
    ));
    Calibration::run(r, &tokens, opts.sensitivity_tokens, opts.error_feedback)
}

/// Bits for every layer matrix, with the sensitivities when the plan is mixed.
fn plan_bits(
    r: &mut Reference,
    cal: Option<&Calibration>,
    opts: &Options,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<Entry>> {
    let c = &r.config;
    let mut entries: Vec<Entry> = (0..c.n_layers)
        .flat_map(|l| {
            Proj::ALL.into_iter().map(move |p| {
                let (rows, cols) = p.shape(c);
                Entry {
                    name: crate::model::arch::LayerTensor::of(p).name(l),
                    rows,
                    cols,
                    bits: if opts.bits == Bits::Two { 2 } else { 4 },
                    sensitivity: None,
                }
            })
        })
        .collect();
    if let (Bits::Mixed, Some(cal)) = (opts.bits, cal) {
        let sens = plan::sensitivities(r, cal, opts.rows_per_lut_2bit, opts.seed, log)?;
        let shapes: Vec<_> = entries.iter().map(|e| (e.rows, e.cols)).collect();
        let bits = plan::choose(&shapes, &sens, opts.target_bpw, &|b| {
            opts.rows_per_lut_for(b)
        });
        for ((e, s), b) in entries.iter_mut().zip(sens).zip(bits) {
            e.sensitivity = Some(s);
            e.bits = b;
        }
        log("plan (bits per matrix; q k v o gate up down):");
        for (l, chunk) in entries.chunks(Proj::ALL.len()).enumerate() {
            let bits: Vec<String> = chunk.iter().map(|e| e.bits.to_string()).collect();
            log(&format!("  layer {l:2}: {}", bits.join(" ")));
        }
    }
    Ok(entries)
}

fn carry_metadata(g: &Gguf, w: &mut Writer, opts: &Options, entries: &[Entry]) {
    for (k, v) in g.metadata.iter() {
        // The GGUF file type names one llama.cpp quantization; this file has none.
        if k != "general.file_type" && !k.starts_with("pippin.") {
            w.meta(k, v.clone());
        }
    }
    let two = entries.iter().filter(|e| e.bits == 2).count();
    w.meta("pippin.palette.version", Value::U32(LAYOUT_VERSION));
    w.meta(ROWS_PER_LUT_KEY, Value::U32(opts.rows_per_lut as u32));
    w.meta(
        ROWS_PER_LUT_2BIT_KEY,
        Value::U32(opts.rows_per_lut_2bit as u32),
    );
    w.meta(
        "pippin.palette.plan",
        Value::Str(format!(
            "{two} of {} matrices at 2 bits, the rest at 4",
            entries.len()
        )),
    );
}

fn write_tensors(
    g: &Gguf,
    src: &mut Source,
    r: &Reference,
    cal: Option<&Calibration>,
    entries: &[Entry],
    opts: &Options,
    w: &mut Writer,
) -> Result<()> {
    let by_name: std::collections::HashMap<&str, (usize, usize)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.name.as_str(), (i / Proj::ALL.len(), i % Proj::ALL.len())))
        .collect();
    for t in &g.tensors {
        if let Some(&(l, m)) = by_name.get(t.name.as_str()) {
            let e = &entries[l * Proj::ALL.len() + m];
            let values = r.weights.layers[l].proj(Proj::ALL[m]);
            let shape = (e.rows, e.cols);
            let p = plan::quantize(
                values,
                shape,
                e.bits,
                opts.rows_per_lut_for(e.bits),
                opts.seed,
                cal,
                (l, m),
            );
            let (idx, lut) = p.stored();
            let words = crate::quant::palette::row_words(e.bits, e.cols) as u64;
            w.tensor(
                &format!("{}.pidx", t.name),
                &[words, e.rows as u64],
                GgmlType::I32,
                idx,
            )?;
            w.tensor(
                &format!("{}.plut", t.name),
                &[1 << e.bits, p.groups() as u64],
                GgmlType::F16,
                lut,
            )?;
        } else if t.name == "token_embd.weight" || t.name == "output.weight" {
            let values = if t.name == "token_embd.weight" {
                &r.weights.token_embd
            } else {
                r.weights.head()
            };
            let (ty, bytes) = match (opts.embedding, t.ty) {
                (Embedding::Q8_0, GgmlType::Q8_0)
                | (Embedding::F16, GgmlType::F16)
                | (Embedding::Keep, _) => (t.ty, src.read(g, t)?),
                (Embedding::Q8_0, _) => (GgmlType::Q8_0, encode::q8_0(values)),
                (Embedding::F16, _) => (GgmlType::F16, encode::f16s(values)),
            };
            w.tensor(&t.name, &t.dims, ty, bytes)?;
        } else {
            w.tensor(&t.name, &t.dims, t.ty, src.read(g, t)?)?;
        }
    }
    Ok(())
}

/// Writes to a temporary name beside `output`, then renames: a failed or interrupted
/// conversion never leaves a file that looks finished.
pub(crate) fn write_atomically(w: &Writer, output: &Path) -> Result<u64> {
    let name = output
        .file_name()
        .ok_or_else(|| Error::invalid(format!("{} is not a file name", output.display())))?;
    let tmp = output.with_file_name(format!(".{}.partial", name.to_string_lossy()));
    let result = (|| {
        let file = std::fs::File::create(&tmp)
            .map_err(|e| Error::invalid(format!("cannot create {}: {e}", tmp.display())))?;
        let mut out = std::io::BufWriter::new(file);
        w.write(&mut out)?;
        out.flush()?;
        drop(out);
        std::fs::rename(&tmp, output)?;
        Ok(std::fs::metadata(output)?.len())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn summarize(g: &Gguf, entries: Vec<Entry>, bytes: u64, opts: &Options) -> Report {
    let n: f64 = entries.iter().map(|e| (e.rows * e.cols) as f64).sum();
    let bits: f64 = entries
        .iter()
        .map(|e| {
            let rows_per_lut = opts.rows_per_lut_for(e.bits);
            bits_per_weight(e.bits, e.rows, e.cols, rows_per_lut) * (e.rows * e.cols) as f64
        })
        .sum();
    let all: u64 = g.tensors.iter().map(|t| t.n_elements).sum();
    Report {
        entries,
        palettized_bpw: bits / n.max(1.0),
        file_bpw: bytes as f64 * 8.0 / all.max(1) as f64,
        bytes,
    }
}
