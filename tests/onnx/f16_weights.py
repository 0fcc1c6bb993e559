#!/usr/bin/python3
"""f16_weights.py — tools/onnx2dlrun keeps float16 and bfloat16 ONNX constants 16-bit in the
safetensors file it writes, and dlrun runs the result. Small models are built with onnx.helper in
the usual export pattern (16-bit initializers -> Cast(to=FLOAT) -> Conv, Gemm, MatMul,
BatchNormalization, Add; float32 activations); each check reads the file's header for the dtype of
every tensor (16-bit where the ONNX constant was, F32 where it was float32 or where folding made a
value that is not exact in 16 bits), and compares dlrun's output on the CPU backend with a float64
reference computed from the same 16-bit values. 16-bit activations are refused with one line.
Run by ctest (onnx_f16_weights); needs python3-onnx and python3-torch (tools/setup).

usage: tests/onnx/f16_weights.py DLRUN
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "tools", "onnx2dlrun")
failures = []


def bf16(a):
    """float32 values rounded to bfloat16 (nearest even): (the bits, the values as float32)."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def bf16_init(name, values):
    bits, _ = bf16(values)
    return helper.make_tensor(name, TensorProto.BFLOAT16, values.shape, bits.astype("<u2").tobytes(), raw=True)


def model(nodes, inputs, outputs, inits=(), opset=13):
    protos = [a if isinstance(a, TensorProto) else numpy_helper.from_array(a, n) for n, a in inits]
    g = helper.make_graph(nodes, "t", inputs, outputs, protos)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def cast(src, dst):
    return helper.make_node("Cast", [src], [dst], to=TensorProto.FLOAT)


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def check(what, m, feeds, want, dtypes, dlrun):
    """Converts m, checks the dtype of each tensor named in dtypes, runs dlrun and compares."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(m, path)
        p = subprocess.run([TOOL, path, "-o", os.path.join(d, "m.yaml")], capture_output=True, text=True)
        if p.returncode != 0:
            failures.append(f"{what}: conversion failed: {p.stderr.strip()}")
            return
        h = header(os.path.join(d, "m.safetensors"))
        got_types = {k: v["dtype"] for k, v in h.items() if k != "__metadata__"}
        for name, dt in dtypes.items():
            if got_types.get(name) != dt:
                failures.append(f"{what}: tensor {name} is {got_types.get(name)}, want {dt} (header {got_types})")
                return
        for name, e in h.items():  # every tensor aligned for its dtype (the header is padded to 8)
            if e["data_offsets"][0] % (4 if e["dtype"] == "F32" else 2):
                failures.append(f"{what}: tensor {name} ({e['dtype']}) at offset {e['data_offsets'][0]}")
        cmd = [dlrun, os.path.join(d, "m.yaml"), "--backend", "cpu", "--output", os.path.join(d, "y.npy")]
        for n, a in feeds.items():
            np.save(os.path.join(d, n + ".npy"), a)
            cmd += ["--input", f"{n}={os.path.join(d, n + '.npy')}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f"{what}: dlrun failed: {r.stderr.strip()}")
            return
        got = np.load(os.path.join(d, "y.npy")).astype(np.float64).reshape(want.shape)
        err = np.abs(got - want).max()
        # dlrun computes in f32 from weights exact in f32: f32 rounding only, far below f16's 1e-3
        if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
            failures.append(f"{what}: max error {err:.3g}")
        else:
            print(f"ok    {what}: {', '.join(f'{k} {v}' for k, v in sorted(got_types.items()))}; max error {err:.2g}")


def expect_error(what, m, want):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(m, path)
        p = subprocess.run([TOOL, path, "-o", os.path.join(d, "m.yaml")], capture_output=True, text=True)
        lines = p.stderr.strip().splitlines()
        if p.returncode != 2 or len(lines) != 1 or want not in lines[0]:
            failures.append(f"{what}: exit {p.returncode}, stderr {p.stderr.strip()!r}, wanted {want!r}")
        else:
            print(f"ok    {what}: {lines[0]}")


def conv_ref(x, w, b, pad):
    t = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                                   torch.from_numpy(b.astype(np.float64)), padding=pad)
    return t.numpy()


def main():
    dlrun = sys.argv[1]
    rng = np.random.default_rng(16)

    # Conv with f16 weight and bias through Cast, Relu, Flatten, then a Gemm whose weight is f32
    # and whose bias is f16: the file is mixed, each tensor in its ONNX type.
    x = rng.uniform(-1, 1, (2, 3, 6, 6)).astype(np.float32)
    w16 = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float16)
    b16 = rng.uniform(-1, 1, (4,)).astype(np.float16)
    fw = rng.uniform(-0.1, 0.1, (5, 144)).astype(np.float32)
    fb16 = rng.uniform(-1, 1, (5,)).astype(np.float16)
    m = model([cast("w16", "w"), cast("b16", "b"), helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["f"]),
               cast("fb16", "fb"), helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)],
              [vi("x", [2, 3, 6, 6])], [vi("y", [2, 5])], [("w16", w16), ("b16", b16), ("fw", fw), ("fb16", fb16)])
    r = np.maximum(conv_ref(x, w16, b16, 1), 0).reshape(2, 144)
    check("Conv f16 weights, Gemm f32 weight + f16 bias", m, {"x": x}, r @ fw.T.astype(np.float64) + fb16,
          {"c.weight": "F16", "c.bias": "F16", "y.weight": "F32", "y.bias": "F16"}, dlrun)

    # bfloat16: a Gemm (a linear layer) whose B and C are bf16 initializers cast to float
    a = rng.uniform(-1, 1, (3, 8)).astype(np.float32)
    bsrc, csrc = rng.uniform(-1, 1, (6, 8)).astype(np.float32), rng.uniform(-1, 1, (6,)).astype(np.float32)
    _, bv = bf16(bsrc)
    _, cv = bf16(csrc)
    m = model([cast("b16", "b"), cast("c16", "c"), helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1)],
              [vi("a", [3, 8])], [vi("y", [3, 6])], [("b16", bf16_init("b16", bsrc)), ("c16", bf16_init("c16", csrc))])
    check("Gemm bf16 weight and bias", m, {"a": a}, a.astype(np.float64) @ bv.T.astype(np.float64) + cv,
          {"y.weight": "BF16", "y.bias": "BF16"}, dlrun)

    # moved before use: MatMul by Transpose(Cast(f16)) (a linear layer), then an f16 Constant node
    # cast to float and added (the layer's bias: the Add folds into it, both stay 16-bit)
    a = rng.uniform(-1, 1, (4, 8)).astype(np.float32)
    wt16 = rng.uniform(-1, 1, (5, 8)).astype(np.float16)
    k16 = rng.uniform(-1, 1, (1, 5)).astype(np.float16)
    m = model([cast("wt16", "wt"), helper.make_node("Transpose", ["wt"], ["wtt"], perm=[1, 0]),
               helper.make_node("MatMul", ["a", "wtt"], ["mm"]),
               helper.make_node("Constant", [], ["k16"], value=numpy_helper.from_array(k16, "k16")),
               cast("k16", "k"), helper.make_node("Add", ["mm", "k"], ["y"])],
              [vi("a", [4, 8])], [vi("y", [4, 5])], [("wt16", wt16)])
    check("MatMul by a transposed f16 weight, an f16 Constant added", m, {"a": a},
          a.astype(np.float64) @ wt16.T.astype(np.float64) + k16, {"y.weight": "F16", "y.bias": "F16"}, dlrun)

    # 1-D conv (lowered through reshape) and BatchNormalization (folded into the conv by dlrun),
    # every parameter f16; Gemm with alpha 0.1 scales its f16 weight to values f16 cannot hold
    # exactly, so that weight is F32 (nothing is rounded), its bias stays F16
    x1 = rng.uniform(-1, 1, (2, 3, 10)).astype(np.float32)
    w1 = rng.uniform(-1, 1, (4, 3, 3)).astype(np.float16)
    bn = [rng.uniform(0.5, 1.5, 4), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4), rng.uniform(0.5, 2, 4)]
    bn = [v.astype(np.float16) for v in bn]
    gw, gb = rng.uniform(-1, 1, (3, 32)).astype(np.float16), rng.uniform(-1, 1, (3,)).astype(np.float16)
    names = ["s", "bb", "mean", "var"]
    m = model([cast("w1", "w"), helper.make_node("Conv", ["x", "w"], ["c"])] +
              [cast(n + "16", n) for n in names] + [cast("gw16", "gw"), cast("gb16", "gb")] +
              [helper.make_node("BatchNormalization", ["c"] + names, ["n"], epsilon=1e-5),
               helper.make_node("Flatten", ["n"], ["f"]),
               helper.make_node("Gemm", ["f", "gw", "gb"], ["y"], transB=1, alpha=0.1)],
              [vi("x", [2, 3, 10])], [vi("y", [2, 3])],
              [("w1", w1)] + [(n + "16", v) for n, v in zip(names, bn)] + [("gw16", gw), ("gb16", gb)])
    c = torch.nn.functional.conv1d(torch.from_numpy(x1.astype(np.float64)), torch.from_numpy(w1.astype(np.float64))).numpy()
    s, bb, mean, var = (v.astype(np.float64)[None, :, None] for v in bn)
    nrm = (c - mean) / np.sqrt(var + 1e-5) * s + bb
    want = 0.1 * nrm.reshape(2, 32) @ gw.T.astype(np.float64) + gb
    check("1-D Conv and BatchNormalization f16, Gemm alpha 0.1", m, {"x": x1}, want,
          {"c/2d.weight": "F16", "n.weight": "F16", "n.bias": "F16", "n.running_mean": "F16", "n.running_var": "F16",
           "y.weight": "F32", "y.bias": "F16"}, dlrun)

    # 3-D conv: one conv3d layer, its f16 weight and bias stored F16
    x3 = rng.uniform(-1, 1, (1, 2, 4, 5, 5)).astype(np.float32)
    w3 = rng.uniform(-1, 1, (3, 2, 2, 3, 3)).astype(np.float16)
    b3 = rng.uniform(-1, 1, (3,)).astype(np.float16)
    m = model([cast("w3", "w"), cast("b3", "b"), helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1, 1, 1])],
              [vi("x", [1, 2, 4, 5, 5])], [vi("y", [1, 3, 5, 5, 5])], [("w3", w3), ("b3", b3)])
    want = torch.nn.functional.conv3d(torch.from_numpy(x3.astype(np.float64)), torch.from_numpy(w3.astype(np.float64)),
                                      torch.from_numpy(b3.astype(np.float64)), padding=1).numpy()
    check("3-D Conv f16 weights", m, {"x": x3}, want, {"y.weight": "F16", "y.bias": "F16"}, dlrun)

    # f16 activations are not run (dlrun computes in f32): refused with one line
    expect_error("f16 input", model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2, 3], TensorProto.FLOAT16)],
                                    [vi("y", [2, 3], TensorProto.FLOAT16)]),
                 "node 'r' (Relu): input 'x' is float16; dlrun runs float32 tensors only")
    expect_error("runtime cast to f16",
                 model([helper.make_node("Cast", ["x"], ["h"], name="down", to=TensorProto.FLOAT16),
                        helper.make_node("Cast", ["h"], ["y"], name="up", to=TensorProto.FLOAT)],
                       [vi("x", [2, 3])], [vi("y", [2, 3])]),
                 "node 'down' (Cast): casts a runtime tensor to float16; dlrun runs float32 tensors only")
    if failures:
        print("\n".join("FAIL  " + f for f in failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
