//! LiquidAI LFM2: a hybrid of gated short-convolution layers and GQA layers, each
//! followed by llama's SwiGLU MLP. `attention.head_count_kv` is per layer: 0 marks a
//! convolution layer, whose `shortconv.in_proj` gives B, C and x (read as Q, K, V),
//! y = C ⊙ conv(B ⊙ x) over the last `shortconv.l_cache` positions (the state a
//! session keeps instead of keys and values), and `shortconv.out_proj` (read as O).
//! Attention layers have QK-norm and half-split RoPE, and slide when the file gives
//! `attention.sliding_window`. The final norm is stored as `token_embd_norm`.

use super::TensorSpec;
use super::{Family, GlobalTensor, Keys, LayerTensor};
use crate::error::{Error, Result};
use crate::model::config::{Config, RopeStyle, MAX_CONV_MODEL_LAYERS};

pub struct Lfm2;

impl Family for Lfm2 {
    fn name(&self) -> &'static str {
        "lfm2"
    }

    fn config(&self, k: &Keys, c: &mut Config) -> Result<()> {
        let kv = k
            .per_layer("attention.head_count_kv", c.n_layers)?
            .ok_or_else(|| {
                Error::gguf(format!("{} is missing", k.key("attention.head_count_kv")))
            })?;
        if kv.len() > MAX_CONV_MODEL_LAYERS {
            return Err(Error::unsupported(format!(
                "{} layers (Pippin's LFM2 takes up to {MAX_CONV_MODEL_LAYERS})",
                kv.len()
            )));
        }
        let conv_layers = (0..kv.len())
            .filter(|&l| kv[l] == 0)
            .fold(0u64, |m, l| m | 1 << l);
        if conv_layers != 0 {
            c.conv_taps = k.int("shortconv.l_cache")?;
        }
        c.conv_layers = conv_layers;
        c.rope_style = RopeStyle::HalfSplit;
        c.qk_norm = true;
        c.sliding_window = k.opt_int("attention.sliding_window")?.unwrap_or(0);
        Ok(())
    }

    fn layer_tensors(&self, c: &Config, l: usize) -> Vec<LayerTensor> {
        use LayerTensor::*;
        if !c.is_conv(l) {
            return super::tensors::standard_layer(c);
        }
        vec![AttnNorm, Q, K, V, O, ConvTaps, FfnNorm, Gate, Up, Down]
    }

    fn layer_spec(&self, t: LayerTensor, c: &Config, l: usize) -> TensorSpec {
        use LayerTensor::*;
        if !c.is_conv(l) {
            return t.spec(c, l);
        }
        let h = c.hidden;
        let part =
            |row0| TensorSpec::matrix(t.name(l), h, h).in_rows_of(ConvInProj.name(l), row0, 3 * h);
        match t {
            Q => part(0),
            K => part(h),
            V => part(2 * h),
            O => ConvOutProj.spec(c, l),
            _ => t.spec(c, l),
        }
    }

    fn global_spec(&self, t: GlobalTensor, c: &Config) -> TensorSpec {
        match t {
            GlobalTensor::OutputNorm => {
                TensorSpec::vector(super::tensors::LFM2_OUTPUT_NORM.to_string(), c.hidden)
            }
            _ => t.spec(c),
        }
    }
}
