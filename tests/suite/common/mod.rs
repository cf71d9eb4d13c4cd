//! Paths and loaders shared by the integration tests. The default model must be in
//! `models/` (scripts/fetch-model); a missing file fails the test, it never skips it.
#![allow(dead_code)]

use pippin::model::{load_reference, Reference};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn model_path() -> PathBuf {
    let p = std::env::var_os("PIPPIN_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-model",
        p.display()
    );
    p
}

/// A model file in `models/` that a fetch script puts there (`scripts/fetch-model
/// NAME`, `scripts/fetch-fixtures`); missing is a failure, never a skip.
pub fn models_file(name: &str) -> PathBuf {
    let p = root().join("models").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-model gemma3 and scripts/fetch-fixtures",
        p.display()
    );
    p
}

/// Layers kept by `small_model_path`.
pub const SMALL_LAYERS: usize = 4;

/// The default model cut to its first `SMALL_LAYERS` layers (its own weights,
/// tokenizer and template; `truncated_copy`): for the GPU tests whose subject is what
/// the engine does with a model (pipelining, masks, sessions, adapters), not its
/// numbers, which the full model's tests check against llama.cpp. Lavapipe runs its
/// token in about a third of the full model's time.
pub fn small_model_path() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| truncated_copy(&model_path(), SMALL_LAYERS))
        .clone()
}

/// The file at `path` cut to its first `layers` layers
/// (`pippin::testing::synthetic::truncated`), written to `target/test-synthetic/`
/// (anew by each test process: a whole file replaces the last by a rename).
pub fn truncated_copy(path: &std::path::Path, layers: usize) -> PathBuf {
    let dir = root().join("target/test-synthetic");
    std::fs::create_dir_all(&dir).expect("target/test-synthetic");
    let stem = path.file_stem().expect("a file name").to_string_lossy();
    let (name, ext) = stem.split_once('.').unwrap_or((&stem, ""));
    let p = dir.join(format!("{name}-{layers}-layers.{ext}.gguf").replace("..", "."));
    pippin::testing::synthetic::truncated(path, &p, layers)
        .unwrap_or_else(|e| panic!("{} cut to {layers} layers: {e}", path.display()));
    p
}

pub fn gemma_path() -> PathBuf {
    models_file("gemma-3-270m-q4_k_m.gguf")
}

pub fn testdata(name: &str) -> Value {
    let p = root().join("../shared/testdata").join(name);
    let text =
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
    serde_json::from_str(&text).expect("testdata is JSON")
}

/// The CPU reference model of the default model, loaded once per test binary.
pub fn reference() -> &'static Reference {
    static M: OnceLock<Reference> = OnceLock::new();
    M.get_or_init(|| {
        load_reference(&model_path())
            .expect("default model loads")
            .1
    })
}

/// The default model on the CPU backend (integer kernels, several times faster than
/// the f32 reference), loaded once per test binary: for tests whose subject is what
/// the generate loop does with logits (guided output, tool calls), not the forward pass.
#[allow(dead_code)]
pub fn cpu_model() -> &'static pippin::engine::CpuModel {
    static M: OnceLock<pippin::engine::CpuModel> = OnceLock::new();
    M.get_or_init(|| load_cpu(&model_path(), None))
}

/// The GPU model of the file at `path` (loaded anew).
pub fn load_gpu(path: &std::path::Path) -> pippin::engine::GpuModel {
    use pippin::gpu::{Caps, Gpu};
    let gpu = pollster::block_on(Gpu::new(Caps::default())).expect("a GPU adapter");
    pollster::block_on(pippin::engine::GpuModel::load_file(
        gpu,
        path,
        &mut |_, _| {},
    ))
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    .0
}

/// The default model on the GPU, loaded once for the suite.
pub fn gpu_model() -> &'static pippin::engine::GpuModel {
    static M: OnceLock<pippin::engine::GpuModel> = OnceLock::new();
    M.get_or_init(|| load_gpu(&model_path()))
}

/// The small model (`small_model_path`) on the GPU, loaded once for the suite.
pub fn small_gpu_model() -> &'static pippin::engine::GpuModel {
    static M: OnceLock<pippin::engine::GpuModel> = OnceLock::new();
    M.get_or_init(|| load_gpu(&small_model_path()))
}

/// A GPU session's options as the tests compare against the f32 reference: f32 KV,
/// 256 tokens, chunks of 64.
pub fn f32_session() -> pippin::engine::SessionOptions {
    pippin::engine::SessionOptions {
        max_context: 256,
        kv: pippin::quant::kv::KvFormat::F32,
        chunk: 64,
        ..Default::default()
    }
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

pub mod gpu;
pub mod llama_cpp;
pub mod plain;
#[allow(unused_imports)]
pub use pippin::testing::synthetic;

/// `path` loaded for the CPU backend (its matrices split across `team`'s threads when
/// there is one).
pub fn load_cpu(
    path: &std::path::Path,
    team: Option<&std::sync::Arc<dyn pippin::engine::cpu::team::Team>>,
) -> pippin::engine::CpuModel {
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len();
    let mut src = pippin::gguf::ReadSource {
        reader: std::io::BufReader::new(file),
        len: Some(len),
    };
    let (mut progress, mut check) = (|_, _| {}, |_: &_| Ok(()));
    let load = pippin::engine::cpu::load_shared(&mut src, 4096, &mut progress, &mut check, team);
    pollster::block_on(load).unwrap().0
}

/// `path` on the GPU, loaded with the session options `opts` (so its pipelines are
/// compiled from the header), after checking that warming a session of `opts` then
/// compiles no pipeline, and that the same warm on fresh kernels compiles as many as
/// the load did (at least 8).
pub fn precompiled_load(
    path: &std::path::Path,
    opts: &pippin::engine::SessionOptions,
) -> pippin::engine::GpuModel {
    use pippin::engine::{GpuModel, GpuSession};
    let gpu = pollster::block_on(pippin::gpu::Gpu::new(Default::default())).unwrap();
    let mut src = pippin::gguf::split::open_files(path).unwrap();
    let (mut progress, mut check) = (|_, _| {}, |_: &pippin::gguf::Gguf| Ok(()));
    let load = GpuModel::load_checked(gpu, &mut src, &mut progress, &mut check, Some(opts));
    let mut m = pollster::block_on(load).unwrap().0;
    let at_load = m.kernels.pipelines();
    let warm = |m: &GpuModel| {
        let before = m.kernels.pipelines();
        GpuSession::new(m, opts.clone()).unwrap().warm(m).unwrap();
        m.gpu.take_error().unwrap();
        m.kernels.pipelines() - before
    };
    let name = path.display();
    assert_eq!(
        warm(&m),
        0,
        "{name}: pipelines the warm compiled after the load"
    );
    m.kernels = std::sync::Arc::new(pippin::kernels::Kernels::new(&m.gpu));
    assert_eq!(
        warm(&m),
        at_load,
        "{name}: pipelines of a warm on fresh kernels vs the load's"
    );
    assert!(at_load >= 8, "{name}: {at_load} pipelines");
    m
}

/// A rank-8 adapter of every projection for the default model (seed 3): its
/// adapter_config.json and safetensors bytes.
pub fn rank8_adapter() -> (String, Vec<u8>) {
    rank8_adapter_for(&reference().config)
}

/// The same adapter (rank 8, every module, seed 3, `FixtureSpec::half`) for the
/// model of `config` (another depth: a cut model's).
pub fn rank8_adapter_for(config: &pippin::model::Config) -> (String, Vec<u8>) {
    use pippin::adapters::fixture::{write, FixtureSpec};
    let spec = FixtureSpec {
        half: true,
        ..FixtureSpec::new(8, &pippin::adapters::MODULES, 3)
    };
    write(config, &spec)
}

/// A reader that counts the bytes read through it (tests that a load stops early).
pub struct Counting<R>(pub R, pub std::rc::Rc<std::cell::Cell<u64>>);

impl<R: std::io::Read> std::io::Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        self.1.set(self.1.get() + n as u64);
        Ok(n)
    }
}
