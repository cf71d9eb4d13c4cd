//! Phi-3 / Phi-3.5 / Phi-4-mini: llama's block with half-split RoPE, often on part of
//! each head (`rope.dimension_count`); Q|K|V in one matrix (`attn_qkv`) and gate|up in
//! another (`ffn_up`, 2 × feed_forward_length rows), read as the separate matrices
//! the forwards take (rows of the fused tensors). LongRoPE files carry per-frequency
//! divisors for contexts within the original length (`rope_factors_short`) and
//! beyond it (`rope_factors_long`), and an attention factor on cos and sin: Pippin
//! takes the short ones and keeps the context within the original length, as
//! llama.cpp does for such contexts. `attention.sliding_window` is not applied
//! (llama.cpp disables it for this family: the converters write it inconsistently).

use super::TensorSpec;
use super::{Family, GlobalTensor, Keys, LayerTensor};
use crate::error::Result;
use crate::model::config::{Config, RopeStyle};

pub struct Phi3;

impl Family for Phi3 {
    fn name(&self) -> &'static str {
        "phi3"
    }

    fn config(&self, k: &Keys, c: &mut Config) -> Result<()> {
        let long_rope = k.has_tensor(GlobalTensor::RopeFactorsShort);
        if let Some(original) = k.opt_int("rope.scaling.original_context_length")? {
            if long_rope {
                c.context_length = c.context_length.min(original);
            }
        }
        c.rope_style = RopeStyle::HalfSplit;
        c.rope_freq_factors = long_rope;
        c.rope_mscale = k.float("rope.scaling.attn_factor", 1.0)?;
        Ok(())
    }

    fn layer_spec(&self, t: LayerTensor, c: &Config, l: usize) -> TensorSpec {
        use LayerTensor::*;
        match t {
            Q => t.in_fused(Qkv, 0, c, l),
            K => t.in_fused(Qkv, c.q_dim(), c, l),
            V => t.in_fused(Qkv, c.q_dim() + c.kv_dim(), c, l),
            Gate => t.in_fused(GateUp, 0, c, l),
            Up => t.in_fused(GateUp, c.ffn_dim, c, l),
            _ => t.spec(c, l),
        }
    }

    fn global_spec(&self, t: GlobalTensor, c: &Config) -> TensorSpec {
        match t {
            GlobalTensor::RopeFreqs => GlobalTensor::RopeFactorsShort.spec(c),
            _ => t.spec(c),
        }
    }
}
