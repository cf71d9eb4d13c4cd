//! CPU dequantization against ggml's own (`dequantize_row_*` of llama.cpp's
//! libggml-base, called by `scripts/lib/ggml_dequant.py` on real blocks of the
//! requantized fixture files and of Gemma 3): bit for bit, every decodable type.

use crate::common;

use pippin::quant::{dequantize, GgmlType};

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn every_k_quant_and_legacy_type_decodes_exactly_as_ggml() {
    let path = common::models_file("fixtures/ggml-dequant.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut types = Vec::new();
    for c in json["cases"].as_array().unwrap() {
        let name = c["type"].as_str().unwrap();
        let ty = (0..64)
            .filter_map(GgmlType::from_id)
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("unknown type {name}"));
        let n = c["elements"].as_u64().unwrap() as usize;
        let blocks = unhex(c["blocks_hex"].as_str().unwrap());
        let want: Vec<u32> = unhex(c["f32_le_hex"].as_str().unwrap())
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(want.len(), n);
        let got: Vec<u32> = dequantize(ty, &blocks, n)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            first_diff.is_none(),
            "{name} ({} {}): value {} is {} here, {} in ggml",
            c["file"],
            c["tensor"],
            first_diff.unwrap_or(0),
            f32::from_bits(got[first_diff.unwrap_or(0)]),
            f32::from_bits(want[first_diff.unwrap_or(0)])
        );
        types.push(name.to_string());
    }
    // Every block format Pippin decodes has ggml's reference (the floats are exact).
    types.sort();
    let mut formats: Vec<String> = GgmlType::ALL
        .iter()
        .filter(|t| t.format().is_some())
        .map(|t| t.name().to_string())
        .collect();
    formats.sort();
    assert_eq!(types, formats);
}
