"""safetensors_write.py — writes name -> array as a safetensors file (no safetensors package
needed): an 8-byte little-endian header length, the JSON header, then the data. Each tensor is
F32 unless `dtypes` names it F16 or BF16 (rounded to nearest even; the converter only asks for a
16-bit dtype where the values are exact in it). The data is laid out by element size, largest
first, then by name, as the safetensors library does: with the header padded to 8 bytes every
tensor starts aligned for its dtype and the data has no holes. Used by tools/onnx/convert.py and
tools/torch_reference.py."""
import json
import struct

import numpy as np

SIZES = {"F32": 4, "F16": 2, "BF16": 2}


def to_bf16_bits(arr):
    """float32 array -> uint16 bfloat16 bits, rounded to nearest even (NaN stays a quiet NaN)."""
    u = np.ascontiguousarray(arr, dtype="<f4").view("<u4").astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(nan, (u >> 16) | 0x40, r).astype("<u2")


def encode(arr, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(np.asarray(arr), dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(np.asarray(arr), dtype="<f2").tobytes()
    if dtype == "BF16":
        return to_bf16_bits(np.asarray(arr, dtype=np.float32)).tobytes()
    raise ValueError(f"dtype {dtype}: F32, F16 or BF16")


def write_safetensors(path, tensors, dtypes=None):
    dtypes = dtypes or {}
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors, key=lambda n: (-SIZES[dtypes.get(n, "F32")], n)):
        dt = dtypes.get(name, "F32")
        data = encode(tensors[name], dt)
        header[name] = {"dtype": dt, "shape": list(np.shape(tensors[name])), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
