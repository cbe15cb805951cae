"""Independent decoder for ctitan checkpoints (formats v1, v2 and v3).

Assembles every tensor of a step folder from its saved pieces with numpy,
from metadata.json's index alone (not ctitan's loader), and prints per
tensor the global shape, dtype and the zlib CRC-32 of the whole tensor's
row-major bytes, as JSON. The C++ tests compare what ctitan's loader
assembles against this.

    .venv/bin/python tests/peer/decode_checkpoint.py tests/golden/checkpoint_v2_fsdp2/step-2 \
        > tests/golden/checkpoint_v2_fsdp2/expected.json
"""
import json
import sys
import zlib
from pathlib import Path

import numpy as np

DTYPES = {"Float": np.float32, "BFloat16": np.uint16, "Long": np.int64, "Double": np.float64}


def decode(step_dir: Path) -> dict:
    meta = json.loads((step_dir / "metadata.json").read_text())
    wholes: dict[str, np.ndarray] = {}
    filled: dict[str, int] = {}
    for e in meta["tensors"]:
        shape = e["shape"]
        gshape = e.get("global_shape", shape)
        dtype = DTYPES[e["dtype"]]
        raw = (step_dir / e["file"]).read_bytes()[e["offset"]:e["offset"] + e["nbytes"]]
        if zlib.crc32(raw) != e["crc32"]:
            raise SystemExit(f"{e['name']}: piece checksum mismatch")
        piece = np.frombuffer(raw, dtype=dtype).reshape(shape)
        if "offsets" in e:
            offsets = e["offsets"]
        else:  # v1: whole tensors; v2: a range of rows
            offsets = [e.get("row_offset", 0)] + [0] * (len(gshape) - 1) if gshape else []
        whole = wholes.setdefault(e["name"], np.zeros(gshape, dtype=dtype))
        box = tuple(slice(o, o + n) for o, n in zip(offsets, shape))
        whole[box] = piece
        filled[e["name"]] = filled.get(e["name"], 0) + piece.size
    out = {}
    for name, whole in sorted(wholes.items()):
        if filled[name] != whole.size:
            raise SystemExit(f"{name}: pieces cover {filled[name]} of {whole.size} elements")
        out[name] = {"global_shape": list(whole.shape), "dtype": str(whole.dtype),
                     "crc32": zlib.crc32(np.ascontiguousarray(whole).tobytes())}
    return {"format": meta["format"], "step": meta["step"], "tensors": out}


if __name__ == "__main__":
    print(json.dumps(decode(Path(sys.argv[1])), indent=1))
