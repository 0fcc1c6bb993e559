#!/usr/bin/env python3
"""tests/fuzz/make_seeds.py — writes the small binary seed files of the fuzzers into
tests/fuzz/corpus/{safetensors,npy,timing_cache}/ (checked in; run again after changing this).
Plain Python (struct, json): no numpy needed. The safetensors seeds hold the weights of the fixed
model in fuzz_safetensors.c, so binding them succeeds and the fuzzer starts from the deep path."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def out(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def f16(x):
    return struct.pack("<e", x)


def bf16(x):
    return struct.pack("<f", x)[2:]


def safetensors(tensors, metadata=None, pad_to=8, misalign=0):
    """tensors: list of (name, dtype, shape, bytes). misalign: bytes of padding before the data."""
    header, blob = {}, bytearray(b"\0" * misalign)
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(len(text) + 8) % pad_to)
    return struct.pack("<Q", len(text)) + text + bytes(blob)


# The fixed model's weights (fuzz_safetensors.c): name -> shape.
MODEL = [("conv.weight", [2, 2, 1, 1]), ("conv.bias", [2]), ("bn.weight", [2]), ("bn.bias", [2]),
         ("bn.running_mean", [2]), ("bn.running_var", [2]), ("k", [2, 1, 1]), ("fc.weight", [3, 32]),
         ("fc.bias", [3])]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def values(n, scale=0.25):
    return [((i * 37) % 17 - 8) * scale for i in range(n)]


def model_tensors(dtype_of):
    ts = []
    for name, shape in MODEL:
        dt = dtype_of(name)
        vals = values(numel(shape))
        if name == "bn.running_var":
            vals = [1.0 + abs(v) for v in vals]
        pack = {"F32": lambda v: struct.pack("<f", v), "F16": f16, "BF16": bf16}[dt]
        ts.append((name, dt, shape, b"".join(pack(v) for v in vals)))
    return ts


out("safetensors", "model-f32.safetensors", safetensors(model_tensors(lambda n: "F32")))
out("safetensors", "model-f16-bf16.safetensors",
    safetensors(model_tensors(lambda n: "F16" if n.startswith("fc") else "BF16" if n.startswith("bn") else "F32"),
                metadata={"format": "pt"}, pad_to=1, misalign=1))
out("safetensors", "model-extra.safetensors",
    safetensors(model_tensors(lambda n: "F32") + [("bn.num_batches_tracked", "I64", [], struct.pack("<q", 7))]))
out("safetensors", "all-dtypes.safetensors", safetensors([
    ("f64", "F64", [2], struct.pack("<2d", 1.5, -2.0)), ("i64", "I64", [1, 2], struct.pack("<2q", -1, 1 << 40)),
    ("i32", "I32", [3], struct.pack("<3i", 1, 2, 3)), ("i16", "I16", [1], struct.pack("<h", -7)),
    ("i8", "I8", [2], b"\x80\x7f"), ("u64", "U64", [1], struct.pack("<Q", 9)), ("u32", "U32", [1], b"\1\0\0\0"),
    ("u16", "U16", [1], b"\2\0"), ("u8", "U8", [2, 2], b"\0\1\2\3"), ("bool", "BOOL", [1], b"\1"),
    ("empty", "F32", [0, 3], b""), ("scalar", "F32", [], struct.pack("<f", 3.0))], metadata={"a": "b"}))


def npy(descr, shape, data, version=1):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    d = ("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)).encode()
    pre = 10 if version == 1 else 12
    d += b" " * (-(pre + len(d) + 1) % 64) + b"\n"
    size = struct.pack("<H", len(d)) if version == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([version, 0]) + size + d + data


out("npy", "f32-2x3.npy", npy("<f4", [2, 3], struct.pack("<6f", *values(6))))
out("npy", "i64-5.npy", npy("<i8", [5], struct.pack("<5q", 0, 1, -1, 4, 1 << 33)))
out("npy", "f64-v2.npy", npy("<f8", [2, 1, 2], struct.pack("<4d", 1.0, -0.5, 1e300, 0.0), version=2))
out("npy", "f16-v3.npy", npy("<f2", [3], f16(1.0) + f16(-2.0) + b"\x00\x7c", version=3))
out("npy", "i32-2x2.npy", npy("<i4", [2, 2], struct.pack("<4i", 1, -2, 3, 1 << 30)))
out("npy", "u8-4.npy", npy("|u1", [4], b"\0\1\x80\xff"))
out("npy", "scalar.npy", npy("<f4", [], struct.pack("<f", 2.5)))
out("npy", "empty.npy", npy("<f4", [0, 4], b""))

cache = {"format": "dlrun-timing-cache", "version": 1, "entries": {
    "op=conv2d;k=3x3;s=1x1;p=1,1,1,1;d=1x1;g=1;ceil=0;cip=1;axis=0;eps=1e-05;act=1;in=[1, 3, 32, 32]f32,"
    "[16, 3, 3, 3]f32,[16]f32;out=[1, 16, 32, 32]f32;alpha=0;clip=0,0;prec=0;backend=cpu;device=OpenBLAS;abi=65540;"
    "dlrun=0.1.0": 0.125,
    "transfer-latency;backend=cuda;device=H100;dlrun=0.1.0": 0.01,
    "transfer-ms-per-MiB;backend=cuda;device=H100;dlrun=0.1.0": 0.04}}
out("timing_cache", "cache.json", json.dumps(cache, indent=2).encode())
out("timing_cache", "empty-entries.json", b'{"format": "dlrun-timing-cache", "version": 1, "entries": {}}')

# Image seeds for fuzz_image: small images in each format and pixel layout stb_image reads there
# (written with PIL where it is installed; the shipped models/samples/*.png are seeds as well).
try:
    import io

    from PIL import Image
except ImportError:
    Image = None
if Image is not None:
    rgb = Image.new("RGB", (9, 7))
    rgb.putdata([((x * 37) % 256, (y * 53) % 256, ((x + y) * 29) % 256) for y in range(7) for x in range(9)])

    def save(name, img, fmt, **kw):
        b = io.BytesIO()
        img.save(b, fmt, **kw)
        out("image", name, b.getvalue())

    save("rgb.png", rgb, "PNG")
    save("gray.png", rgb.convert("L"), "PNG")
    save("rgba.png", rgb.convert("RGBA"), "PNG")
    save("palette.png", rgb.convert("P"), "PNG")
    save("gray16.png", rgb.convert("L").convert("I"), "PNG")
    save("interlaced.png", rgb, "PNG", interlace=1)
    save("baseline.jpg", rgb, "JPEG", quality=80)
    save("progressive.jpg", rgb, "JPEG", quality=80, progressive=True)
    save("gray.jpg", rgb.convert("L"), "JPEG")
    save("subsampled.jpg", rgb.resize((17, 13)), "JPEG", subsampling=2)
    save("rgb.bmp", rgb, "BMP")
    save("palette.bmp", rgb.convert("P"), "BMP")
    save("rgb.ppm", rgb, "PPM")
    save("gray.pgm", rgb.convert("L"), "PPM")
