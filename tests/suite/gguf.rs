//! The GGUF reader on real, synthetic and damaged files: every bad file gives a clear
//! error, never a panic or a huge allocation.

use crate::common;

use common::model_path;
use pippin::gguf::{read_header, Array, Gguf, TensorStream, Value, Writer};
use pippin::model::Config;
use pippin::quant::{dequantize_tensor, encode, GgmlType};
use pippin::sampler::Rng;
use pippin::Error;
use std::io::{Cursor, Read};

fn small_file() -> Vec<u8> {
    let mut w = Writer::new();
    w.meta("general.architecture", Value::Str("llama".into()))
        .meta("a.u8", Value::U8(7))
        .meta("a.i8", Value::I8(-7))
        .meta("a.u16", Value::U16(700))
        .meta("a.i16", Value::I16(-700))
        .meta("a.u32", Value::U32(70_000))
        .meta("a.i32", Value::I32(-70_000))
        .meta("a.f32", Value::F32(0.5))
        .meta("a.bool", Value::Bool(true))
        .meta("a.u64", Value::U64(1 << 40))
        .meta("a.i64", Value::I64(-(1 << 40)))
        .meta("a.f64", Value::F64(0.25))
        .meta(
            "a.strs",
            Value::Array(Array::Str(vec!["x".into(), "yz".into()])),
        )
        .meta(
            "a.nested",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2]),
                Array::F32(vec![3.0]),
            ])),
        );
    let x: Vec<f32> = (0..64).map(|i| i as f32 / 8.0 - 4.0).collect();
    w.tensor("f32", &[64], GgmlType::F32, encode::f32s(&x))
        .unwrap();
    w.tensor("q8", &[32, 2], GgmlType::Q8_0, encode::q8_0(&x))
        .unwrap();
    w.tensor("q4_0", &[64], GgmlType::Q4_0, encode::q4_0(&x))
        .unwrap();
    w.tensor("q4_1", &[32, 2], GgmlType::Q4_1, encode::q4_1(&x))
        .unwrap();
    w.tensor("f16", &[16, 4], GgmlType::F16, encode::f16s(&x))
        .unwrap();
    w.to_bytes().unwrap()
}

fn parse(bytes: &[u8]) -> Result<Gguf, Error> {
    read_header(Cursor::new(bytes), Some(bytes.len() as u64))
}

#[test]
fn writer_round_trips_every_value_type_and_tensor() {
    let bytes = small_file();
    let g = parse(&bytes).unwrap();
    assert_eq!(g.metadata.u64("a.u32"), Some(70_000));
    assert_eq!(g.metadata.get("a.i16"), Some(&Value::I16(-700)));
    assert_eq!(g.metadata.f64("a.f64"), Some(0.25));
    assert_eq!(g.metadata.strings("a.strs").unwrap(), ["x", "yz"]);
    assert_eq!(g.metadata.array("a.nested").unwrap().len(), 2);
    assert_eq!(g.tensors.len(), 5);
    let mut c = Cursor::new(&bytes);
    let mut read_f32 = |t| dequantize_tensor(t, &g.read_tensor(&mut c, t).unwrap()).unwrap();
    let exact = read_f32(g.tensor("f32").unwrap());
    for name in ["q8", "q4_0", "q4_1", "f16"] {
        let got = read_f32(g.tensor(name).unwrap());
        let err = pippin::testing::max_abs_diff(&got, &exact);
        assert!(err < 0.3, "{name}: max error {err}");
    }
}

#[test]
fn streaming_reads_the_same_tensors_as_seeking() {
    let (g, mut f) = Gguf::open(&model_path()).unwrap();
    let file = std::fs::File::open(model_path()).unwrap();
    let mut r = std::io::BufReader::new(file);
    std::io::copy(&mut (&mut r).take(g.header_len), &mut std::io::sink()).unwrap();
    let mut s = TensorStream::new(&g, r);
    let mut n = 0;
    while let Some((t, bytes)) = s.next_tensor().unwrap() {
        if n % 50 == 0 {
            assert_eq!(bytes, g.read_tensor(&mut f, t).unwrap(), "{}", t.name);
        }
        n += 1;
    }
    assert_eq!(n, g.tensors.len());
}

#[test]
fn truncated_files_give_clear_errors() {
    let bytes = std::fs::read(model_path()).unwrap();
    let g = parse(&bytes).unwrap();
    for cut in [
        0,
        3,
        7,
        20,
        1000,
        200_000,
        g.header_len as usize - 1,
        g.data_offset as usize + 5,
        bytes.len() - 1,
    ] {
        let e = parse(&bytes[..cut]).unwrap_err().to_string();
        assert!(
            e.contains("truncated") || e.contains("not a GGUF"),
            "cut at {cut}: {e}"
        );
        // Without a known length the stream runs dry instead: still an error.
        if (cut as u64) < g.header_len {
            assert!(read_header(Cursor::new(&bytes[..cut]), None).is_err());
        }
    }
}

#[test]
fn flipped_header_bytes_give_clear_errors() {
    let bytes = small_file();
    let flip = |at: usize, v: u8| {
        let mut b = bytes.clone();
        b[at] = v;
        parse(&b).map(|_| ()).map_err(|e| e.to_string())
    };
    assert!(flip(0, b'X').unwrap_err().contains("not a GGUF file"));
    assert!(flip(4, 9).unwrap_err().contains("version 9"));
    assert!(flip(15, 0x40).unwrap_err().contains("tensor count"));
    assert!(flip(23, 0x40).unwrap_err().contains("metadata key count"));
    // The first key's length: a huge string is refused before it is allocated.
    assert!(flip(31, 0x7f).unwrap_err().contains("string of"));
    // Every single byte of the header flipped: an error or a valid parse, never a panic.
    let g = parse(&bytes).unwrap();
    for (at, b) in bytes.iter().enumerate().take(g.header_len as usize) {
        let _ = flip(at, b ^ 0xff);
    }
}

#[test]
fn a_flipped_byte_in_the_real_model_is_a_clear_error() {
    let mut bytes = std::fs::read(model_path()).unwrap();
    let at = bytes.windows(5).position(|w| w == b"llama").unwrap();
    bytes[at] ^= 0x20; // "Llama": no such architecture
    let g = parse(&bytes).unwrap();
    let e = Config::from_gguf(&g).unwrap_err().to_string();
    assert!(e.contains("\"Llama\""), "{e}");
}

#[test]
fn an_unknown_tensor_type_is_named() {
    let bytes = small_file();
    let g = parse(&bytes).unwrap();
    // The type id of the last tensor sits 12 bytes before the end of the header.
    let mut b = bytes.clone();
    let at = g.header_len as usize - 12;
    b[at] = 99;
    assert!(parse(&b)
        .unwrap_err()
        .to_string()
        .contains("unknown type id 99"));
}

#[test]
fn an_unsupported_architecture_is_a_clear_error() {
    let mut w = Writer::new();
    w.meta("general.architecture", Value::Str("mamba".into()));
    w.tensor("token_embd.weight", &[32, 4], GgmlType::F32, vec![0; 512])
        .unwrap();
    let g = parse(&w.to_bytes().unwrap()).unwrap();
    let e = Config::from_gguf(&g).unwrap_err().to_string();
    assert!(
        e.contains("unsupported model") && e.contains("mamba"),
        "{e}"
    );
}

#[test]
fn absurd_counts_are_refused_without_allocating() {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(u64::MAX.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    assert!(parse(&b)
        .unwrap_err()
        .to_string()
        .contains("over the limit"));
    // Unknown total length: an array that claims 60M strings fails when bytes run out.
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.push(b'k');
    b.extend(9u32.to_le_bytes());
    b.extend(8u32.to_le_bytes());
    b.extend(60_000_000u64.to_le_bytes());
    let e = read_header(Cursor::new(&b), None).unwrap_err().to_string();
    assert!(e.contains("truncated"), "{e}");
}

/// A quick in-suite fuzz: random byte edits of a valid file never panic, and what
/// still parses can be read tensor by tensor. (`fuzz/` has the cargo-fuzz target.)
#[test]
fn random_mutations_never_panic() {
    let bytes = small_file();
    let mut rng = Rng::new(1);
    for _ in 0..20_000 {
        let mut b = bytes.clone();
        for _ in 0..1 + rng.next_u64() % 4 {
            let at = (rng.next_u64() % b.len() as u64) as usize;
            b[at] = rng.next_u64() as u8;
        }
        if rng.next_u64().is_multiple_of(4) {
            b.truncate((rng.next_u64() % b.len() as u64) as usize);
        }
        if let Ok(g) = parse(&b) {
            let mut c = Cursor::new(&b);
            for t in &g.tensors {
                if let Ok(bytes) = g.read_tensor(&mut c, t) {
                    let _ = dequantize_tensor(t, &bytes);
                }
            }
        }
    }
}
