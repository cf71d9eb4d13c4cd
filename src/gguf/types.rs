//! The GGML tensor types a GGUF file may name, as ggml defines them: each one's id,
//! name and block shape in one table (the enum and every lookup are generated from
//! it). Whether Pippin decodes one is whether it has a block format of its own
//! (`pippin_cpu_kernels::blocks32::Format`) or is a float.

use pippin_cpu_kernels::blocks32::Format;

/// Every GGML tensor type by its on-disk id, so a file's header parses whatever it
/// holds and an unsupported tensor is refused by name (`can_dequantize`).
macro_rules! ggml_types {
    ($($v:ident = $id:literal, $name:literal, $per:literal, $bytes:literal;)*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum GgmlType {
            $($v,)*
        }

        impl GgmlType {
            /// Every type, in ggml's id order.
            pub const ALL: &'static [GgmlType] = &[$(GgmlType::$v,)*];

            /// (id, name, elements per block, bytes per block).
            const fn entry(self) -> (u32, &'static str, u64, u64) {
                match self {
                    $(GgmlType::$v => ($id, $name, $per, $bytes),)*
                }
            }
        }
    };
}

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 18;
    Q4_1 = 3, "Q4_1", 32, 20;
    Q5_0 = 6, "Q5_0", 32, 22;
    Q5_1 = 7, "Q5_1", 32, 24;
    Q8_0 = 8, "Q8_0", 32, 34;
    Q8_1 = 9, "Q8_1", 32, 36;
    Q2K = 10, "Q2_K", 256, 84;
    Q3K = 11, "Q3_K", 256, 110;
    Q4K = 12, "Q4_K", 256, 144;
    Q5K = 13, "Q5_K", 256, 176;
    Q6K = 14, "Q6_K", 256, 210;
    Q8K = 15, "Q8_K", 256, 292;
    Iq2Xxs = 16, "IQ2_XXS", 256, 66;
    Iq2Xs = 17, "IQ2_XS", 256, 74;
    Iq3Xxs = 18, "IQ3_XXS", 256, 98;
    Iq1S = 19, "IQ1_S", 256, 50;
    Iq4Nl = 20, "IQ4_NL", 32, 18;
    Iq3S = 21, "IQ3_S", 256, 110;
    Iq2S = 22, "IQ2_S", 256, 82;
    Iq4Xs = 23, "IQ4_XS", 256, 136;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    Iq1M = 29, "IQ1_M", 256, 56;
    BF16 = 30, "BF16", 1, 2;
    Tq1_0 = 34, "TQ1_0", 256, 54;
    Tq2_0 = 35, "TQ2_0", 256, 66;
    Mxfp4 = 39, "MXFP4", 32, 17;
}

impl GgmlType {
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.iter().copied().find(|t| t.id() == id)
    }

    pub fn id(self) -> u32 {
        self.entry().0
    }

    pub fn name(self) -> &'static str {
        self.entry().1
    }

    /// (elements per block, bytes per block).
    pub fn block(self) -> (u64, u64) {
        let e = self.entry();
        (e.2, e.3)
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

    /// Whether Pippin decodes its values (CPU reference and GPU kernels alike): the
    /// floats, and the block formats `Format` names (each a type of its own there).
    pub fn can_dequantize(self) -> bool {
        matches!(self, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) || self.format().is_some()
    }

    /// Its block format, where Pippin has one (`pippin_cpu_kernels::blocks32`).
    pub fn format(self) -> Option<Format> {
        Format::from_ggml(self.id())
    }

    /// The names of the types Pippin decodes, for messages that list them.
    pub fn decodable() -> String {
        let names: Vec<&str> = Self::ALL
            .iter()
            .filter(|t| t.can_dequantize())
            .map(|t| t.name())
            .collect();
        names.join(", ")
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_are_unique_and_round_trip() {
        for (i, t) in GgmlType::ALL.iter().enumerate() {
            assert_eq!(GgmlType::from_id(t.id()), Some(*t));
            let rest = &GgmlType::ALL[i + 1..];
            assert!(rest
                .iter()
                .all(|o| o.id() != t.id() && o.name() != t.name()));
        }
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::from_id(1000), None);
        assert!(GgmlType::decodable().starts_with("F32, F16, Q4_0"));
        // Each block format's own size is the table's.
        for f in Format::ALL {
            let t = GgmlType::from_id(f.ggml_id()).unwrap();
            let (per, bytes) = f.block();
            assert_eq!(t.block(), (per as u64, bytes as u64), "{t}");
            assert_eq!(t.name(), f.name());
        }
    }
}
