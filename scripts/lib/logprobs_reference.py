#!/usr/bin/env python3
"""llama.cpp's log-probabilities on the default model's greedy chat reply: the
reference Pippin's `logprobs` (OpenAI's `logprobs` / `top_logprobs`) are checked
against, natively and in the browser.

The chat prompt is rendered by jinja2 from the file's own template (not Pippin's
renderer) and tokenized by llama.cpp. llama.cpp (llama-cpp-python 0.3.36, F32 KV cache)
runs an f32 copy of the file (make_families.f32_copy): the same weights without the
8-bit rounding of activations in its quantized dot products, so the log-probabilities
compare tightly. Each step: the greedy token, its log-probability (log-softmax over the
whole vocabulary, in float64) and the five most likely tokens'.
usage: logprobs_reference.py MODEL OUT.json
"""
import json
import sys
from pathlib import Path

import jinja2
import numpy as np
import gguf

from make_families import f32_copy

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
N_GEN = 10


def prompt_text(path: Path) -> str:
    reader = gguf.GGUFReader(str(path))
    template = reader.fields["tokenizer.chat_template"].contents()
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    return env.from_string(template).render(messages=MESSAGES, add_generation_prompt=True)


def main(src: str, out: str) -> None:
    import llama_cpp
    path = Path(src)
    text = prompt_text(path)
    f32 = Path(out).with_suffix(".f32.tmp")
    f32_copy(path, f32)
    try:
        m = llama_cpp.Llama(model_path=str(f32), n_ctx=512, n_threads=2, logits_all=True,
                            type_k=0, type_v=0, verbose=False)
        ids = m.tokenize(text.encode(), add_bos=False, special=True)
        m.eval(ids)
        steps = []
        for _ in range(N_GEN):
            logits = np.array(m.scores[m.n_tokens - 1], dtype=np.float64)
            mx = logits.max()
            norm = mx + np.log(np.exp(logits - mx).sum())
            order = np.argsort(-logits, kind="stable")
            best = int(order[0])
            steps.append({"id": best, "logprob": float(logits[best] - norm),
                          "margin": float(logits[best] - logits[order[1]]),
                          "top5": [[int(i), float(logits[i] - norm)] for i in order[:5]]})
            if best == m.token_eos():
                break
            m.eval([best])
    finally:
        f32.unlink()
    tokens = [s["id"] for s in steps]
    Path(out).write_text(json.dumps({
        "reference": "llama.cpp via llama-cpp-python 0.3.36, CPU, F32 KV cache, on an f32 "
                     "copy of the file; the prompt rendered by jinja2 from its template",
        "messages": MESSAGES, "prompt_text": text, "prompt_token_ids": ids,
        "greedy_token_ids": tokens,
        "greedy_text": m.detokenize(tokens).decode("utf-8", "replace"),
        "steps": steps}, indent=1))
    print(f"logprobs_reference: {out}: {m.detokenize(tokens)!r}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:3])
