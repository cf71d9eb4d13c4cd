//! Loading streams the weights to the GPU slice by slice: the heap stays small however
//! large the model (counted by `pippin::memory::Counting`, installed here as in the
//! CLI and the wasm module). One test in this binary: the counters are the process's,
//! so nothing else may allocate while a load is measured. (That a matrix written in
//! slices equals one uploaded whole is checked in tests/suite/kernels_matmul.rs.)

use pippin::engine::GpuModel;
use pippin::gpu::{Caps, Gpu};
use pippin::memory::{heap, reset_peak, Counting};
use pippin::testing::synthetic::Spec;

#[global_allocator]
static HEAP: Counting = Counting;

const MIB: u64 = 1 << 20;

/// What `load` held at most beyond what was live before it.
fn load_peak(load: impl FnOnce() -> GpuModel) -> (GpuModel, u64) {
    reset_peak();
    let before = heap().live_bytes;
    let m = load();
    let h = heap();
    eprintln!("largest single allocation: {} bytes", h.largest_bytes);
    (m, h.peak_bytes.saturating_sub(before))
}

fn load(path: &std::path::Path) -> GpuModel {
    let gpu = pollster::block_on(Gpu::new(Caps::default())).expect("a GPU adapter");
    pollster::block_on(GpuModel::load_file(gpu, path, &mut |_, _| {}))
        .expect("the model loads")
        .0
}

/// The default model, then a 500 MB one (a 100,000-token f32 embedding of 410 MB,
/// split into parts on lavapipe's 128 MiB bindings): the heap peak does not follow
/// the file.
#[test]
fn models_load_within_64_mib_of_heap() {
    let path = std::path::Path::new("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let (m, peak) = load_peak(|| load(path));
    let file = std::fs::metadata(path).expect("the default model").len();
    eprintln!("default model: {file} bytes, heap peak {peak} bytes during load");
    assert!(peak <= 64 * MIB, "heap peak {peak} bytes");
    assert!(
        m.weight_bytes > file / 2,
        "{} bytes of weights",
        m.weight_bytes
    );
    drop(m);

    let dir = std::env::temp_dir().join(format!("pippin-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("large.gguf");
    Spec::large()
        .write(&path)
        .expect("the synthetic model is written");
    let file = std::fs::metadata(&path).expect("written").len();
    let (m, peak) = load_peak(|| load(&path));
    std::fs::remove_dir_all(&dir).ok();
    eprintln!("synthetic model: {file} bytes, heap peak {peak} bytes during load");
    assert!(file >= 400 * MIB, "{file} bytes");
    assert!(peak <= 64 * MIB, "heap peak {peak} bytes");
    assert!(m.embed.parts.len() > 1 || m.gpu.max_binding() >= 410_000_000);
}
