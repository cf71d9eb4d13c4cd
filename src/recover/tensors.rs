//! What every candle piece of recovery shares: candle's errors as Pippin's, a custom
//! op's input as one slice, and `x · Wᵀ` as one 2-D product. A leaf: the forward
//! (`net`), the adapters (`lora`), the refit and QAT ops and the loss all use it.

use crate::error::Error;
use candle_core::{CpuStorage, Layout, Tensor};

/// candle's results.
pub(crate) type R<T> = std::result::Result<T, candle_core::Error>;

/// candle's errors are internal to training: they become `Error::Internal` with
/// candle's message (shapes are ours, so one means a bug here).
pub(crate) fn ce(e: candle_core::Error) -> Error {
    Error::Internal(format!("recover: {e}"))
}

/// A custom op's f32 input as one slice (the ops here take contiguous tensors).
pub(crate) fn contiguous_f32<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> R<&'a [f32]> {
    let (a, b) = l
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg(format!("{op}: strided input")))?;
    Ok(&s.as_slice::<f32>()?[a..b])
}

/// `x · Wᵀ` over the last dimension of `x`, as one 2-D product: candle's batched
/// `broadcast_matmul` copies a transposed right-hand side for every batch (the output
/// head: 28 M floats a call).
pub(crate) fn matmul_t(x: &Tensor, w: &Tensor) -> R<Tensor> {
    let dims = x.dims();
    let mut shape = dims.to_vec();
    *shape.last_mut().unwrap_or(&mut 0) = w.dim(0)?;
    x.reshape(((), dims[dims.len() - 1]))?
        .matmul(&w.t()?)?
        .reshape(shape)
}
