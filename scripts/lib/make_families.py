#!/usr/bin/env python3
"""Test files of model families no real checkpoint of which is available here, and
llama.cpp's outputs on them (the reference the `families_llama_cpp` tests compare with).

Each file is SmolLM2-135M's real tensors (quantized blocks copied as they are: GGML
blocks lie along rows, so reordering or concatenating rows keeps them valid) laid out
as the family lays out its checkpoints, plus the family's own parts with deterministic
values (biases, multipliers). gguf-py (PyPI `gguf`, llama.cpp's own package) writes
them; llama.cpp (llama-cpp-python 0.3.36) runs them:

  qwen2    Q/K rows in half-split (NEOX) order, Q/K/V biases
  llama-biases  llama with a bias on every projection (Q, K, V, O, gate, up, down),
           as llama.cpp reads them wherever a llama file has them
  granite  embedding, residual, attention and logit multipliers
  smollm3  every fourth layer without RoPE
  phi3     Q|K|V in one tensor (attn_qkv), gate|up in one (ffn_up), Q/K rows in
           half-split order, RoPE on 48 of 64 dimensions with LongRoPE factors
           (rope_factors_short within the original context, which the reference's
           is) and attention factor
  gemma2   Q/K rows in half-split order, post-attention and post-MLP norms, GELU,
           embeddings scaled by sqrt(hidden), attention scores and logits
           soft-capped (caps low enough to bend them), a 32-token window on even
           layers (the NLL text is longer: the window is crossed)
  lfm2     gated short-convolution blocks (B|C|x in one in_proj, 3 taps) on two of
           every three layers, GQA with QK-norm and half-split RoPE on the others
           (`attention.head_count_kv` per layer, 0 for a convolution), the final
           norm stored as token_embd_norm

Each file keeps SmolLM2's first LAYERS layers (every family's pattern repeats within
them: smollm3's NoPE layers 3 and 7, lfm2's attention on layers 2 and 5, gemma2's
alternating windows): the tests compare arithmetic, and lavapipe runs these files in a
quarter of the full depth's time.

llama.cpp runs an f32 copy of each file (its blocks dequantized by gguf-py): the same
weights, but without the 8-bit rounding of activations llama.cpp applies in quantized
dot products, which on these files moves single logits by up to 8 (checked: the f32
copy agrees with Pippin where the quantized file does not). So the reference can be
compared tightly. For each file: greedy tokens with each step's top 5 logits and
margin, and the mean NLL of a text. usage: make_families.py SRC OUT_DIR TEXT [FAMILY...]
"""
import json
import math
import sys
from pathlib import Path

import numpy as np
import gguf

PROMPTS = [
    ("capital", "The capital of France is"),
    ("recipe", "To make a cup of tea, first"),
]
N_GEN = 12
NLL_TOKENS = 96
LAYERS = 8


def unpermute(rows: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter permutes Llama's Q/K rows to pair adjacent dimensions;
    this undoes it (half-split order, as Qwen's checkpoints are)."""
    r = rows.shape[0]
    return (rows.reshape(n_head, r // n_head // 2, 2, *rows.shape[1:])
            .swapaxes(1, 2).reshape(rows.shape))


def wave(n: int, seed: float, amp: float) -> np.ndarray:
    """Deterministic values that are not all alike."""
    i = np.arange(n, dtype=np.float32)
    return (amp * np.sin(0.37 * i + seed) * np.cos(0.011 * i * seed + 1.0)).astype(np.float32)


def copy_fields(reader, writer, arch: str, skip=()):
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in skip:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        key = arch + name[len("llama"):] if name.startswith("llama.") else name
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)


def write(src: str, out: Path, arch: str, extra_kv, tensor_fn):
    reader = gguf.GGUFReader(src)
    n_head = int(reader.fields["llama.attention.head_count"].contents())
    n_kv = int(reader.fields["llama.attention.head_count_kv"].contents())
    writer = gguf.GGUFWriter(str(out), arch)
    skip = {f"llama.{key}" for key, _, _ in extra_kv} | {"llama.block_count"}
    copy_fields(reader, writer, arch, skip=skip)
    writer.add_key_value(f"{arch}.block_count", LAYERS, gguf.GGUFValueType.UINT32)
    for key, value, vtype in extra_kv:
        if isinstance(value, list):
            writer.add_array(f"{arch}.{key}", value)
        else:
            writer.add_key_value(f"{arch}.{key}", value, vtype)
    by_name = {t.name: t for t in reader.tensors}
    for t in reader.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= LAYERS:
            continue
        for name, data, dtype in tensor_fn(t, n_head, n_kv, by_name):
            writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=dtype)
    writer.write_header_to_file(out)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def same(t, n_head, n_kv, by_name):
    yield t.name, t.data, t.tensor_type


def half_split(t, n_head, n_kv):
    """The tensor's data, Q and K rows in the half-split RoPE order (unpermuted)."""
    if t.name.endswith("attn_q.weight") or t.name.endswith("attn_k.weight"):
        return unpermute(np.asarray(t.data), n_head if "attn_q" in t.name else n_kv)
    return t.data


def qwen2_tensors(t, n_head, n_kv, by_name):
    name, data = t.name, half_split(t, n_head, n_kv)
    yield name, data, t.tensor_type
    layer = name.split(".")[1] if name.startswith("blk.") else None
    for p, amp in (("q", 0.5), ("k", 0.8), ("v", 0.1)):
        if name.endswith(f"attn_{p}.weight"):
            rows = t.data.shape[0]
            yield f"blk.{layer}.attn_{p}.bias", wave(rows, int(layer) + ord(p), amp), \
                gguf.GGMLQuantizationType.F32


BIASES = (("attn_q", 0.5), ("attn_k", 0.8), ("attn_v", 0.1), ("attn_output", 0.05),
          ("ffn_gate", 0.3), ("ffn_up", 0.2), ("ffn_down", 0.05))


def biased_tensors(t, n_head, n_kv, by_name):
    yield t.name, t.data, t.tensor_type
    if not t.name.startswith("blk."):
        return
    layer = int(t.name.split(".")[1])
    for i, (p, amp) in enumerate(BIASES):
        if t.name.endswith(f"{p}.weight"):
            rows = t.data.shape[0]
            yield f"blk.{layer}.{p}.bias", wave(rows, layer + i + 0.5, amp), \
                gguf.GGMLQuantizationType.F32


def gemma2_tensors(t, n_head, n_kv, by_name):
    name, data = t.name, half_split(t, n_head, n_kv)
    yield name, data, t.tensor_type
    if name.startswith("blk.") and name.endswith("attn_norm.weight"):
        layer, width = int(name.split(".")[1]), t.data.shape[0]
        # Norm weights (stored as Gemma's files store them, 1 + w) around 3, so that
        # each block's output keeps a share of a stream the sqrt(hidden)-scaled
        # embeddings dominate. SmolLM2 never learnt these norms: its text here is not
        # sensible (NLL ~8.5); what the test compares is the arithmetic.
        for norm, seed in (("post_attention_norm", 1.0), ("post_ffw_norm", 2.0)):
            yield f"blk.{layer}.{norm}.weight", 3.0 + wave(width, layer + seed, 0.75), \
                gguf.GGMLQuantizationType.F32


PHI3_ROPE_DIMS = 48


def phi3_tensors(t, n_head, n_kv, by_name):
    """Rows of the same GGML type concatenate into a valid tensor of that type."""
    name = t.name
    rows = lambda n, heads=None: (unpermute(np.asarray(by_name[n].data), heads)
                                  if heads else np.asarray(by_name[n].data))
    if name.endswith("attn_q.weight"):
        blk = name[:-len("attn_q.weight")]
        parts = [rows(blk + "attn_q.weight", n_head), rows(blk + "attn_k.weight", n_kv),
                 rows(blk + "attn_v.weight")]
        yield blk + "attn_qkv.weight", np.concatenate(parts), t.tensor_type
    elif name.endswith("ffn_gate.weight"):
        blk = name[:-len("ffn_gate.weight")]
        parts = [rows(blk + "ffn_gate.weight"), rows(blk + "ffn_up.weight")]
        yield blk + "ffn_up.weight", np.concatenate(parts), t.tensor_type
    elif name.endswith(("attn_k.weight", "attn_v.weight", "ffn_up.weight")):
        return
    else:
        yield name, t.data, t.tensor_type
    if name == "output_norm.weight":
        half = PHI3_ROPE_DIMS // 2
        for factors, seed in (("short", 1.0), ("long", 2.0)):
            yield f"rope_factors_{factors}.weight", 1.0 + np.abs(wave(half, seed, 2.0)), \
                gguf.GGMLQuantizationType.F32


LFM2_TAPS = 3


def lfm2_attends(layer: int) -> bool:
    return layer % 3 == 2


def lfm2_tensors(t, n_head, n_kv, by_name):
    """A convolution layer's in_proj is B|C|x, each hidden x hidden, made of rows of
    the layer's Q4_1 matrices: B = attn_q, C = attn_k|attn_v|ffn_gate[:192],
    x = ffn_gate[192:768]; out_proj = attn_output."""
    name, f32 = t.name, gguf.GGMLQuantizationType.F32
    if name == "output_norm.weight":
        yield "token_embd_norm.weight", t.data, t.tensor_type
        return
    if not name.startswith("blk."):
        yield name, t.data, t.tensor_type
        return
    layer = int(name.split(".")[1])
    blk = f"blk.{layer}."
    part = name[len(blk):]
    rows = lambda n: np.asarray(by_name[blk + n].data)
    if lfm2_attends(layer):
        if part in ("attn_q.weight", "attn_k.weight"):
            heads = n_head if part == "attn_q.weight" else n_kv
            yield name, unpermute(np.asarray(t.data), heads), t.tensor_type
        else:
            yield name, t.data, t.tensor_type
        if part == "attn_norm.weight":
            hd = t.data.shape[0] // n_head
            yield blk + "attn_q_norm.weight", 1.0 + wave(hd, layer + 1.0, 0.3), f32
            yield blk + "attn_k_norm.weight", 1.0 + wave(hd, layer + 2.0, 0.3), f32
        return
    if part == "attn_q.weight":
        hidden = t.data.shape[0]
        kv_rows = rows("attn_k.weight").shape[0]
        gate = rows("ffn_gate.weight")
        c = np.concatenate([rows("attn_k.weight"), rows("attn_v.weight"), gate[:hidden - 2 * kv_rows]])
        x = gate[hidden - 2 * kv_rows:2 * hidden - 2 * kv_rows]
        yield blk + "shortconv.in_proj.weight", np.concatenate([rows("attn_q.weight"), c, x]), \
            t.tensor_type
        taps = wave(hidden * LFM2_TAPS, layer + 0.5, 0.15).reshape(hidden, LFM2_TAPS)
        yield blk + "shortconv.conv.weight", taps, f32
    elif part == "attn_output.weight":
        yield blk + "shortconv.out_proj.weight", t.data, t.tensor_type
    elif part not in ("attn_k.weight", "attn_v.weight"):
        yield name, t.data, t.tensor_type


F32 = gguf.GGUFValueType.FLOAT32
U32 = gguf.GGUFValueType.UINT32
# name: (architecture, keys, tensors); a name is its architecture's unless given.
FAMILIES = {
    "qwen2": ([], qwen2_tensors),
    "llama-biases": ("llama", [], biased_tensors),
    "granite": ([("embedding_scale", 2.0, F32), ("residual_scale", 0.7, F32),
                 ("attention.scale", 0.14, F32), ("logit_scale", 1.4, F32)], same),
    "smollm3": ([], same),
    "phi3": ([("rope.dimension_count", PHI3_ROPE_DIMS, U32),
              ("rope.scaling.attn_factor", 1.15, F32),
              ("rope.scaling.original_context_length", 4096, U32)], phi3_tensors),
    "gemma2": ([("attn_logit_softcapping", 4.0, F32), ("final_logit_softcapping", 8.0, F32),
                ("attention.sliding_window", 32, U32)], gemma2_tensors),
    "lfm2": ([("shortconv.l_cache", LFM2_TAPS, U32),
              ("attention.head_count_kv", [3 if lfm2_attends(l) else 0
                                           for l in range(LAYERS)], None)],
             lfm2_tensors),
}


def f32_copy(src: Path, out: Path) -> None:
    """The file with every tensor dequantized to f32 (gguf-py's dequantizer)."""
    from gguf.quants import dequantize
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(out), arch)
    copy_fields(reader, writer, arch)
    for t in reader.tensors:
        writer.add_tensor(t.name, dequantize(t.data, t.tensor_type).astype(np.float32))
    writer.write_header_to_file(out)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def reference(path: Path, text: str) -> dict:
    import llama_cpp
    f32 = path.with_suffix(".f32.tmp")
    f32_copy(path, f32)
    try:
        return run_reference(llama_cpp.Llama(
            model_path=str(f32), n_ctx=512, n_threads=2, logits_all=True,
            type_k=0, type_v=0, verbose=False), text)  # F32 KV cache
    finally:
        f32.unlink()


def run_reference(m, text: str) -> dict:
    results = []
    for name, prompt in PROMPTS:
        ids = m.tokenize(prompt.encode(), add_bos=False, special=False)
        m.reset()
        m.eval(ids)
        steps, tokens, top5 = [], [], None
        for _ in range(N_GEN):
            logits = np.array(m.scores[m.n_tokens - 1], dtype=np.float32)
            order = np.argsort(-logits, kind="stable")
            if top5 is None:
                top5 = [[int(i), float(logits[i])] for i in order[:5]]
            best, second = int(order[0]), int(order[1])
            steps.append({"id": best, "logit": float(logits[best]), "runner_up_id": second,
                          "runner_up_logit": float(logits[second]),
                          "margin": float(logits[best] - logits[second]),
                          "top5": [[int(i), float(logits[i])] for i in order[:5]]})
            tokens.append(best)
            m.eval([best])
        results.append({"name": name, "prompt": prompt, "prompt_token_ids": ids,
                        "greedy_token_ids": tokens, "top5_first_position": top5,
                        "greedy_text": m.detokenize(tokens).decode("utf-8", "replace"),
                        "steps": steps})
    ids = m.tokenize(text.encode(), add_bos=False, special=False)[:NLL_TOKENS]
    m.reset()
    m.eval(ids)
    nll = 0.0
    for i in range(len(ids) - 1):
        l = np.array(m.scores[i], dtype=np.float64)
        mx = l.max()
        nll += mx + math.log(np.exp(l - mx).sum()) - l[ids[i + 1]]
    return {"reference": "llama.cpp via llama-cpp-python 0.3.36, CPU, 2 threads, F32 KV "
                         "cache, on an f32 copy of the file (no 8-bit activations)",
            "results": results,
            "nll": {"token_ids": ids, "mean": nll / (len(ids) - 1)}}


def main(src: str, out_dir: str, text_path: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = Path(text_path).read_text()
    only = set(sys.argv[4:])
    for name, family in FAMILIES.items():
        if only and name not in only:
            continue
        arch, kv, tensors = family if len(family) == 3 else (name, *family)
        path = out / f"{name}.gguf"
        write(src, path, arch, kv, tensors)
        ref = reference(path, text)
        (out / f"{name}-reference.json").write_text(json.dumps(ref, indent=1))
        print(f"make_families: {path}: {ref['results'][0]['greedy_text']!r}, "
              f"NLL {ref['nll']['mean']:.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:4])
