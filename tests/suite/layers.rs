//! The library's layering (docs/layout.md): a module imports only from the layers below
//! its own, so no arrow points up and no two modules import each other. Read from the
//! sources: every `crate::<module>` outside comments and `#[cfg(test)]` code, and in the
//! engine, what its backends (`engine::gpu`, `engine::cpu`) and their interface
//! (`engine::backend`) take from the engine's other files (nothing).

use crate::common;
use std::path::Path;

/// Top to bottom; modules of one layer do not import each other.
const LAYERS: &[&[&str]] = &[
    &["wasm"],
    &["recover"],
    &["convert"],
    &["engine"],
    &["kernels"],
    &["adapters"],
    &["model"],
    &["sampler", "guided"],
    &["quant"],
    &["tokenizer"],
    &["gguf"],
    &["gpu"],
];

/// What any module may use: errors, threads, the seeded generator, the heap counter.
const LEAVES: &[&str] = &["error", "par", "rng", "memory"];

/// Every `.rs` file below `dir`.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The library code of a file (up to its tests), without comments.
fn code(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default().to_string())
        .collect()
}

/// The names that follow `prefix` in `line` (`crate::` → the modules it names).
fn named_after<'a>(line: &'a str, prefix: &str) -> Vec<&'a str> {
    line.match_indices(prefix)
        .map(|(i, _)| {
            let rest = &line[i + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

#[test]
fn every_import_points_down() {
    let src = common::root().join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel.iter().next().unwrap().to_string_lossy();
        let module = top.trim_end_matches(".rs");
        if ["lib", "testing"].contains(&module) {
            continue; // the crate root and test support
        }
        let Some(mine) = layer_of(module) else {
            assert!(LEAVES.contains(&module), "{module} is in no layer");
            continue;
        };
        for line in code(f) {
            for used in named_after(&line, "crate::") {
                // `crate::Error`, `crate::Result`: the root's re-exports of `error`.
                let ok = used == module
                    || used.starts_with(char::is_uppercase)
                    || LEAVES.contains(&used)
                    || layer_of(used).is_some_and(|l| l > mine);
                if !ok {
                    wrong.push(format!("{}: crate::{used}", rel.display()));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that point up or sideways:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_backends_use_only_their_interface_from_the_engine() {
    let engine = common::root().join("src/engine");
    let mut wrong = Vec::new();
    for (dir, own) in [
        ("backend", &["backend"][..]),
        ("gpu", &["backend", "gpu"]),
        ("cpu", &["backend", "cpu"]),
    ] {
        let mut files = Vec::new();
        sources(&engine.join(dir), &mut files);
        for f in &files {
            // In `engine/<dir>/mod.rs`, `super::` is the engine itself.
            let top = f.file_name().is_some_and(|n| n == "mod.rs")
                && f.parent() == Some(&engine.join(dir));
            for line in code(f) {
                let mut used = named_after(&line, "crate::engine::");
                if top {
                    used.extend(named_after(&line, "super::"));
                }
                wrong.extend(used.into_iter().filter(|u| !own.contains(u)).map(|u| {
                    format!(
                        "{}: engine::{u}",
                        f.strip_prefix(&engine).unwrap().display()
                    )
                }));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a backend reaches into the engine:\n{}",
        wrong.join("\n")
    );
}

/// DESIGN.md: only the device (`gpu`), threads (`par`), the heap (`memory`), the front
/// door (`wasm`, and the crate root choosing modules) know where they run — and
/// `guided`, whose compiler is linked in natively and loaded as a second wasm module
/// in the browser. The CPU backend's SIMD-or-plain choice of its loops is made in
/// `pippin_cpu_kernels::fastest`, outside this crate.
#[test]
fn only_the_platform_modules_ask_where_they_run() {
    let src = common::root().join("src");
    let allowed = [
        "gpu",
        "par.rs",
        "memory.rs",
        "wasm",
        "lib.rs",
        "guided",
        "testing",
    ];
    let mut files = Vec::new();
    sources(&src, &mut files);
    let asking: Vec<String> = files
        .iter()
        .filter(|f| {
            let top = f.strip_prefix(&src).unwrap().iter().next().unwrap();
            !allowed.contains(&top.to_string_lossy().as_ref())
        })
        .filter(|f| {
            let all = code(f).join("\n");
            all.contains("target_arch") || all.contains("target_feature")
        })
        .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert!(
        asking.is_empty(),
        "platform cfgs outside the platform modules: {asking:?}"
    );
}
