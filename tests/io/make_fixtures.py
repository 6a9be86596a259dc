#!/usr/bin/env python3
"""Generates tests/io/reference.safetensors with the Python/Rust reference implementation of
safetensors (pip: safetensors numpy ml_dtypes; NumPy has no bfloat16, ml_dtypes provides it).
The values are repeated as literals in tests/io/test_safetensors.cpp, which reads the file
without Python. Deterministic; regenerate with
    python3 tests/io/make_fixtures.py
Also usable to check a file written by brrr against the reference loader:
    python3 tests/io/make_fixtures.py --check FILE
"""
import json
import os
import sys
import zlib

import ml_dtypes
import numpy as np
from safetensors import TensorSpec, deserialize, serialize_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "reference.safetensors")

TENSORS = {
    "f32": np.array([[0.0, -1.5, 2.25], [1024.0, 0.1, -3.0e-8]], dtype=np.float32),
    "f64": np.array([0.1, -2.5, 1e300], dtype=np.float64),
    "bf16": np.array([[1.0, -2.0], [0.5, 3.140625]], dtype=ml_dtypes.bfloat16),
    "f16": np.array([1.0, -0.5, 65504.0, 2.0**-14], dtype=np.float16),
    "i32": np.array([[1, -2], [2147483647, -2147483648]], dtype=np.int32),
    "i64": np.array([0, -(2**63), 2**63 - 1], dtype=np.int64),
    "bool": np.array([True, False, True, True, False], dtype=np.bool_),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "scalar": np.array(2.5, dtype=np.float64),
}
METADATA = {"format": "pt"}


def write():
    arrays = {k: v.copy(order="C") for k, v in TENSORS.items()}
    specs = {
        k: TensorSpec(dtype=v.dtype.name, shape=list(v.shape), data_ptr=v.ctypes.data, data_len=v.nbytes)
        for k, v in arrays.items()
    }
    serialize_file(specs, OUT, metadata=METADATA)
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


def check(path):
    """Loads `path` with the reference deserializer and prints every tensor; where brrr wrote
    its checksum record ("brrr.crc32", io/safetensors.cpp), recomputes every CRC-32 here."""
    with open(path, "rb") as f:
        data = f.read()
    tensors = deserialize(data)
    for name, t in tensors:
        print(name, t["dtype"], t["shape"], bytes(t["data"]).hex())
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    print("header:", data[8:8 + n].decode())
    meta = header.get("__metadata__", {})
    if "brrr.crc32" in meta:
        record = meta["brrr.crc32"]
        assert meta["brrr.crc32.record"] == "%08x" % zlib.crc32(record.encode()), "record CRC"
        crcs = json.loads(record)
        user = {k: v for k, v in meta.items() if k not in ("brrr.crc32", "brrr.crc32.record")}
        want = zlib.crc32(b"".join(k.encode() + b"\0" + v.encode() + b"\0"
                                   for k, v in sorted(user.items(), key=lambda kv: kv[0].encode())))
        assert crcs.pop("__metadata__") == "%08x" % want, "metadata CRC"
        for name, t in tensors:
            head = name.encode() + b"\0" + t["dtype"].encode() + b"\0"
            head += b"".join(int(d).to_bytes(8, "little") for d in t["shape"])
            assert crcs.pop(name) == "%08x" % zlib.crc32(bytes(t["data"]), zlib.crc32(head)), name
        assert not crcs, crcs
        print("brrr checksums: all %d verified" % len(tensors))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        write()
        check(OUT)
