//! `pippin info`: what a GGUF file holds and how Pippin reads it.

use pippin::gguf::Gguf;
use pippin::model::Config;
use pippin::{Error, Result};
use std::io::Write;

pub fn info(path: &std::path::Path) -> Result<()> {
    // Every file of a split model: its tensors are in all of them.
    let (g, _) = pippin::gguf::split::open_model(path)?;
    // Built whole, then written once: `pippin info … | head` must not panic.
    let mut s = String::new();
    write_info(&mut s, path, &g).map_err(|e| Error::invalid(e.to_string()))?;
    let _ = std::io::stdout().write_all(s.as_bytes());
    Ok(())
}

fn write_info(s: &mut String, path: &std::path::Path, g: &Gguf) -> std::fmt::Result {
    use std::fmt::Write;
    let (nm, nt) = (g.metadata.len(), g.tensors.len());
    writeln!(
        s,
        "{}: GGUF v{}, {nm} metadata keys, {nt} tensors",
        path.display(),
        g.version
    )?;
    match Config::from_gguf(g) {
        Ok(c) => {
            let f = c.arch.family();
            writeln!(s, "\nfamily: {} ({})", f.name(), f.module())?;
            writeln!(s, "\nconfig: {c:#?}")?
        }
        Err(e) => writeln!(s, "\nconfig: {e}")?,
    }
    writeln!(s, "\nmetadata:")?;
    for (k, v) in g.metadata.iter() {
        writeln!(s, "  {k:<44} {}", v.summary())?;
    }
    writeln!(s, "\ntensors:")?;
    let mut by_type = std::collections::BTreeMap::<(&str, bool), (usize, u64, u64)>::new();
    for t in &g.tensors {
        let dims = format!("{:?}", t.dims);
        writeln!(
            s,
            "  {:<36} {:<5} {dims:<18} {:>11} bytes",
            t.name,
            t.ty.name(),
            t.n_bytes
        )?;
        let e = by_type
            .entry((t.ty.name(), t.ty.can_dequantize()))
            .or_default();
        *e = (e.0 + 1, e.1 + t.n_elements, e.2 + t.n_bytes);
    }
    write_palettes(s, g)?;
    writeln!(s, "\nby type:")?;
    for ((ty, decodable), (n, elems, bytes)) in by_type {
        let bpw = bytes as f64 * 8.0 / elems as f64;
        let note = if decodable {
            ""
        } else {
            " — Pippin cannot decode this type"
        };
        writeln!(
            s,
            "  {ty:<6} {n:>4} tensors {elems:>12} weights {bytes:>11} bytes ({bpw:.2} bits/weight){note}"
        )?;
    }
    Ok(())
}

/// A summary of the palettized matrices (`pippin convert` output), if any.
fn write_palettes(s: &mut String, g: &Gguf) -> std::fmt::Result {
    use std::fmt::Write;
    let (mut n, mut weights, mut bytes, mut two) = (0, 0u64, 0u64, 0);
    for idx in g.tensors.iter().filter(|t| t.name.ends_with(".pidx")) {
        let lut_name = idx.name.replace(".pidx", ".plut");
        let Some(lut) = g.tensor(&lut_name) else {
            continue;
        };
        let bits = if lut.dims.first() == Some(&4) { 2 } else { 4 };
        n += 1;
        two += (bits == 2) as usize;
        weights += idx.n_elements * 32 / bits;
        bytes += idx.n_bytes + lut.n_bytes;
    }
    if n > 0 {
        writeln!(
            s,
            "\npalettized: {n} matrices ({two} at 2 bits, {} at 4), {weights} weights, {:.3} bits/weight with their tables",
            n - two,
            bytes as f64 * 8.0 / weights as f64
        )?;
    }
    Ok(())
}
