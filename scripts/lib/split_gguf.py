#!/usr/bin/env python3
"""Splits a GGUF file into shards as llama.cpp's tools do, with gguf-py (PyPI `gguf`):
its GGUFWriter with `split_max_size` writes `OUT-00001-of-0000N.gguf`, ... (the first
with the model's metadata, each with split.no / split.count / split.tensors.count).
The test fixture of split-model loading: an independent writer, not Pippin's.

usage: split_gguf.py SRC OUT_PATH MAX_BYTES   (OUT_PATH: e.g. target/split/model.gguf)
"""
import sys
from pathlib import Path

import gguf


def main(src: str, out: str, max_bytes: int) -> None:
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(out, arch, split_max_size=max_bytes)
    for name, field in reader.fields.items():
        # The reader's own entries, and what the writer sets itself.
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file(Path(out))
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
