//! Weight formats: the GGML tensor types, their block layout, and CPU dequantization
//! (the ground truth the GPU kernels are tested against).

pub mod dequant;
pub mod encode;
pub mod gpu_layout;
pub mod kv;
pub mod palette;

/// Every GGML tensor type by its on-disk id, so a file's header parses whatever it
/// holds and an unsupported tensor is refused by name (`can_dequantize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Iq1M,
    BF16,
    Tq1_0,
    Tq2_0,
    Mxfp4,
}

/// (type, id, name, elements per block, bytes per block), as ggml defines them.
const TYPES: [(GgmlType, u32, &str, u64, u64); 32] = {
    use GgmlType::*;
    [
        (F32, 0, "F32", 1, 4),
        (F16, 1, "F16", 1, 2),
        (Q4_0, 2, "Q4_0", 32, 18),
        (Q4_1, 3, "Q4_1", 32, 20),
        (Q5_0, 6, "Q5_0", 32, 22),
        (Q5_1, 7, "Q5_1", 32, 24),
        (Q8_0, 8, "Q8_0", 32, 34),
        (Q8_1, 9, "Q8_1", 32, 36),
        (Q2K, 10, "Q2_K", 256, 84),
        (Q3K, 11, "Q3_K", 256, 110),
        (Q4K, 12, "Q4_K", 256, 144),
        (Q5K, 13, "Q5_K", 256, 176),
        (Q6K, 14, "Q6_K", 256, 210),
        (Q8K, 15, "Q8_K", 256, 292),
        (Iq2Xxs, 16, "IQ2_XXS", 256, 66),
        (Iq2Xs, 17, "IQ2_XS", 256, 74),
        (Iq3Xxs, 18, "IQ3_XXS", 256, 98),
        (Iq1S, 19, "IQ1_S", 256, 50),
        (Iq4Nl, 20, "IQ4_NL", 32, 18),
        (Iq3S, 21, "IQ3_S", 256, 110),
        (Iq2S, 22, "IQ2_S", 256, 82),
        (Iq4Xs, 23, "IQ4_XS", 256, 136),
        (I8, 24, "I8", 1, 1),
        (I16, 25, "I16", 1, 2),
        (I32, 26, "I32", 1, 4),
        (I64, 27, "I64", 1, 8),
        (F64, 28, "F64", 1, 8),
        (Iq1M, 29, "IQ1_M", 256, 56),
        (BF16, 30, "BF16", 1, 2),
        (Tq1_0, 34, "TQ1_0", 256, 54),
        (Tq2_0, 35, "TQ2_0", 256, 66),
        (Mxfp4, 39, "MXFP4", 32, 17),
    ]
};

/// The types whose values Pippin decodes (CPU reference and GPU kernels alike).
pub const DECODABLE: &str =
    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL";

impl GgmlType {
    fn entry(self) -> &'static (GgmlType, u32, &'static str, u64, u64) {
        // Every variant is in TYPES (a unit test checks it).
        TYPES.iter().find(|e| e.0 == self).unwrap_or(&TYPES[0])
    }

    pub fn from_id(id: u32) -> Option<Self> {
        TYPES.iter().find(|e| e.1 == id).map(|e| e.0)
    }

    pub fn id(self) -> u32 {
        self.entry().1
    }

    pub fn name(self) -> &'static str {
        self.entry().2
    }

    /// (elements per block, bytes per block).
    pub fn block(self) -> (u64, u64) {
        let e = self.entry();
        (e.3, e.4)
    }

    /// Bytes taken by `n` elements, or `None` when `n` is not a whole number of blocks
    /// or the size overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let (per, bytes) = self.block();
        if !n.is_multiple_of(per) {
            return None;
        }
        (n / per).checked_mul(bytes)
    }

    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16
                | BF16
                | Q8_0
                | Q4_0
                | Q4_1
                | Q5_0
                | Q5_1
                | Q2K
                | Q3K
                | Q4K
                | Q5K
                | Q6K
                | Iq4Nl
        )
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

pub use dequant::{dequantize, dequantize_into};
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_one_entry_and_ids_round_trip() {
        for (i, e) in TYPES.iter().enumerate() {
            assert_eq!(GgmlType::from_id(e.1), Some(e.0));
            assert_eq!(e.0.id(), e.1);
            assert_eq!(e.0.name(), e.2);
            assert!(TYPES[i + 1..].iter().all(|o| o.0 != e.0 && o.1 != e.1));
        }
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::from_id(1000), None);
    }
}
