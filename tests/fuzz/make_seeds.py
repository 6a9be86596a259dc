#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets (tests/fuzz/corpus/<target>/), small real
files made by other implementations:
  safetensors/  files written by the Python/Rust reference implementation of safetensors
                (pip: safetensors numpy ml_dtypes): every dtype, 0-d and zero-size tensors,
                metadata, and one carrying brrr's checksum record computed here, in Python,
                from the format documented in io/safetensors.cpp (so the record is checked
                against a second implementation, and tests/io loads that file too);
  idx/          Fashion-MNIST (the Debian package dataset-fashion-mnist) cut to a few
                examples: images and labels, plain and gzip;
  state_dict/   checkpoints of the fuzz_state_dict model (tests/fuzz/fuzz_state_dict.cpp)
                and mismatched variants: a missing, an unexpected and a renamed key, a wrong
                shape, other dtypes.
Deterministic but for the order of "__metadata__" keys (the Rust writer keeps them in a
hash map, so each run may order them differently); regenerate with
    python3 tests/fuzz/make_seeds.py [--data /usr/share/datasets/fashion-mnist]
"""
import argparse
import gzip
import json
import os
import shutil
import struct
import zlib

import ml_dtypes
import numpy as np
from safetensors import TensorSpec, serialize, serialize_file

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
ST_NAME = {"float32": "F32", "float64": "F64", "bfloat16": "BF16", "float16": "F16",
           "int32": "I32", "int64": "I64", "bool": "BOOL"}


def spec(arrays):
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    return arrays, {k: TensorSpec(dtype=v.dtype.name, shape=list(v.shape), data_ptr=v.ctypes.data,
                                  data_len=v.nbytes) for k, v in arrays.items()}


def write_st(path, arrays, metadata=None):
    arrays, specs = spec(arrays)  # keep `arrays` alive while serializing
    serialize_file(specs, path, metadata=metadata)


def brrr_checksums(arrays, metadata):
    """brrr's checksum record (io/safetensors.cpp) for these tensors and metadata: two keys."""
    record = {}
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        head = name.encode() + b"\0" + ST_NAME[a.dtype.name].encode() + b"\0"
        head += b"".join(int(d).to_bytes(8, "little") for d in a.shape)
        record[name] = "%08x" % zlib.crc32(a.tobytes(), zlib.crc32(head))
    meta = b"".join(k.encode() + b"\0" + v.encode() + b"\0"
                    for k, v in sorted(metadata.items(), key=lambda kv: kv[0].encode()))
    record["__metadata__"] = "%08x" % zlib.crc32(meta)
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    return {"brrr.crc32": text, "brrr.crc32.record": "%08x" % zlib.crc32(text.encode())}


def fresh(dirname):
    d = os.path.join(CORPUS, dirname)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def safetensors_seeds():
    d = fresh("safetensors")
    rng = np.random.default_rng(21)
    every = {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f64": np.array([0.1, -2.5, 1e300]),
        "bf16": np.array([[1.0, -2.0], [0.5, 3.140625]], dtype=ml_dtypes.bfloat16),
        "f16": np.array([1.0, -0.5, 65504.0, 2.0**-14], dtype=np.float16),
        "i32": np.array([[1, -2], [2**31 - 1, -2**31]], dtype=np.int32),
        "i64": np.array([0, -(2**63), 2**63 - 1], dtype=np.int64),
        "bool": np.array([True, False, True], dtype=np.bool_),
    }
    write_st(os.path.join(d, "every_dtype.safetensors"), every, {"format": "pt"})
    write_st(os.path.join(d, "edge_shapes.safetensors"),
             {"scalar": np.array(2.5, dtype=np.float64), "empty": np.zeros((0, 3), np.float32),
              "empty_end": np.zeros((4, 0), np.int64), "row": np.arange(5, dtype=np.int32).reshape(1, 5, 1)})
    write_st(os.path.join(d, "metadata_only.safetensors"), {}, {"format": "pt", "note": "ünïcødé \"q\"", "": "e"})
    write_st(os.path.join(d, "empty.safetensors"), {})
    layer = {"weight": rng.standard_normal((4, 3)).astype(np.float32),
             "bias": np.zeros(4, np.float32)}
    meta = {"format": "pt"}
    write_st(os.path.join(d, "checksummed.safetensors"), layer,
             dict(meta, **brrr_checksums(layer, meta)))
    # Same bytes, with the record of a different file: a checksum mismatch to start from.
    other = {"weight": layer["weight"] + 1, "bias": layer["bias"]}
    write_st(os.path.join(d, "checksum_mismatch.safetensors"), layer,
             dict(meta, **brrr_checksums(other, meta)))


def idx_bytes(raw, count):
    """The first `count` examples of an IDX file's bytes (its first dim set to count)."""
    ndim = raw[3]
    dims = list(struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim]))
    per = int(np.prod(dims[1:], dtype=np.int64)) if ndim > 1 else 1
    start = 4 + 4 * ndim
    dims[0] = count
    return raw[:4] + struct.pack(">%dI" % ndim, *dims) + raw[start:start + count * per]


def idx_seeds(data_dir):
    d = fresh("idx")
    for stem, count in [("train-images-idx3-ubyte", 2), ("t10k-images-idx3-ubyte", 1),
                        ("train-labels-idx1-ubyte", 16), ("t10k-labels-idx1-ubyte", 8)]:
        with gzip.open(os.path.join(data_dir, stem + ".gz"), "rb") as f:
            cut = idx_bytes(f.read(), count)
        with open(os.path.join(d, stem + "-cut"), "wb") as f:
            f.write(cut)
        with open(os.path.join(d, stem + "-cut.gz"), "wb") as f:
            f.write(gzip.compress(cut, mtime=0))
    # A 4-D file (allowed: up to 4 dims): 2 x 1 x 2 x 3 bytes.
    with open(os.path.join(d, "four_dims"), "wb") as f:
        f.write(bytes([0, 0, 8, 4]) + struct.pack(">4I", 2, 1, 2, 3) + bytes(range(12)))


def fuzz_model(rng):
    """The state dict of fuzz_state_dict.cpp's model (values arbitrary)."""
    return {
        "0.weight": rng.standard_normal((3, 4)).astype(np.float32),
        "0.bias": rng.standard_normal(3).astype(np.float32),
        "2.weight": np.ones(3, np.float32),
        "2.bias": np.zeros(3, np.float32),
        "3.weight": rng.standard_normal((2, 3)).astype(np.float32),
        "3.bias": rng.standard_normal(2).astype(np.float32),
        "steps": np.array(1000, dtype=np.int64),
        "mask": np.array([True, False, True]),
    }


def state_dict_seeds():
    d = fresh("state_dict")
    rng = np.random.default_rng(2121)
    good = fuzz_model(rng)
    write_st(os.path.join(d, "match.safetensors"), good, {"format": "pt"})
    write_st(os.path.join(d, "match_checksummed.safetensors"), good,
             brrr_checksums(good, {}))
    missing = dict(good)
    del missing["3.bias"]
    write_st(os.path.join(d, "missing_key.safetensors"), missing)
    write_st(os.path.join(d, "unexpected_key.safetensors"), dict(good, **{"4.weight": np.ones((2, 2), np.float32)}))
    renamed = dict(good)
    renamed["0.weigth"] = renamed.pop("0.weight")
    write_st(os.path.join(d, "renamed_key.safetensors"), renamed)
    write_st(os.path.join(d, "wrong_shape.safetensors"), dict(good, **{"0.weight": np.ones((4, 3), np.float32)}))
    other = {k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in good.items()}
    other["2.weight"] = good["2.weight"].astype(ml_dtypes.bfloat16)
    other["2.bias"] = good["2.bias"].astype(np.float16)
    other["steps"] = np.array(7, dtype=np.int32)
    other["mask"] = np.array([1.0, 0.0, 2.5], dtype=np.float32)
    write_st(os.path.join(d, "other_dtypes.safetensors"), other)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    safetensors_seeds()
    idx_seeds(args.data)
    state_dict_seeds()
    for sub in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, sub))
        size = sum(os.path.getsize(os.path.join(CORPUS, sub, f)) for f in files)
        print("%-12s %2d files %6d bytes" % (sub, len(files), size))
