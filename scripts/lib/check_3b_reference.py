"""llama.cpp's greedy tokens for a GGUF file (llama-cpp-python, as the fixtures use):
prints one JSON object {prompt: {"ids": [...], "tokens": [...], "text": "..."}}."""
import json
import sys

import llama_cpp

path, n = sys.argv[1], int(sys.argv[2])
prompts = sys.argv[3:]
m = llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=2, verbose=False)
out = {}
for prompt in prompts:
    ids = m.tokenize(prompt.encode(), add_bos=False, special=False)
    m.reset()
    tokens = []
    for t in m.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0):
        tokens.append(t)
        if len(tokens) >= n:
            break
    text = m.detokenize(tokens).decode("utf-8", errors="replace")
    out[prompt] = {"ids": ids, "tokens": tokens, "text": text}
print(json.dumps(out))
