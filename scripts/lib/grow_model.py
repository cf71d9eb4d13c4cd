#!/usr/bin/env python3
"""A ~3B-parameter model of AFM-on-device's matrix shapes that computes what a small
real model computes: SmolLM2-135M's weights placed inside zero-padded 3B-sized
matrices, so that a speculative-decoding benchmark has a target that costs what a 3B
model costs and writes real text, and a draft of its vocabulary (the 135M model it
was grown from) — no such pair can be downloaded here.

Shapes: hidden 3072 (48 heads of 64, 16 KV heads: AFM's 24 × 128 and 8 × 128 have the
same matrices and KV bytes), FFN 8192, the source's 30 layers and tied embedding.
Why it computes the source's function (exactly, before quantization):
- every write into the residual stream (embedding, attention output, FFN down) is zero
  beyond the source's 576 dimensions, so the hidden state is too;
- RMSNorm then averages over 3072 dimensions instead of 576: with r = 576/3072,
  rms' = sqrt(r·(m + ε)) when ε' = r·ε, so norm weights scaled by sqrt(r) give the
  source's normalized values exactly;
- query heads 0..8 and KV heads 0..2 are the source's (GQA groups of 3 in both); the
  other heads have zero Q, K and V, so they attend uniformly to zero values and the
  output projection's columns for them are zero anyway;
- FFN rows beyond 1536 have zero gate and up (silu(0)·0 = 0) and zero down columns.
The grown model is written as F16, checked against the source with llama.cpp (its
next-token logits on a prompt within f16's rounding of the source's, dequantized to
f32), then quantized to Q4_K_M by llama.cpp's quantizer (llama-cpp-python 0.3.36).
usage: grow_model.py SRC.gguf WORK_DIR OUT.gguf
"""
import sys
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import dequantize
from make_families import copy_fields, f32_copy

HIDDEN, HEADS, KV_HEADS, FFN = 3072, 48, 16, 8192
SHAPE_KEYS = {
    "llama.embedding_length": HIDDEN,
    "llama.feed_forward_length": FFN,
    "llama.attention.head_count": HEADS,
    "llama.attention.head_count_kv": KV_HEADS,
}


def padded(a: np.ndarray, shape) -> np.ndarray:
    out = np.zeros(shape, dtype=np.float32)
    out[tuple(slice(0, n) for n in a.shape)] = a
    return out


def target_shape(name: str, src_shape, head_dim: int):
    """numpy shape (rows, cols) of a grown tensor; None for a norm."""
    rows, cols = src_shape
    kv = KV_HEADS * head_dim
    for part, shape in (
        ("token_embd", (rows, HIDDEN)),
        ("attn_q", (HIDDEN, HIDDEN)),
        ("attn_k", (kv, HIDDEN)),
        ("attn_v", (kv, HIDDEN)),
        ("attn_output", (HIDDEN, HIDDEN)),
        ("ffn_gate", (FFN, HIDDEN)),
        ("ffn_up", (FFN, HIDDEN)),
        ("ffn_down", (HIDDEN, FFN)),
    ):
        if part in name:
            return shape
    raise SystemExit(f"grow_model: no rule for {name}")


def grow(src: str, out: str) -> None:
    reader = gguf.GGUFReader(src)
    f = reader.fields
    hidden = int(f["llama.embedding_length"].contents())
    heads = int(f["llama.attention.head_count"].contents())
    kv_heads = int(f["llama.attention.head_count_kv"].contents())
    head_dim = hidden // heads
    eps = float(f["llama.attention.layer_norm_rms_epsilon"].contents())
    if HIDDEN // HEADS != head_dim or heads // kv_heads != HEADS // KV_HEADS:
        raise SystemExit("grow_model: the source needs heads of 64 in GQA groups of 3")
    r = hidden / HIDDEN
    writer = gguf.GGUFWriter(out, "llama")
    eps_key = "llama.attention.layer_norm_rms_epsilon"
    skip = {*SHAPE_KEYS, eps_key, "general.file_type", "general.name"}
    copy_fields(reader, writer, "llama", skip=skip)
    name = f["general.name"].contents() if "general.name" in f else "model"
    writer.add_key_value("general.name", f"{name} grown to 3B shape (zero-padded)",
                         gguf.GGUFValueType.STRING)
    for key, value in SHAPE_KEYS.items():
        writer.add_key_value(key, value, gguf.GGUFValueType.UINT32)
    writer.add_key_value(eps_key, eps * r,
                         gguf.GGUFValueType.FLOAT32)
    writer.add_key_value("general.file_type", 1, gguf.GGUFValueType.UINT32)  # F16
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        if w.ndim == 1:  # an RMSNorm weight
            grown = np.full(HIDDEN, np.sqrt(r), dtype=np.float32)
            grown[: w.shape[0]] = w * np.sqrt(r)
            writer.add_tensor(t.name, grown)
        else:
            shape = target_shape(t.name, w.shape, head_dim)
            writer.add_tensor(t.name, padded(w, shape).astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


PROMPT = "The capital of France is"
MAX_LOGIT_GAP = 0.1  # measured 0.025: f16 storage of the grown weights


def last_logits(path: str) -> np.ndarray:
    import llama_cpp
    m = llama_cpp.Llama(model_path=path, n_ctx=64, n_threads=2, logits_all=True,
                        verbose=False)
    tokens = m.tokenize(PROMPT.encode())
    m.eval(tokens)
    return np.array(m.scores[len(tokens) - 1])


def check(src: str, grown: str, work: Path) -> None:
    """The grown F16 file's logits against the source's own weights in f32."""
    plain = work / "source.f32.gguf"
    f32_copy(Path(src), plain)
    gap = float(np.abs(last_logits(str(plain)) - last_logits(grown)).max())
    print(f"grow_model: largest logit gap to the source on {PROMPT!r}: {gap:.4f}")
    if gap > MAX_LOGIT_GAP:
        raise SystemExit("grow_model: the grown model does not compute the source's function")


def quantize(f16: str, out: str) -> None:
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    p.nthread = 2
    if llama_cpp.llama_model_quantize(f16.encode(), out.encode(), p) != 0:
        raise SystemExit("grow_model: llama.cpp's quantizer failed")


def main(src: str, work: str, out: str) -> None:
    f16 = str(Path(work) / "grown.f16.gguf")
    grow(src, f16)
    check(src, f16, Path(work))
    quantize(f16, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
