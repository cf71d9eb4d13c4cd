//! Writes the WGSL of `shaders/` to `OUT_DIR/shaders/` without comments, indentation,
//! line breaks and the spaces no token needs (in the browser's wasm they were ~25 KB
//! of the download), `#include "file"` lines kept on lines of their own — `kernels`
//! splices the shared files in when it compiles a pipeline, so each is embedded once
//! (expanded into every kernel here they were +52 KB of wasm) — and
//! `OUT_DIR/shaders.rs`, the table `kernels` builds on: a `Shader` per kernel file (one
//! with an `@compute` entry point), its source, the included files by name, and how the
//! kernel uses each binding, read from its `@binding` declarations (includes expanded).
//! So a kernel's bindings are stated once, in its WGSL.

use pippin_cpu_kernels::blocks32::Format;
use std::fmt::Write as _;
use std::{env, fs, path::Path};

fn main() {
    println!("cargo:rerun-if-changed=shaders");
    let out = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("shaders");
    fs::create_dir_all(&out).expect("OUT_DIR is writable");
    let mut names: Vec<String> = fs::read_dir("shaders")
        .expect("shaders/ is readable")
        .map(|e| e.expect("shaders/ is readable").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wgsl"))
        .map(|p| p.file_stem().expect("a file name").to_string_lossy().into())
        .collect();
    names.sort();
    let (mut table, mut includes) = (Vec::new(), vec!["formats".to_string()]);
    for name in names.iter().chain(["formats".to_string()].iter()) {
        fs::write(out.join(format!("{name}.wgsl")), minified(&source(name)))
            .expect("OUT_DIR is writable");
        let code = expand(name, &mut Vec::new());
        match code.contains("@compute") {
            true => table.push((name.clone(), bindings(name, &code))),
            false if name != "formats" => includes.push(name.clone()),
            false => {}
        }
    }
    let rust = rust_table(&table, &includes);
    fs::write(out.with_file_name("shaders.rs"), rust).expect("OUT_DIR is writable");
}

/// `shaders/<name>.wgsl`, or the generated `formats.wgsl`.
fn source(name: &str) -> String {
    match name {
        "formats" => formats(),
        _ => fs::read_to_string(format!("shaders/{name}.wgsl"))
            .unwrap_or_else(|e| panic!("shaders/{name}.wgsl: {e}")),
    }
}

/// `src` as one line without comments, each `#include` on a line of its own.
fn minified(src: &str) -> String {
    let (mut min, mut code) = (String::with_capacity(src.len()), String::new());
    for line in src.lines() {
        // WGSL has no strings: `//` always starts a comment.
        let line = line.split("//").next().unwrap_or("").trim();
        if line.starts_with("#include ") {
            squeeze(&code, &mut min);
            code.clear();
            min.push('\n');
            min.push_str(line);
            min.push('\n');
        } else {
            code.push_str(line);
            code.push(' ');
        }
    }
    squeeze(&code, &mut min);
    min.push('\n');
    min
}

/// `shaders/<name>.wgsl` without comments, its includes expanded (each file once:
/// `seen` lists those already in), as one line. `formats.wgsl` is generated.
fn expand(name: &str, seen: &mut Vec<String>) -> String {
    if seen.iter().any(|s| s == name) {
        return String::new();
    }
    seen.push(name.to_string());
    let src = source(name);
    let mut code = String::with_capacity(src.len());
    for line in src.lines() {
        // WGSL has no strings: `//` always starts a comment.
        let line = line.split("//").next().unwrap_or("").trim();
        match line.strip_prefix("#include ") {
            Some(file) => {
                let file = file.trim().trim_matches('"');
                let inc = file.strip_suffix(".wgsl").unwrap_or_else(|| {
                    panic!("shaders/{name}.wgsl includes {file:?}, not a .wgsl file")
                });
                code.push_str(&expand(inc, seen));
            }
            None => code.push_str(line),
        }
        code.push(' ');
    }
    code
}

/// The contracts between the Rust code and the kernels, as WGSL written from the Rust
/// that defines them (`formats.wgsl`, included where they are used), so nothing is
/// kept equal by hand: the weight format ids the kernels switch on (`GPU_<NAME>`: the
/// GPU's own from `GpuFormat::id`, GGML's block formats from
/// `pippin_cpu_kernels::blocks32::Format::ALL`, a build dependency), the KV formats
/// (`KV_<variant>` from `KvFormat`), the activation ids (`ACT_<variant>` from
/// `Activation`), each weight format's words of packed values per block
/// (`qs_words_of`, from `GpuFormat::qs_words_per_block` and `Format::gpu_words`), and
/// the step's uniform (`struct Step`, from `kernels::Step`).
fn formats() -> String {
    let mut s = String::new();
    let mut words = Vec::new();
    let own = |f| own_arms(&format!("pub fn {f}(self) -> "));
    for ((name, id), (_, n)) in own("id").into_iter().zip(own("qs_words_per_block")) {
        words.push((format!("GPU_{}", upper_snake(&name)), id, n));
    }
    for f in Format::ALL {
        let name = f.name().to_uppercase();
        words.push((format!("GPU_{name}"), f.ggml_id(), f.gpu_words() as u32));
    }
    for (name, id, _) in &words {
        writeln!(s, "const {name}: u32 = {id}u;").unwrap();
    }
    for (file, name, prefix) in [
        ("src/quant/kv.rs", "KvFormat", "KV_"),
        ("src/model/config.rs", "Activation", "ACT_"),
    ] {
        for (variant, id) in enum_ids(file, name) {
            writeln!(s, "const {prefix}{}: u32 = {id}u;", upper_snake(&variant)).unwrap();
        }
    }
    s.push_str("fn qs_words_of(format: u32) -> u32 {\n    switch format {\n");
    for (name, _, n) in &words {
        writeln!(s, "        case {name}: {{ return {n}u; }}").unwrap();
    }
    s.push_str("        default: { return 0u; }\n    }\n}\n");
    s.push_str(&step_struct());
    s
}

/// The `Variant => n,` arms of `GpuFormat`'s method `head` (the GPU's own formats; the
/// `Blocks(f)` arm is `Format`'s, read from the crate itself).
fn own_arms(head: &str) -> Vec<(String, u32)> {
    let body = item_body("src/quant/gpu_layout.rs", head, "\n    }");
    code_lines(&body)
        .filter(|l| l.contains("=>") && !l.starts_with("Blocks("))
        .map(|line| {
            let (variant, n) = line.trim_end_matches(',').split_once("=>").unwrap();
            let n = n
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("GpuFormat: {line}"));
            (variant.trim().to_string(), n)
        })
        .collect()
}

/// The body of the item of `file` that starts with `head`, to its closing line.
fn item_body(file: &str, head: &str, close: &str) -> String {
    println!("cargo:rerun-if-changed={file}");
    let src = fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    src.split_once(head)
        .and_then(|(_, rest)| rest.split_once(close))
        .unwrap_or_else(|| panic!("{file}: no `{head}`"))
        .0
        .to_string()
}

/// The lines of a body without comments and blank lines.
fn code_lines(body: &str) -> impl Iterator<Item = &str> {
    body.lines()
        .map(|l| l.split("//").next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
}

/// `Variant = id` of each variant of `pub enum name` in `file`.
fn enum_ids(file: &str, name: &str) -> Vec<(String, u32)> {
    let body = item_body(file, &format!("pub enum {name} {{"), "\n}");
    code_lines(&body)
        .filter(|l| !l.starts_with('#'))
        .map(|line| {
            let (variant, id) = line
                .trim_end_matches(',')
                .split_once(" = ")
                .unwrap_or_else(|| panic!("{name}: `{line}` has no explicit id"));
            let id = id
                .parse()
                .unwrap_or_else(|_| panic!("{name}::{variant} = {id}"));
            (variant.to_string(), id)
        })
        .collect()
}

/// `Q8_0` → `Q8_0`, `GeluTanh` → `GELU_TANH`, `Q4K` → `Q4K`.
fn upper_snake(variant: &str) -> String {
    let (mut out, mut prev) = (String::new(), None::<char>);
    for c in variant.chars() {
        if c.is_uppercase() && prev.is_some_and(|p| p.is_lowercase()) {
            out.push('_');
        }
        out.extend(c.to_uppercase());
        prev = Some(c);
    }
    out
}

/// WGSL's `struct Step` from the fields of `kernels::Step` (u32 and f32 only: a
/// uniform's layout is then the same in both).
fn step_struct() -> String {
    let body = item_body("src/kernels/mod.rs", "pub struct Step {", "\n}");
    let mut s = String::from("struct Step {\n");
    for line in code_lines(&body) {
        let (field, ty) = line
            .strip_prefix("pub ")
            .and_then(|f| f.trim_end_matches(',').split_once(": "))
            .unwrap_or_else(|| panic!("kernels::Step: `{line}`"));
        assert!(ty == "u32" || ty == "f32", "kernels::Step::{field}: {ty}");
        writeln!(s, "    {field}: {ty},").unwrap();
    }
    s.push_str("}\n");
    s
}

/// How kernel `name` uses bindings 0, 1, … (`Uniform`, `Read`, `Write`) and what it
/// calls them, from each `@binding(i) var<…> name` of its code; every index from 0 must
/// be declared once.
fn bindings(name: &str, code: &str) -> Vec<(&'static str, String)> {
    let mut found: Vec<(usize, &'static str, String)> = Vec::new();
    for decl in code.split("@binding(").skip(1) {
        let (index, rest) = decl.split_once(')').expect("@binding(i)");
        let index: usize = index.trim().parse().expect("a binding index");
        let space = rest
            .split_once("var<")
            .and_then(|(_, r)| r.split_once('>'))
            .map(|(s, _)| s.replace(' ', ""))
            .unwrap_or_else(|| panic!("{name}: binding {index} is not a var<…>"));
        let used = match space.as_str() {
            "uniform" => "Uniform",
            "storage" | "storage,read" => "Read",
            "storage,read_write" => "Write",
            other => panic!("{name}: binding {index} in address space {other}"),
        };
        let var = rest
            .split_once('>')
            .and_then(|(_, r)| r.split(':').next())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_alphanumeric() || c == '_'))
            .unwrap_or_else(|| panic!("{name}: binding {index} has no name"));
        found.push((index, used, var));
    }
    found.sort();
    for (i, (index, ..)) in found.iter().enumerate() {
        assert_eq!(i, *index, "{name}: bindings must be 0, 1, … each once");
    }
    found.into_iter().map(|(_, u, v)| (u, v)).collect()
}

/// The generated `Shader` enum with each kernel's source and bindings.
fn rust_table(table: &[(String, Vec<(&'static str, String)>)], includes: &[String]) -> String {
    let camel = |n: &str| -> String {
        n.split('_')
            .map(|w| w[..1].to_uppercase() + &w[1..])
            .collect()
    };
    let mut s = String::from(
        "/// A kernel: one file of `shaders/` (generated by build.rs).\n\
         #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]\npub enum Shader {\n",
    );
    for (n, _) in table {
        writeln!(s, "    {},", camel(n)).unwrap();
    }
    s.push_str("}\n\nimpl Shader {\n    /// Its WGSL (`#include` lines kept: `preprocess` splices them in).\n    fn source(self) -> &'static str {\n        match self {\n");
    for (n, _) in table {
        writeln!(
            s,
            "            Shader::{} => include_str!(concat!(env!(\"OUT_DIR\"), \"/shaders/{n}.wgsl\")),",
            camel(n)
        )
        .unwrap();
    }
    s.push_str("        }\n    }\n\n    /// How it uses each binding and the binding's name, in binding order (its\n    /// `@binding` declarations).\n    fn bindings(self) -> &'static [(Use, &'static str)] {\n        match self {\n");
    for (n, uses) in table {
        let uses: Vec<String> = uses
            .iter()
            .map(|(u, v)| format!("(Use::{u}, \"{v}\")"))
            .collect();
        writeln!(
            s,
            "            Shader::{} => &[{}],",
            camel(n),
            uses.join(", ")
        )
        .unwrap();
    }
    s.push_str("        }\n    }\n}\n\n");
    s.push_str("/// A shared file a kernel includes, by name (`#include \"name.wgsl\"`).\nfn include(name: &str) -> Option<&'static str> {\n    Some(match name {\n");
    for n in includes {
        writeln!(
            s,
            "        \"{n}.wgsl\" => include_str!(concat!(env!(\"OUT_DIR\"), \"/shaders/{n}.wgsl\")),"
        )
        .unwrap();
    }
    s.push_str("        _ => return None,\n    })\n}\n");
    s
}

/// `code` onto `out` without the spaces that separate nothing: a run of spaces stays
/// (as one) only between two word characters (`let x`) or two operator characters
/// that could fuse into another token (`a - -b`, `> =`).
fn squeeze(code: &str, out: &mut String) {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let operator = |c: char| !word(c) && !c.is_whitespace() && !"(){}[],;:".contains(c);
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if !c.is_whitespace() {
            out.push(c);
            continue;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if let (Some(prev), Some(&next)) = (out.chars().last(), chars.peek()) {
            if (word(prev) && word(next)) || (operator(prev) && operator(next)) {
                out.push(' ');
            }
        }
    }
}
