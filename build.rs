//! Writes the WGSL kernels of `shaders/` to `OUT_DIR/shaders/` without comments,
//! indentation, line breaks and the spaces no token needs, which `kernels` embeds: the
//! comments and spacing are for readers of the source, and in the browser's wasm they
//! were ~25 KB of the download.

use std::{env, fs, path::Path};

fn main() {
    println!("cargo:rerun-if-changed=shaders");
    let out = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("shaders");
    fs::create_dir_all(&out).expect("OUT_DIR is writable");
    for entry in fs::read_dir("shaders").expect("shaders/ is readable") {
        let path = entry.expect("shaders/ is readable").path();
        if path.extension().is_none_or(|e| e != "wgsl") {
            continue;
        }
        let src = fs::read_to_string(&path).expect("a shader is UTF-8");
        // The code joined into one line (newlines separate no WGSL token), except
        // `#include "file"` lines, which `kernels` resolves line by line: kept as
        // written, on lines of their own.
        let (mut min, mut code) = (String::with_capacity(src.len()), String::new());
        for line in src.lines() {
            // WGSL has no strings: `//` always starts a comment.
            let line = line.split("//").next().unwrap_or("").trim();
            if line.starts_with('#') {
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
        let name = path.file_name().expect("a file name");
        fs::write(out.join(name), min).expect("OUT_DIR is writable");
    }
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
