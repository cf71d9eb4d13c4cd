#!/usr/bin/env python3
"""ggml's own dequantization of real blocks, the reference for Pippin's CPU decoder.

  python3 scripts/lib/ggml_dequant.py OUT.json FILE.gguf [FILE.gguf ...]

For each tensor type in the files (the first tensor of each type, its first 32 rows
or all of it), calls ggml's `dequantize_row_<type>` from the libggml-base that
llama-cpp-python ships, through ctypes, and writes the blocks and the result as f32
bit patterns (hex) with where the bytes came from. A decodable type no file holds
(SmolLM2's requantized files have no Q2_K tensor: its rows fall back to others) is
made by ggml's own quantizer (`ggml_quantize_chunk`) from a fixed ramp. Pippin's
test decodes the same bytes and must match bit for bit.
"""
import ctypes, json, os, struct, sys
import llama_cpp

# GGML type id -> (name, elements per block, bytes per block, ggml function suffix)
TYPES = {
    2: ("Q4_0", 32, 18, "q4_0"), 3: ("Q4_1", 32, 20, "q4_1"), 6: ("Q5_0", 32, 22, "q5_0"),
    7: ("Q5_1", 32, 24, "q5_1"), 8: ("Q8_0", 32, 34, "q8_0"), 10: ("Q2_K", 256, 84, "q2_K"),
    11: ("Q3_K", 256, 110, "q3_K"), 12: ("Q4_K", 256, 144, "q4_K"), 13: ("Q5_K", 256, 176, "q5_K"),
    14: ("Q6_K", 256, 210, "q6_K"), 20: ("IQ4_NL", 32, 18, "iq4_nl"),
    39: ("MXFP4", 32, 17, "mxfp4"),
}

def header(path):
    f = open(path, "rb")
    rd = lambda fmt: struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
    rs = lambda: f.read(rd("Q")).decode("utf-8", "replace")
    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    def value(t):
        if t == 8:
            return rs()
        if t == 9:
            et, n = rd("I"), rd("Q")
            return [value(et) for _ in range(n)]
        return rd(sizes[t])
    assert f.read(4) == b"GGUF", path
    rd("I")
    n_tensors, n_kv = rd("Q"), rd("Q")
    md = {}
    for _ in range(n_kv):
        k = rs()
        md[k] = value(rd("I"))
    tensors = []
    for _ in range(n_tensors):
        name = rs()
        dims = [rd("Q") for _ in range(rd("I"))]
        tensors.append((name, dims, rd("I"), rd("Q")))
    align = md.get("general.alignment", 32)
    data = (f.tell() + align - 1) // align * align
    return f, tensors, data

def case(lib, source, name, ty, raw, n):
    tname, per, size, fn = TYPES[ty]
    buf = (ctypes.c_float * n)()
    getattr(lib, "dequantize_row_" + fn)(ctypes.c_char_p(raw), buf, ctypes.c_int64(n))
    return {"file": source, "tensor": name, "type": tname, "elements": n,
            "blocks_hex": raw.hex(), "f32_le_hex": struct.pack("<%df" % n, *buf).hex()}

def quantized_by_ggml(lib, ty, rows=8, cols=512):
    """`rows` × `cols` values of a fixed ramp, quantized by ggml to type `ty`."""
    n = rows * cols
    src = (ctypes.c_float * n)(*[((i * 37) % 101 - 50) / 25.0 + 0.01 * (i % 7) for i in range(n)])
    _, per, size, _ = TYPES[ty]
    dst = ctypes.create_string_buffer(n // per * size)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    got = lib.ggml_quantize_chunk(ctypes.c_int(ty), src, dst, ctypes.c_int64(0),
                                  ctypes.c_int64(rows), ctypes.c_int64(cols), None)
    assert got == n // per * size, (ty, got)
    return dst.raw, n

def main():
    out, files = sys.argv[1], sys.argv[2:]
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    cases, seen = [], set()
    for path in files:
        f, tensors, data = header(path)
        for name, dims, ty, off in tensors:
            if ty not in TYPES or ty in seen:
                continue
            seen.add(ty)
            _, per, size, _ = TYPES[ty]
            rows = min(32, 1 if len(dims) < 2 else dims[1])
            n = dims[0] * rows
            f.seek(data + off)
            raw = f.read(n // per * size)
            cases.append(case(lib, os.path.basename(path), name, ty, raw, n))
    for ty in sorted(set(TYPES) - seen):
        raw, n = quantized_by_ggml(lib, ty)
        cases.append(case(lib, "ggml_quantize_chunk", "ramp", ty, raw, n))
    json.dump({"about": "ggml's dequantize_row_* (libggml-base of llama-cpp-python "
               + llama_cpp.__version__ + ") on the first rows of one tensor per type",
               "cases": cases}, open(out, "w"))
    print(f"ggml_dequant: {len(cases)} types -> {out}: " + ", ".join(c["type"] for c in cases))

main()
