"""safetensors_write.py — writes name -> array as a safetensors file, float32 (no safetensors
package needed): an 8-byte little-endian header length, the JSON header, then the data, 8-byte
aligned. Used by tools/onnx/convert.py and tools/torch_reference.py."""
import json
import struct

import numpy as np


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        arr = np.ascontiguousarray(np.asarray(tensors[name]), dtype="<f4")
        data = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
