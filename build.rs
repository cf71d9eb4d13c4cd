//! Writes the WGSL kernels of `shaders/` to `OUT_DIR/shaders/` without comments,
//! indentation and blank lines, which `kernels` embeds: the comments are for readers
//! of the source, and in the browser's wasm they were ~20 KB of the download.

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
        let mut min = String::with_capacity(src.len());
        for line in src.lines() {
            // WGSL has no strings: `//` always starts a comment.
            let code = line.split("//").next().unwrap_or("").trim();
            if !code.is_empty() {
                min.push_str(code);
                min.push('\n');
            }
        }
        let name = path.file_name().expect("a file name");
        fs::write(out.join(name), min).expect("OUT_DIR is writable");
    }
}
