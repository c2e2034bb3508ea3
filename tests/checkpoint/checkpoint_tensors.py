"""A checkpoint's tensor files, read from Python (docs/checkpoints.md).

Each kind's file (param.bin, adam_m.bin, adam_v.bin) holds the whole flat buffer,
little-endian, in one type: fp32, or fp64 where the run kept its state in doubles (the
fp64 ground-truth runs). The manifest's rows name the type ("dtype") and give each
tensor's byte offset. Uses only the standard library (numpy users take numpy_dtype).
"""
import array
import json
import math
import os
import sys

ELEMENT_BYTES = {"fp32": 4, "fp64": 8}
ARRAY_CODE = {"fp32": "f", "fp64": "d"}  # array.array's type codes (the host is little-endian)
NUMPY_DTYPE = {"fp32": "<f4", "fp64": "<f8"}


def manifest(ckpt):
    with open(os.path.join(ckpt, "manifest.json")) as f:
        return json.load(f)


def dtype_of(ckpt, kind, loaded=None):
    """The type of `kind`'s file: every row of the kind has the same one."""
    types = {row["dtype"] for row in (loaded or manifest(ckpt))["tensors"] if row["kind"] == kind}
    if len(types) != 1 or not types <= set(ELEMENT_BYTES):
        sys.exit(f"{ckpt}: the {kind} tensors have dtypes {sorted(types)}, not one of fp32 and fp64")
    return types.pop()


def values(ckpt, kind):
    """The whole flat buffer of `kind` as an array.array of floats or doubles."""
    a = array.array(ARRAY_CODE[dtype_of(ckpt, kind)])
    with open(os.path.join(ckpt, kind + ".bin"), "rb") as f:
        a.frombytes(f.read())
    return a


def numpy_dtype(ckpt, kind):
    """The numpy dtype to read `kind`'s file with ("<f4" or "<f8")."""
    return NUMPY_DTYPE[dtype_of(ckpt, kind)]


def pieces(ckpt, kind):
    """(name, begin, end) in elements of every tensor of `kind` in its file."""
    loaded = manifest(ckpt)
    size = ELEMENT_BYTES[dtype_of(ckpt, kind, loaded)]
    return [(t["name"].split("/", 1)[1], t["offset"] // size, t["offset"] // size + math.prod(t["shape"]))
            for t in loaded["tensors"] if t["kind"] == kind]


def fnv1a64(data):
    """The checksum of docs/checkpoints.md: 64-bit FNV-1a of the bytes, 16 hex digits."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return f"{h:016x}"


def write_fp32_copy(src, dst):
    """Writes checkpoint `dst`: `src` with every fp64 file rounded to fp32 (to nearest) and
    its manifest rows rewritten to match (dtype, offset, checksum). It is the checkpoint an
    fp64 run wrote when checkpoints held fp32 alone, for tests that must tell the two apart."""
    loaded = manifest(src)
    os.makedirs(dst)
    for kind in sorted({row["kind"] for row in loaded["tensors"]}):
        narrow = array.array("f", values(src, kind))
        raw = narrow.tobytes()
        with open(os.path.join(dst, kind + ".bin"), "wb") as f:
            f.write(raw)
        size = ELEMENT_BYTES[dtype_of(src, kind, loaded)]
        for row in loaded["tensors"]:
            if row["kind"] != kind:
                continue
            first = row["offset"] // size
            row["dtype"], row["offset"] = "fp32", 4 * first
            row["checksum"] = fnv1a64(raw[4 * first:4 * (first + math.prod(row["shape"]))])
    with open(os.path.join(dst, "manifest.json"), "w") as f:
        json.dump(loaded, f, indent=2)
