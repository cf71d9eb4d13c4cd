//! The seven linear projections of a layer, by name: what LoRA adapters target, what
//! the converter palettizes, what the GPU forward applies — instead of slot numbers.
//! (Their shapes in a model are `Config`'s: `Proj::shape` is in `config.rs`.)

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proj {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Proj {
    pub const ALL: [Proj; 7] = [
        Proj::Q,
        Proj::K,
        Proj::V,
        Proj::O,
        Proj::Gate,
        Proj::Up,
        Proj::Down,
    ];

    /// Position in `ALL` (and in a `PerProj`).
    pub fn index(self) -> usize {
        self as usize
    }

    /// Hugging Face's module name (PEFT's `target_modules`).
    pub fn hf_name(self) -> &'static str {
        Self::HF_NAMES[self.index()]
    }

    /// The seven linear layers of a block in Hugging Face's names (`ALL` order): what
    /// PEFT files call them.
    pub const HF_NAMES: [&'static str; 7] = [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ];

    /// Whether it is one of the attention block's (PEFT's `self_attn`).
    pub fn is_attention(self) -> bool {
        self.index() < 4
    }
}

/// One `T` per projection, indexed by `Proj`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerProj<T>(pub [T; 7]);

impl<T> PerProj<T> {
    pub fn iter(&self) -> impl Iterator<Item = (Proj, &T)> {
        Proj::ALL.into_iter().zip(self.0.iter())
    }

    /// Each projection's `f(p)`, or the first error.
    pub fn try_from_fn<E>(mut f: impl FnMut(Proj) -> Result<T, E>) -> Result<PerProj<T>, E> {
        let mut v = Vec::with_capacity(7);
        for p in Proj::ALL {
            v.push(f(p)?);
        }
        Ok(seven(v))
    }

    /// Each member through `f`, or the first error.
    pub fn try_map<U, E>(
        self,
        mut f: impl FnMut(Proj, T) -> Result<U, E>,
    ) -> Result<PerProj<U>, E> {
        let mut v = Vec::with_capacity(7);
        for (p, t) in Proj::ALL.into_iter().zip(self.0) {
            v.push(f(p, t)?);
        }
        Ok(seven(v))
    }
}

fn seven<U>(v: Vec<U>) -> PerProj<U> {
    match v.try_into() {
        Ok(a) => PerProj(a),
        Err(_) => unreachable!("one value for each of Proj::ALL"),
    }
}

impl<T> std::ops::Index<Proj> for PerProj<T> {
    type Output = T;
    fn index(&self, p: Proj) -> &T {
        &self.0[p.index()]
    }
}

impl<T> std::ops::IndexMut<Proj> for PerProj<T> {
    fn index_mut(&mut self, p: Proj) -> &mut T {
        &mut self.0[p.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_order_of_all() {
        for (i, p) in Proj::ALL.into_iter().enumerate() {
            assert_eq!(p.index(), i);
        }
        assert!(Proj::V.is_attention() && !Proj::Gate.is_attention());
    }
}
