"""Minimal safetensors writer and reader (numpy only; torch tensors are accepted by the writer).

File layout (https://huggingface.co/docs/safetensors, restated here so that nothing else is needed):

    [8 bytes]  N, unsigned 64-bit little-endian: the length of the JSON header in bytes
    [N bytes]  UTF-8 JSON object:
                 {"<tensor name>": {"dtype": "F64", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
                  "__metadata__": {"<key>": "<string value>", ...}}
               padded at the end with ASCII spaces so that 8 + N is a multiple of 8
    [rest]     the byte buffer; every tensor is stored C-contiguous (row-major), little-endian, at
               buffer[begin:end] where offsets are relative to the start of the buffer (the end of the
               header). The tensors tile the buffer without holes or overlaps.

The writer stores tensors in the order given (dict order). A 0-d tensor has "shape": [] and one element.
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np

# safetensors dtype tag -> numpy little-endian dtype
_TAG_TO_NP = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
METADATA_KEY = "__metadata__"


def _to_numpy(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return t
    # torch.Tensor without importing torch here
    if hasattr(t, "detach") and hasattr(t, "cpu"):
        return t.detach().cpu().contiguous().numpy()
    return np.asarray(t)


def _tag_of(a: np.ndarray) -> str:
    dt = a.dtype
    for tag, ref in _TAG_TO_NP.items():
        if dt.kind == ref.kind and dt.itemsize == ref.itemsize:
            return tag
    raise TypeError(f"unsupported dtype {a.dtype}")


def save(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """Write `tensors` (name -> array/tensor) and string `metadata` to `path` (atomically)."""
    header: dict = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"metadata must map str -> str, got {k!r}: {v!r}")
        header[METADATA_KEY] = dict(metadata)
    blobs = []
    offset = 0
    for name, t in tensors.items():
        if name == METADATA_KEY:
            raise ValueError("reserved tensor name")
        a = _to_numpy(t)
        tag = _tag_of(a)
        a = np.require(a.astype(_TAG_TO_NP[tag], copy=False), requirements="C")  # keeps 0-d shape
        raw = a.tobytes(order="C")
        header[name] = {"dtype": tag, "shape": [int(s) for s in a.shape],
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    pad = (-(8 + len(hjson))) % 8
    hjson += b" " * pad
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def load(path: str, strict: bool = True):
    """Read a safetensors file. Returns (tensors: dict name -> np.ndarray in file order, metadata: dict).

    Validates the header: known dtypes, byte sizes matching shapes, offsets inside the buffer and, with
    strict=True, that the tensors tile the buffer exactly and that 8 + N is a multiple of 8."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("file shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"header length {n} exceeds file size {len(data)}")
    if strict and (8 + n) % 8 != 0:
        raise ValueError("header not padded to a multiple of 8")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    buf = memoryview(data)[8 + n:]
    meta = header.pop(METADATA_KEY, {}) or {}
    for k, v in meta.items():
        if not isinstance(v, str):
            raise ValueError(f"metadata value for {k!r} is not a string")
    out = {}
    spans = []
    for name, info in header.items():
        tag = info["dtype"]
        if tag not in _TAG_TO_NP:
            raise ValueError(f"{name}: unsupported dtype {tag}")
        dt = _TAG_TO_NP[tag]
        shape = tuple(int(s) for s in info["shape"])
        begin, end = (int(o) for o in info["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * dt.itemsize:
            raise ValueError(f"{name}: {end - begin} bytes for shape {shape} {tag}")
        if not (0 <= begin <= end <= len(buf)):
            raise ValueError(f"{name}: offsets {begin},{end} outside buffer of {len(buf)}")
        arr = np.frombuffer(buf[begin:end], dtype=dt, count=count).reshape(shape).copy()
        out[name] = arr
        spans.append((begin, end, name))
    if strict:
        spans.sort()
        pos = 0
        for begin, end, name in spans:
            if begin != pos:
                raise ValueError(f"{name}: hole or overlap at buffer offset {pos} (begins at {begin})")
            pos = end
        if pos != len(buf):
            raise ValueError(f"{len(buf) - pos} trailing bytes after the last tensor")
    return out, meta


def load_torch(path: str, strict: bool = True):
    """Like load() but returns torch tensors."""
    import torch
    arrs, meta = load(path, strict)
    return {k: torch.from_numpy(v) for k, v in arrs.items()}, meta


if __name__ == "__main__":  # tiny smoke test: python3 st.py
    import tempfile
    t = {"a": np.arange(6, dtype=np.float64).reshape(2, 3), "s": np.array(3.5), "i": np.array([1, -2], np.int64),
         "e": np.zeros((0, 4)), "b": np.array([True, False])}
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "x.safetensors")
        save(p, t, {"k": "v"})
        r, m = load(p)
        assert m == {"k": "v"} and list(r) == list(t)
        for k in t:
            assert r[k].dtype == t[k].dtype.newbyteorder("<") or r[k].dtype == t[k].dtype, k
            assert np.array_equal(r[k], t[k]), k
    print("st.py ok")
