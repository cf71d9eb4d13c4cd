//! Loading streams the weights to the GPU slice by slice: the heap stays small however
//! large the model (counted by `pippin::memory::Counting`, installed here as in the
//! CLI and the wasm module), and a matrix written in slices is word for word the one
//! uploaded whole.

mod common;

use common::gpu::ctx;
use pippin::engine::GpuModel;
use pippin::gpu::{Caps, Gpu};
use pippin::kernels::matmul::GpuMatrix;
use pippin::memory::{heap, reset_peak, Counting};
use pippin::quant::{encode, gpu_layout, GgmlType};
use pippin::testing::synthetic::Spec;

#[global_allocator]
static HEAP: Counting = Counting;

const MIB: u64 = 1 << 20;

/// The counters are the process's: tests that allocate run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// What `load` held at most beyond what was live before it.
fn load_peak(load: impl FnOnce() -> GpuModel) -> (GpuModel, u64) {
    reset_peak();
    let before = heap().live_bytes;
    let m = load();
    (m, heap().peak_bytes - before)
}

fn load(path: &std::path::Path) -> GpuModel {
    let gpu = pollster::block_on(Gpu::new(Caps::default())).expect("a GPU adapter");
    pollster::block_on(GpuModel::load_file(gpu, path, &mut |_, _| {}))
        .expect("the model loads")
        .0
}

#[test]
fn the_default_model_loads_within_64_mib_of_heap() {
    let _alone = alone();
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
}

/// A 500 MB model (a 100,000-token f32 embedding of 410 MB, split into parts on
/// lavapipe's 128 MiB bindings): the heap peak does not follow the file.
#[test]
fn a_large_model_loads_within_64_mib_of_heap() {
    let _alone = alone();
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

/// Reads every part of `m` back: (row0, rows, qs words, scale words).
fn words(gpu: &Gpu, m: &GpuMatrix) -> Vec<(usize, usize, Vec<u8>, Vec<u8>)> {
    m.parts
        .iter()
        .map(|p| {
            let read = |b: &wgpu::Buffer| pollster::block_on(gpu.read(b, 0, b.size())).unwrap();
            (p.row0, p.rows, read(&p.qs), read(&p.scales))
        })
        .collect()
}

/// Every format, odd row counts, parts of a few rows, slices of two to a few rows:
/// written slice by slice equals packed and uploaded whole.
#[test]
fn a_matrix_written_in_slices_equals_one_uploaded_whole() {
    let _alone = alone();
    let gpu = &ctx().gpu;
    use GgmlType::*;
    let types = [
        F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Iq4Nl, Q2K, Q3K, Q4K, Q5K, Q6K,
    ];
    for (i, ty) in types.into_iter().enumerate() {
        let cols = if ty.block().0 == 256 { 512 } else { 96 };
        let row_bytes = ty.bytes_for(cols as u64).unwrap() as usize;
        // Words of values per row, from two rows packed: parts of 3 rows' worth hold 2.
        let two = gpu_layout::pack(ty, &vec![0; 2 * row_bytes], 2 * cols).unwrap();
        let small = (3 * two.qs.len() / 2 * 4) as u64;
        for (rows, max_bytes, slice) in [
            (7, 1 << 20, 1),
            (13, small, 3),
            (31, small, 1),
            (30, 1 << 20, 1 << 20),
        ] {
            let data = encode::random_blocks(ty, rows * cols, 11 + i as u64);
            let whole = gpu_layout::pack(ty, &data, rows * cols).unwrap();
            let want =
                GpuMatrix::from_packed_split(gpu, "w", whole, rows, cols, max_bytes).unwrap();
            let mut w = GpuMatrix::writer(gpu, "w", ty, (rows, cols), max_bytes).unwrap();
            while let Some(r) = w.next_rows(slice * row_bytes) {
                let bytes = &data[r.start * row_bytes..r.end * row_bytes];
                w.write(gpu, r, bytes).unwrap();
            }
            let got = w.finish().unwrap();
            let what =
                format!("{ty} {rows}×{cols}, parts of {max_bytes} bytes, slices of {slice} rows");
            assert_eq!(got.format, want.format, "{what}");
            assert_eq!(words(gpu, &got), words(gpu, &want), "{what}");
        }
    }
}

#[test]
fn slices_out_of_order_or_missing_are_errors() {
    let _alone = alone();
    let gpu = &ctx().gpu;
    let (rows, cols) = (6, 64);
    let row_bytes = GgmlType::Q8_0.bytes_for(cols as u64).unwrap() as usize;
    let data = encode::random_blocks(GgmlType::Q8_0, rows * cols, 5);
    let mut w = GpuMatrix::writer(gpu, "w", GgmlType::Q8_0, (rows, cols), 1 << 20).unwrap();
    assert!(w
        .write(gpu, 2..4, &data[2 * row_bytes..4 * row_bytes])
        .is_err());
    w.write(gpu, 0..2, &data[..2 * row_bytes]).unwrap();
    assert!(
        w.write(gpu, 2..3, &data[2 * row_bytes..3 * row_bytes])
            .is_err(),
        "an odd slice inside a part"
    );
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 2..0;
    assert!(
        w.write(gpu, backwards, &[]).is_err(),
        "an empty, reversed range"
    );
    assert!(w.finish().is_err(), "rows 2..6 were never written");
}
