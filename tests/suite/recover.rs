//! Accuracy-recovery adapters (`pippin::recover`): the training forward is the
//! reference forward, training lowers the divergence it is trained on as Pippin's own
//! reader and reference measure it on held-out tokens, the output is PEFT's layout,
//! runs are deterministic and resume exactly.

use crate::common::{models_file, synthetic::Spec};
use pippin::convert::{self, Bits};
use pippin::model::{load_reference, KvCache};
use pippin::recover::{self, net, Options};
use pippin::rng::Rng;
use pippin::testing::max_abs_diff;
use pippin::Error;
use std::path::{Path, PathBuf};

/// Every position's logits of two rows of random tokens (each from position 0) by the
/// reference, then by the training network on the same weights.
fn both_forwards(path: &Path) -> (Vec<f32>, Vec<f32>) {
    let (_, r) = load_reference(path).expect("load");
    let rows = [
        tokens(12, r.config.vocab_size, 1),
        tokens(12, r.config.vocab_size, 2),
    ];
    let mut want = Vec::new();
    for row in &rows {
        want.extend(
            r.forward(&mut KvCache::new(&r.config), row, true)
                .expect("reference"),
        );
    }
    let n = net::Net::new(r.config.clone(), r.weights).expect("net");
    let refs: Vec<&[u32]> = rows.iter().map(|r| &r[..]).collect();
    let got = n
        .forward(&net::batch(&refs).expect("batch"), None)
        .expect("net forward");
    (
        want,
        got.flatten_all().and_then(|t| t.to_vec1()).expect("values"),
    )
}

fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| (rng.next_u64() % vocab as u64) as u32)
        .collect()
}

fn synthetic(dir: &Path, name: &str, spec: Spec) -> PathBuf {
    let p = dir.join(name);
    spec.write(&p).expect("write synthetic model");
    p
}

#[test]
fn the_training_forward_is_the_reference_forward() {
    let dir = tempdir();
    let mut files: Vec<PathBuf> = vec![
        models_file("SmolLM2-135M-Instruct.Q4_1.gguf"),
        // Half-split RoPE, QK-norm, post norms, √hidden embedding scale, GeGLU and
        // sliding windows shorter than the rows.
        synthetic(&dir, "gemma3.gguf", Spec::gemma3(5)),
        synthetic(&dir, "gemma2.gguf", Spec::gemma2(5)),
    ];
    // Biases (qwen2's Q/K/V, every projection's in llama-biases), fused Q|K|V (phi3),
    // NoPE layers (smollm3), multipliers (granite): real weights in other families'
    // files (scripts/fetch-fixtures).
    for f in ["qwen2", "llama-biases", "phi3", "smollm3", "granite"] {
        files.push(models_file(&format!("fixtures/families/{f}.gguf")));
    }
    for path in files {
        let (want, got) = both_forwards(&path);
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = max_abs_diff(&want, &got);
        assert!(
            worst <= 2e-4 * scale.max(1.0),
            "{}: logits differ by {worst} (largest {scale})",
            path.display()
        );
    }
}

#[test]
fn convolution_models_are_refused_with_a_reason() {
    let dir = tempdir();
    let p = synthetic(&dir, "lfm2.gguf", Spec::lfm2());
    let (_, r) = load_reference(&p).expect("load");
    match net::Net::new(r.config.clone(), r.weights) {
        Err(Error::Unsupported(m)) => assert!(m.contains("LFM2"), "{m}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("an LFM2 model was accepted"),
    }
}

/// A tiny model and its 2-bit palettization: the teacher and the student.
fn pair(dir: &Path) -> (PathBuf, PathBuf) {
    let teacher = synthetic(dir, "teacher.gguf", Spec::llama());
    let student = dir.join("student.gguf");
    let opts = convert::Options {
        bits: Bits::Two,
        ..Default::default()
    };
    convert::convert(&teacher, &student, &opts, &mut |_| {}).expect("palettize");
    (teacher, student)
}

fn tiny(steps: usize) -> Options {
    Options {
        rank: 4,
        alpha: 8.0,
        steps,
        batch: 4,
        seq_len: 16,
        lr: 1e-2,
        save_every: 3,
        // The adapter alone; `refit` below turns the tables and norms on.
        tables: false,
        norms: false,
        ..Default::default()
    }
}

fn run(t: &Path, s: &Path, out: &Path, o: &Options, resume: bool, stop: usize) -> recover::Summary {
    let calibration = tokens(256 * 16, 96, 7);
    recover::recover(t, s, &calibration, out, o, resume, &mut |p| p.step < stop).expect("recover")
}

#[test]
fn recovery_lowers_the_divergence_on_held_out_tokens() {
    let dir = tempdir();
    let (t, s) = pair(&dir);
    let out = dir.join("adapter");
    let opts = Options {
        rank: 16,
        alpha: 16.0,
        ..tiny(200)
    };
    let summary = run(&t, &s, &out, &opts, false, usize::MAX);
    assert_eq!(summary.steps, 200);
    assert!(summary.last_loss < summary.first_loss, "{summary:?}");
    // Measured by Pippin's PEFT reader and f32 reference, not by the trainer.
    let held_out = tokens(8 * 16, 96, 99);
    let before = recover::divergence(&t, &s, None, &held_out, 16).expect("without");
    let after = recover::divergence(&t, &s, Some(&out), &held_out, 16).expect("with");
    eprintln!("held-out KL {before} -> {after}; training {summary:?}");
    assert!(after < 0.6 * before, "KL {before} -> {after}");
}

#[test]
fn the_adapter_is_peft_s_layout() {
    let dir = tempdir();
    let (t, s) = pair(&dir);
    let out = dir.join("adapter");
    run(&t, &s, &out, &tiny(2), false, usize::MAX);
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("adapter_config.json")).expect("config"))
            .expect("json");
    assert_eq!(config["peft_type"], "LORA");
    assert_eq!(config["r"], 4);
    assert_eq!(config["lora_alpha"], 8.0);
    assert_eq!(
        config["target_modules"].as_array().map(|a| a.len()),
        Some(7)
    );
    let bytes = std::fs::read(out.join("adapter_model.safetensors")).expect("weights");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    assert_eq!(
        st.names().len(),
        2 * 7 * 2,
        "A and B of 7 modules in 2 layers"
    );
    let q = st
        .tensor("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight")
        .expect("q_proj A");
    assert_eq!(q.shape(), [4, 64]);
    let down = st
        .tensor("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight")
        .expect("down_proj B");
    assert_eq!(down.shape(), [64, 4]);
    let k = st
        .tensor("base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight")
        .expect("k_proj B");
    assert_eq!(k.shape(), [32, 4], "one KV head of 32");
}

#[test]
fn training_is_deterministic_and_resumes_where_it_stopped() {
    let dir = tempdir();
    let (t, s) = pair(&dir);
    let weights = |d: &Path| std::fs::read(d.join("adapter_model.safetensors")).expect("read");
    let (a, b, c) = (dir.join("a"), dir.join("b"), dir.join("c"));
    run(&t, &s, &a, &tiny(6), false, usize::MAX);
    run(&t, &s, &b, &tiny(6), false, usize::MAX);
    assert_eq!(weights(&a), weights(&b), "the same seed, the same adapter");
    let first = run(&t, &s, &c, &tiny(6), false, 4);
    assert_eq!(first.steps, 4, "stopped after step 4");
    assert_ne!(weights(&a), weights(&c));
    let rest = run(&t, &s, &c, &tiny(6), true, usize::MAX);
    assert_eq!(rest.steps, 2);
    assert_eq!(
        weights(&a),
        weights(&c),
        "resumed from step 4 = straight through"
    );
    // A state made with other options is refused, not silently mixed.
    let other = Options { rank: 8, ..tiny(6) };
    let calibration = tokens(32 * 16, 96, 7);
    match recover::recover(&t, &s, &calibration, &c, &other, true, &mut |_| true) {
        Err(Error::Invalid(m)) => assert!(m.contains("rank=4"), "{m}"),
        r => panic!(
            "a state of rank 4 resumed at rank 8: {:?}",
            r.map(|s| s.steps)
        ),
    }
}

#[test]
fn models_of_other_shapes_and_bad_options_are_refused() {
    let dir = tempdir();
    let (t, s) = pair(&dir);
    let other = synthetic(&dir, "gemma.gguf", Spec::gemma3(4));
    let calibration = tokens(256, 96, 1);
    let go = |a: &Path, b: &Path, o: &Options| {
        recover::recover(a, b, &calibration, &dir.join("x"), o, false, &mut |_| true)
    };
    match go(&t, &other, &tiny(1)) {
        Err(Error::Invalid(m)) => assert!(m.contains("not a conversion"), "{m}"),
        r => panic!(
            "a Gemma 3 model taken for a llama's conversion: {:?}",
            r.err()
        ),
    }
    for bad in [
        Options { rank: 0, ..tiny(1) },
        Options {
            batch: 0,
            ..tiny(1)
        },
        Options {
            lr: f64::NAN,
            ..tiny(1)
        },
        Options {
            modules: vec![],
            ..tiny(1)
        },
        Options {
            batch: 64,
            ..tiny(1)
        }, // more sequences a step than the text makes
        Options {
            tables: true,
            table_lr: -1.0,
            ..tiny(1)
        },
        Options {
            norms: true,
            norm_lr: f64::INFINITY,
            ..tiny(1)
        },
    ] {
        assert!(
            matches!(go(&t, &s, &bad), Err(Error::Invalid(_))),
            "{bad:?}"
        );
    }
}

/// Tables and norms trained with the adapter: the training state holds them (resumed
/// = straight through), the file `embed_peft` writes carries them in place of the
/// palettized file's own (indices untouched), and they lower the divergence beyond
/// what the adapter alone reaches, measured through Pippin's reader and reference.
#[test]
fn refit_tables_and_norms_go_into_the_file_and_lower_the_divergence() {
    let dir = tempdir();
    let (t, s) = pair(&dir);
    let refit = |steps| Options {
        tables: true,
        table_lr: 3e-3,
        norms: true,
        norm_lr: 3e-3,
        ..tiny(steps)
    };
    let file = |d: &Path, f: &str| std::fs::read(d.join(f)).expect("read");
    let (a, b) = (dir.join("a"), dir.join("b"));
    run(&t, &s, &a, &refit(6), false, usize::MAX);
    run(&t, &s, &b, &refit(6), false, 4);
    run(&t, &s, &b, &refit(6), true, usize::MAX);
    for f in ["adapter_model.safetensors", "palette-refit.safetensors"] {
        assert_eq!(file(&a, f), file(&b, f), "{f}: resumed = straight through");
    }
    // Into the file.
    let inside = dir.join("inside.gguf");
    recover::embed_peft(&s, &a, "teacher.gguf", "test", &inside).expect("embed");
    use pippin::gguf::TensorReader;
    let (gs, mut fs) = pippin::gguf::split::open_model(&s).expect("open");
    let (gi, mut fi) = pippin::gguf::split::open_model(&inside).expect("open");
    let (mut tables, mut norms) = (0, 0);
    for ts in &gs.tensors {
        let ti = gi.tensor(&ts.name).expect("every tensor kept");
        let (bs, bi) = (
            fs.read_tensor_of(&gs, ts).expect("read"),
            fi.read_tensor_of(&gi, ti).expect("read"),
        );
        let refit = ts.name.ends_with(".plut") || ts.name.contains("norm");
        assert_eq!(bs != bi, refit, "{} changed: {}", ts.name, bs != bi);
        tables += ts.name.ends_with(".plut") as usize;
        norms += ts.name.contains("norm") as usize;
    }
    assert_eq!((tables, norms), (2 * 7, 2 * 2 + 1), "every table and norm");
    // Better than the adapter alone, the same steps.
    let (lora_dir, both_dir, alone_dir) = (dir.join("lora"), dir.join("both"), dir.join("alone"));
    run(&t, &s, &lora_dir, &tiny(60), false, usize::MAX);
    run(&t, &s, &both_dir, &refit(60), false, usize::MAX);
    let no_adapter = Options {
        modules: vec![],
        ..refit(60)
    };
    run(&t, &s, &alone_dir, &no_adapter, false, usize::MAX);
    let held_out = tokens(8 * 16, 96, 99);
    let kl = |d: Option<&Path>| recover::divergence(&t, &s, d, &held_out, 16).expect("kl");
    let (none, lora, both, alone) = (
        kl(None),
        kl(Some(&lora_dir)),
        kl(Some(&both_dir)),
        kl(Some(&alone_dir)),
    );
    eprintln!("held-out KL: palettes {none}, + adapter {lora}, + adapter, tables, norms {both}, tables and norms alone {alone}");
    assert!(both < 0.95 * lora && lora < none, "{none} {lora} {both}");
    assert!(alone < 0.95 * none, "{none} {alone}");
    // A refit alone: a palettized file again, no recovery adapter in it.
    assert!(!alone_dir.join("adapter_model.safetensors").exists());
    recover::embed_peft(&s, &alone_dir, "teacher.gguf", "test", &inside).expect("embed");
    let (g, _) = pippin::gguf::Gguf::open(&inside).expect("open");
    assert!(!pippin::adapters::recovery::present(&g.metadata));
    assert!(g.metadata.get(recover::REFIT).is_some());
}

/// Indices trained too (`indices`: latent weights from the original's, straight
/// through): the state holds the latent weights (resumed = straight through), the file
/// gets new indices in place of the palettized file's, and they lower the divergence
/// beyond what tables and norms reach with fixed indices.
#[test]
fn trained_indices_go_into_the_file_and_lower_the_divergence() {
    let dir = tempdir();
    let (t, s) = pair(&dir);
    let refit = |steps, indices| Options {
        tables: true,
        table_lr: 3e-3,
        norms: true,
        norm_lr: 3e-3,
        indices,
        index_lr: 3e-3,
        modules: vec![],
        ..tiny(steps)
    };
    let file = |d: &Path| std::fs::read(d.join(recover::REFIT_FILE)).expect("read");
    let (a, b) = (dir.join("a"), dir.join("b"));
    run(&t, &s, &a, &refit(6, true), false, usize::MAX);
    run(&t, &s, &b, &refit(6, true), false, 4);
    run(&t, &s, &b, &refit(6, true), true, usize::MAX);
    assert_eq!(file(&a), file(&b), "resumed = straight through");
    let (fixed, moved) = (dir.join("fixed"), dir.join("moved"));
    run(&t, &s, &fixed, &refit(60, false), false, usize::MAX);
    run(&t, &s, &moved, &refit(60, true), false, usize::MAX);
    // Into the file: new indices, tables and norms; nothing else changed.
    let inside = dir.join("inside.gguf");
    recover::embed_peft(&s, &moved, "teacher.gguf", "test", &inside).expect("embed");
    use pippin::gguf::TensorReader;
    let (gs, mut fs) = pippin::gguf::split::open_model(&s).expect("open");
    let (gi, mut fi) = pippin::gguf::split::open_model(&inside).expect("open");
    let mut changed = 0;
    for ts in &gs.tensors {
        let ti = gi.tensor(&ts.name).expect("every tensor kept");
        let (bs, bi) = (
            fs.read_tensor_of(&gs, ts).expect("read"),
            fi.read_tensor_of(&gi, ti).expect("read"),
        );
        assert_eq!((ti.ty, &ti.dims), (ts.ty, &ts.dims), "{}", ts.name);
        let refit = ts.name.ends_with(".plut") || ts.name.contains("norm");
        if ts.name.ends_with(".pidx") {
            changed += (bs != bi) as usize;
        } else {
            assert_eq!(bs != bi, refit, "{} changed: {}", ts.name, bs != bi);
        }
    }
    assert_eq!(changed, 2 * 7, "every matrix's indices moved");
    let held_out = tokens(8 * 16, 96, 99);
    let kl = |d: Option<&Path>| recover::divergence(&t, &s, d, &held_out, 16).expect("kl");
    let (none, fixed, moved) = (kl(None), kl(Some(&fixed)), kl(Some(&moved)));
    eprintln!("held-out KL: palettes {none}, tables and norms {fixed}, + indices {moved}");
    assert!(
        moved < 0.95 * fixed && fixed < none,
        "{none} {fixed} {moved}"
    );
    // Indices need the tables.
    let no_tables = Options {
        tables: false,
        ..refit(6, true)
    };
    let out = dir.join("bad");
    let calibration = tokens(256 * 16, 96, 7);
    let e = recover::recover(&t, &s, &calibration, &out, &no_tables, false, &mut |_| true)
        .expect_err("refused");
    assert!(e.to_string().contains("tables"), "{e}");
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "pippin-recover-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

mod default_model {
    //! The default model (cut to its first layers, `common::small_model_path`: training
    //! and the reference's passes are the time here), 4-bit palettized, with a (briefly
    //! trained) recovery adapter inside: every loader runs it, the reference with it merged is the ground truth,
    //! a task adapter stacks on it. Writes what the browser test
    //! (`pkg-tests/app.test.mjs`) must stream from the same file.

    use crate::common::{root, small_model_path as model_path};
    use pippin::adapters::fixture::{self, FixtureSpec};
    use pippin::convert::{self, Bits};
    use pippin::engine::perplexity::perplexity;
    use pippin::engine::{
        generate, Backend, Engine, GenerateOptions, ReferenceSession, SessionOptions,
    };
    use pippin::gguf::Gguf;
    use pippin::model::KvCache;
    use pippin::quant::kv::KvFormat;
    use pippin::recover::{self, load_recovered_reference, Options};
    use pippin::tokenizer::Tokenizer;
    use std::path::{Path, PathBuf};

    fn text(name: &str) -> String {
        let p = root().join("texts").join(name);
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e} (scripts/fetch-text)", p.display()))
    }

    fn tokens(path: &Path, name: &str) -> Vec<u32> {
        let (g, _) = Gguf::open(path).unwrap();
        Tokenizer::from_gguf(&g.metadata)
            .unwrap()
            .encode_prompt(&text(name), false)
            .unwrap()
    }

    /// (4-bit file, its adapter folder, the file with the adapter inside).
    fn recovered() -> (PathBuf, PathBuf, PathBuf) {
        let dir = root().join("target/test-recovered");
        std::fs::create_dir_all(&dir).unwrap();
        let (plain, adapter, inside) = (
            dir.join("four.gguf"),
            dir.join("adapter"),
            dir.join("recovered.gguf"),
        );
        let opts = convert::Options {
            bits: Bits::Four,
            calibration: Some(text("social-contract.txt")),
            calibration_tokens: 256,
            ..Default::default()
        };
        convert::convert(&model_path(), &plain, &opts, &mut |_| {}).unwrap();
        // alpha ≠ rank: the scale goes through PEFT, the GGUF and back.
        let ro = Options {
            steps: 12,
            batch: 4,
            seq_len: 64,
            lr: 1e-3,
            alpha: 8.0,
            // The adapter alone, to compare the file with its PEFT folder.
            tables: false,
            norms: false,
            ..Default::default()
        };
        let cal = tokens(&plain, "social-contract.txt");
        recover::recover(
            &model_path(),
            &plain,
            &cal,
            &adapter,
            &ro,
            false,
            &mut |_| true,
        )
        .unwrap();
        recover::embed_peft(
            &plain,
            &adapter,
            &model_path().file_name().unwrap().to_string_lossy(),
            "test",
            &inside,
        )
        .unwrap();
        (plain, adapter, inside)
    }

    fn cpu_nll(path: &Path, recovery: bool, task: Option<&Path>, toks: &[u32]) -> f64 {
        let so = SessionOptions {
            max_context: 128,
            kv: KvFormat::F32,
            ..Default::default()
        };
        let mut e = pollster::block_on(Engine::load_file_cpu(path, so)).unwrap();
        assert!(
            e.recovery().is_some(),
            "the file's recovery adapter was read"
        );
        e.set_recovery(recovery).unwrap();
        if let Some(dir) = task {
            e.load_adapter_dir("task", dir).unwrap();
        }
        let mut b = e.backend().unwrap();
        pollster::block_on(perplexity(&mut b, toks, 64, 64))
            .unwrap()
            .nll
    }

    fn greedy<B: Backend>(b: &mut B, tk: &Tokenizer, ids: &[u32], o: &GenerateOptions) -> String {
        let mut s = String::new();
        pollster::block_on(generate(b, tk, ids, o, |p, _| {
            s.push_str(p);
            true
        }))
        .unwrap();
        s
    }

    /// The greedy reply's tokens after `prompt`, by the reference.
    fn greedy_tokens(
        r: &pippin::model::Reference,
        tk: &Tokenizer,
        ids: &[u32],
        o: &GenerateOptions,
    ) -> Vec<u32> {
        let mut t = Vec::new();
        pollster::block_on(generate(
            &mut ReferenceSession::new(r),
            tk,
            ids,
            o,
            |_, id| {
                t.push(id);
                true
            },
        ))
        .unwrap();
        t
    }

    /// Each token of `reply`'s log-probability after `prompt` and the tokens before it.
    fn token_logprobs(r: &pippin::model::Reference, prompt: &[u32], reply: &[u32]) -> Vec<f64> {
        let all: Vec<u32> = prompt.iter().chain(reply).copied().collect();
        let logits = r.forward(&mut KvCache::new(&r.config), &all, true).unwrap();
        let v = r.config.vocab_size;
        reply
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let row = &logits[(prompt.len() + i - 1) * v..][..v];
                let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let lse = m + row.iter().map(|&x| (x - m).exp()).sum::<f32>().ln();
                (row[t as usize] - lse) as f64
            })
            .collect()
    }

    fn reference_nll(r: &pippin::model::Reference, toks: &[u32]) -> f64 {
        let mut s = ReferenceSession::new(r);
        pollster::block_on(perplexity(&mut s, toks, 64, 64))
            .unwrap()
            .nll
    }

    #[test]
    fn a_recovered_file_runs_its_adapter_everywhere_and_task_adapters_stack_on_it() {
        let (plain, adapter, inside) = recovered();
        let mut held_out = tokens(&plain, "debian-manifesto.txt");
        held_out.truncate(128);
        // The written adapter brings the model closer to the original (Pippin's own
        // reader and reference measure it, on text training never saw).
        let before = recover::divergence(&model_path(), &plain, None, &held_out, 64).unwrap();
        let after =
            recover::divergence(&model_path(), &plain, Some(&adapter), &held_out, 64).unwrap();
        assert!(after < before, "KL {before} -> {after}");

        let toks = &held_out[..64];
        let (_, with) = load_recovered_reference(&inside, true).unwrap();
        // The adapter inside the file (f16) is the PEFT folder's (f32) merged into the
        // palettized file.
        let (_, mut merged) = pippin::model::load_reference(&plain).unwrap();
        let read = |f: &str| std::fs::read(adapter.join(f)).unwrap();
        let peft = pippin::adapters::parse(
            &read("adapter_config.json"),
            &read("adapter_model.safetensors"),
            &merged.config,
        )
        .unwrap();
        pippin::adapters::merge_into(&mut merged.weights, &peft);
        let (inside_nll, folder_nll) = (reference_nll(&with, toks), reference_nll(&merged, toks));
        assert!(
            (inside_nll - folder_nll).abs() < 1e-3,
            "in the file {inside_nll}, the folder {folder_nll}"
        );
        let (_, without) = load_recovered_reference(&inside, false).unwrap();
        let (want_on, want_off) = (reference_nll(&with, toks), reference_nll(&without, toks));
        assert!(
            (want_on - want_off).abs() > 1e-3,
            "the adapter changes the model: {want_on} {want_off}"
        );
        let (on, off) = (
            cpu_nll(&inside, true, None, toks),
            cpu_nll(&inside, false, None, toks),
        );
        assert!(
            (on - want_on).abs() < 2e-3,
            "CPU backend with recovery {on}, reference {want_on}"
        );
        assert!(
            (off - want_off).abs() < 2e-3,
            "CPU backend without {off}, reference {want_off}"
        );

        // A task adapter stacks on the recovery adapter: the reference with both merged.
        let task = root().join("target/test-recovered/task");
        let spec = FixtureSpec::new(4, &["q_proj", "down_proj"], 3);
        let (config, weights) = fixture::write(&with.config, &spec);
        std::fs::create_dir_all(&task).unwrap();
        std::fs::write(task.join("adapter_config.json"), config.as_bytes()).unwrap();
        std::fs::write(task.join("adapter_model.safetensors"), &weights).unwrap();
        let (_, mut both) = load_recovered_reference(&inside, true).unwrap();
        let t = pippin::adapters::parse(config.as_bytes(), &weights, &both.config).unwrap();
        pippin::adapters::merge_into(&mut both.weights, &t);
        let want = reference_nll(&both, toks);
        let got = cpu_nll(&inside, true, Some(&task), toks);
        assert!((got - want).abs() < 2e-3, "stacked {got}, reference {want}");
        assert!(
            (want - want_on).abs() > 1e-3,
            "the task adapter changes the model"
        );

        // Both backends write the reference's greedy text, which the browser must
        // stream too.
        let (g, _) = Gguf::open(&inside).unwrap();
        let tk = Tokenizer::from_gguf(&g.metadata).unwrap();
        let prompt = "The capital of France is";
        let ids = tk.encode_prompt(prompt, false).unwrap();
        let opts = GenerateOptions::up_to(6);
        let want = greedy(&mut ReferenceSession::new(&with), &tk, &ids, &opts);
        let so = SessionOptions {
            max_context: 128,
            kv: KvFormat::F32,
            ..Default::default()
        };
        let gpu = pollster::block_on(pippin::gpu::Gpu::new(Default::default())).unwrap();
        let mut e = pollster::block_on(Engine::load_file(gpu, &inside, so.clone())).unwrap();
        assert_eq!(
            greedy(&mut e.backend().unwrap(), &tk, &ids, &opts),
            want,
            "GPU"
        );
        // The GPU runs the adapter (a few tokens: lavapipe is slow), and leaves it out.
        let short = &held_out[..16];
        for (on, r) in [(true, &with), (false, &without)] {
            e.set_recovery(on).unwrap();
            e.reset().unwrap();
            let mut b = e.backend().unwrap();
            let got = pollster::block_on(perplexity(&mut b, short, 16, 16))
                .unwrap()
                .nll;
            let mut s = ReferenceSession::new(r);
            let want = pollster::block_on(perplexity(&mut s, short, 16, 16))
                .unwrap()
                .nll;
            assert!(
                (got - want).abs() < 3e-3,
                "GPU, recovery {on}: {got}, reference {want}"
            );
        }
        let mut c = pollster::block_on(Engine::load_file_cpu(&inside, so)).unwrap();
        let cpu = greedy(&mut c.backend().unwrap(), &tk, &ids, &opts);
        assert_eq!(cpu, want, "CPU backend");
        // The reply's log-probabilities with and without the adapter: the browser's
        // must be the first (the text alone may not tell them apart).
        let reply = greedy_tokens(&with, &tk, &ids, &opts);
        let (lp_on, lp_off) = (
            token_logprobs(&with, &ids, &reply),
            token_logprobs(&without, &ids, &reply),
        );
        let apart = lp_on
            .iter()
            .zip(&lp_off)
            .map(|(a, b)| (a - b).abs())
            .sum::<f64>();
        assert!(
            apart > 0.05,
            "the adapter changes the reply's logprobs: {lp_on:?} {lp_off:?}"
        );
        let expected = serde_json::json!({
            "prompt": prompt, "maxTokens": 6, "text": want,
            "logprobs": lp_on, "logprobsWithout": lp_off,
        });
        std::fs::write(inside.with_extension("expected.json"), expected.to_string()).unwrap();
    }
}

/// Calibration the default model writes itself (`recover::self_written`): the same
/// tokens for a seed, others for another; each sample starts at an ordinary token and
/// takes the model's most likely tokens for four steps (checked against the CPU
/// backend's logits over the sample), then samples.
#[test]
fn the_model_writes_its_own_calibration_deterministically() {
    use pippin::engine::{Backend, Engine, Logits, SessionOptions, Want};
    use pippin::sampler::argmax;
    let model = crate::common::model_path();
    let write = |seed| {
        pollster::block_on(recover::self_written(&model, 3, 24, seed, &mut |_, _| {}))
            .expect("samples")
    };
    let (a, b) = (write(7), write(7));
    assert_eq!(a, b, "one seed, one text");
    assert_ne!(a, write(8), "another seed, another text");
    assert!(a.len() > 24 && a.len() <= 3 * 24, "{} tokens", a.len());
    let mut e = pollster::block_on(Engine::load_file_cpu(&model, SessionOptions::default()))
        .expect("the default model");
    let text = e.tokenizer().decode(&a[..24], true).expect("decodes");
    assert!(!text.trim().is_empty());
    let mut backend = e.backend().expect("a backend");
    for (i, &t) in a[..5].iter().enumerate() {
        let Logits::Full(l) =
            pollster::block_on(backend.forward(&[t], Want::logits())).expect("forward")
        else {
            unreachable!("the CPU backend gives full logits")
        };
        assert_eq!(argmax(&l) as u32, a[i + 1], "greedy step {i}");
    }
}
