//! The `pippin` command line end to end: `generate` and `bench` on the default model,
//! a split model run from its first file, `info` on every family and on split files,
//! and clear errors. (The library's own tests are the root package's `tests/suite`.)

use pippin::gguf::split::shard_names;
use pippin::model::Arch;
use pippin::testing::synthetic::Spec;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The default model (`scripts/fetch-model`), or `PIPPIN_MODEL`.
fn model() -> PathBuf {
    let p = std::env::var_os("PIPPIN_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(p.exists(), "{}: run scripts/fetch-model", p.display());
    p
}

/// The default model split in three (`scripts/fetch-fixtures`), in order.
fn shards() -> Vec<PathBuf> {
    let first = root().join("models/fixtures/split/SmolLM2-135M-Instruct-00001-of-00003.gguf");
    assert!(
        first.exists(),
        "{}: run scripts/fetch-fixtures",
        first.display()
    );
    let names = shard_names(&first.to_string_lossy()).expect("a split's first file");
    names.into_iter().map(PathBuf::from).collect()
}

fn run<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pippin"))
        .args(args)
        .output()
        .expect("the pippin binary runs")
}

/// Runs `pippin` with `args`; it must succeed. Its (stdout, stderr).
fn pippin<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> (String, String) {
    let out = run(args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "pippin failed: {stderr}");
    (stdout, stderr)
}

/// `pippin generate --cpu` on `model`: the text of 6 tokens, and the report.
fn generate(model: &Path) -> (String, String) {
    let args = ["generate", "--cpu", "--max-tokens", "6"];
    let prompt = ["--prompt", "The capital of France is", "--model"];
    let args = args.iter().chain(&prompt).map(OsStr::new);
    pippin(args.chain([model.as_os_str()]))
}

#[test]
fn generates_and_reports() {
    let (out, err) = generate(&model());
    assert!(out.starts_with(" Paris."), "{out}");
    assert!(
        err.contains("5 prompt tokens, 6 generated") && err.contains("decode"),
        "{err}"
    );
}

#[test]
fn runs_a_split_model_from_its_first_file() {
    let split = generate(&shards()[0]).0;
    assert!(split.starts_with(" Paris"), "{split}");
    assert_eq!(split, generate(&model()).0);
}

/// `pippin info` lists every file's tensors for a split model's first file.
#[test]
fn info_reads_every_file_of_a_split_model() {
    let info = |model: &Path| pippin([OsStr::new("info"), model.as_os_str()]).0;
    let (split, whole) = (info(&shards()[0]), info(&model()));
    // The same tensors listed; the file name and its size may differ.
    let tensors = |s: &str| s.lines().filter(|l| l.contains("blk.")).count();
    assert!(tensors(&whole) > 0, "{whole}");
    assert_eq!(tensors(&split), tensors(&whole), "{split}");
}

#[test]
fn info_names_the_family_and_its_module() {
    let dir = root().join("target/test-synthetic/cli");
    std::fs::create_dir_all(&dir).unwrap();
    for arch in Arch::ALL {
        let path = dir.join(format!("family-{}.gguf", arch.name()));
        Spec::family(arch).write(&path).unwrap();
        let (out, _) = pippin([OsStr::new("info"), path.as_os_str()]);
        let f = arch.family();
        assert!(
            out.contains(&format!("family: {} ({})", f.name(), f.module())),
            "{out}"
        );
        assert!(root().join(f.module()).is_file(), "{}", f.module());
    }
}

/// `pippin bench --cpu --json`: the CPU backend's figures, its guided reply included
/// (the CPU backend gives full logits, which the guided bench masks itself); the
/// speculation figures (~15 s of replies, nothing this test checks) left out.
#[test]
fn bench_on_the_cpu_backend() {
    let args = [
        "bench",
        "--cpu",
        "--json",
        "--prompt",
        "8",
        "--steps",
        "4",
        "--only",
        "model,guided,prefix",
        "--model",
    ];
    let model = model();
    let (out, _) = pippin(args.iter().map(OsStr::new).chain([model.as_os_str()]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["backend"], "cpu");
    assert!(v.get("speculation").is_none(), "--only leaves it out: {v}");
    for k in ["prefill_tokens_per_s", "decode_tokens_per_s"] {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {v}");
    }
    let guided = &v["guided"];
    assert_eq!(guided["vocab"], 49152);
    // The schema's reply takes more than a handful of tokens ({"name":"...", ...).
    assert!(guided["steps"].as_u64().is_some_and(|s| s > 8), "{guided}");
    assert!(v["memory"]["heap_after_load_bytes"]
        .as_u64()
        .is_some_and(|b| b > 90_000_000));
    // The prefix cache's figure: the long system prompt cached, not run again.
    let p = &v["prefix_cache"];
    assert_eq!(p["same_text"], true, "{p}");
    let cached = |side: &str| p[side]["cached_tokens"].as_u64().unwrap_or(0);
    assert!(cached("with_prefix_cache") > cached("without") + 400, "{p}");
}

#[test]
fn errors_are_clear() {
    let out = run([
        "generate",
        "--cpu",
        "--prompt",
        "hi",
        "--model",
        "/nonexistent.gguf",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: cannot open /nonexistent.gguf"),
        "{err}"
    );
    let cargo_toml = root().join("Cargo.toml");
    let info = run([OsStr::new("info"), cargo_toml.as_os_str()]);
    assert!(String::from_utf8_lossy(&info.stderr).contains("not a GGUF file"));
}
