#!/usr/bin/python3
"""converter_errors.py — tools/onnx2dlrun refuses what dlrun cannot run with one line naming the
node and the reason, exit status 2, and writes nothing half-done; it accepts what it should
(constant operands, --dim for symbolic sizes). Small ONNX models are built here with
onnx.helper. Run by ctest (onnx_converter_errors); needs python3-onnx (tools/setup).

usage: tests/onnx/converter_errors.py DLRUN
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "tools", "onnx2dlrun")
failures = []


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "t", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def convert(m, d, extra=()):
    path = os.path.join(d, "m.onnx")
    onnx.save(m, path)
    return subprocess.run([TOOL, path, "-o", os.path.join(d, "m.yaml"), *extra], capture_output=True, text=True)


def expect_error(what, m, want, extra=()):
    with tempfile.TemporaryDirectory() as d:
        p = convert(m, d, extra)
        lines = p.stderr.strip().splitlines()
        if p.returncode != 2 or len(lines) != 1 or want not in lines[0]:
            failures.append(f"{what}: exit {p.returncode}, stderr {p.stderr.strip()!r}, wanted {want!r}")
        else:
            print(f"ok    {what}: {lines[0]}")


def expect_runs(what, m, feeds, want, dlrun, extra=(), run_extra=(), exact=False):
    with tempfile.TemporaryDirectory() as d:
        p = convert(m, d, extra)
        if p.returncode != 0:
            failures.append(f"{what}: conversion failed: {p.stderr.strip()}")
            return
        cmd = [dlrun, os.path.join(d, "m.yaml"), "--backend", "cpu", "--output", os.path.join(d, "y.npy"), *run_extra]
        for n, a in feeds.items():
            np.save(os.path.join(d, n + ".npy"), a)
            cmd += ["--input", f"{n}={os.path.join(d, n + '.npy')}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f"{what}: dlrun failed: {r.stderr.strip()}")
            return
        got = np.load(os.path.join(d, "y.npy")).reshape(want.shape)
        if exact and not np.array_equal(got, want, equal_nan=True):
            bad = got != want
            failures.append(f"{what}: {int(bad.sum())} values differ, e.g. at {np.argwhere(bad)[0].tolist()}: "
                            f"{got[bad][0]!r}, expected {want[bad][0]!r}")
        elif not np.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True):
            failures.append(f"{what}: max error {np.abs(got - want).max()}")
        else:
            print(f"ok    {what}: {'equals numpy exactly' if exact else 'matches numpy'}")


def main():
    dlrun = sys.argv[1]
    rng = np.random.default_rng(7)
    x4 = vi("x", [1, 3, 5, 5])
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    expect_error("unsupported op", model([helper.make_node("Hardmax", ["x"], ["y"], name="act")], [x4], [vi("y", [1, 3, 5, 5])]),
                 "node 'act' (Hardmax): op Hardmax is not supported by dlrun")
    expect_error("unsupported attribute",
                 model([helper.make_node("Conv", ["x", "w"], ["y"], name="c", foo=1)], [x4], [vi("y", None)], [("w", w)]),
                 "node 'c' (Conv): attribute 'foo' is not supported")
    expect_error("weight computed at run time",
                 model([helper.make_node("Conv", ["x", "w"], ["y"], name="c")], [x4, vi("w", [4, 3, 3, 3])], [vi("y", None)]),
                 "node 'c' (Conv): weight 'w' must be a constant (an initializer)")
    expect_error("double input", model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2, 3], TensorProto.DOUBLE)],
                                       [vi("y", [2, 3], TensorProto.DOUBLE)]),
                 "input 'x' is double; dlrun runs float32 tensors only")
    expect_error("symbolic dimension", model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", ["batch", 3])], [vi("y", None)]),
                 "dimension 'batch' has no size (give it with --dim batch=SIZE)")
    expect_error("training batchnorm",
                 model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn", training_mode=1)],
                       [x4], [vi("y", None)], [(n, np.ones(3, np.float32)) for n in "sbmv"], opset=15),
                 "node 'bn' (BatchNormalization): training_mode is set; dlrun runs inference only")
    expect_error("a folding-only op on a runtime tensor",
                 model([helper.make_node("Where", ["c", "x", "z"], ["y"], name="w")], [x4], [vi("y", None)],
                       [("c", np.ones((1, 3, 5, 5), bool)), ("z", np.zeros(1, np.float32))]),
                 "node 'w' (Where): Where of a runtime tensor ('x') is not supported: dlrun has no Where op")
    expect_error("resize by a scale that is not output / input",
                 model([helper.make_node("Resize", ["x", "", "s"], ["y"], name="r", mode="linear")], [x4], [vi("y", None)],
                       [("s", np.array([1, 1, 1.5, 1.5], np.float32))]),
                 "node 'r' (Resize): scale 1.5 is not output / input size (7/5)")
    expect_error("empty graph", helper.make_model(helper.make_graph([], "t", [], [])), "has no operations")
    with tempfile.TemporaryDirectory() as d:
        bad = os.path.join(d, "bad.onnx")
        open(bad, "wb").write(b"\xff\xfe not protobuf")
        p = subprocess.run([TOOL, bad, "-o", os.path.join(d, "m.yaml")], capture_output=True, text=True)
        if p.returncode != 2 or len(p.stderr.strip().splitlines()) != 1:
            failures.append(f"garbage file: exit {p.returncode}, stderr {p.stderr!r}")
        else:
            print(f"ok    garbage file: {p.stderr.strip()}")

    # what must work: a constant operand, --dim, a Gemm that is not a linear layer, Sum of three
    xv = rng.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    c = rng.uniform(-1, 1, (3, 1)).astype(np.float32)
    expect_runs("constant added with broadcasting",
                model([helper.make_node("Add", ["c", "x"], ["y"])], [vi("x", ["n", 3, 4])], [vi("y", None)], [("c", c)]),
                {"x": xv}, c + xv, dlrun, ["--dim", "n=2"])
    a, b, cc = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((5, 3), (4, 5), (3, 1)))
    expect_runs("Gemm transA transB with a per-row C",
                model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
                      [vi("a", [5, 3]), vi("b", [4, 5])], [vi("y", None)], [("c", cc)]),
                {"a": a, "b": b}, 0.5 * a.T @ b.T + 2 * cc, dlrun)
    s = [rng.uniform(-1, 1, (3, 4)).astype(np.float32) for _ in range(3)]
    expect_runs("Sum of three", model([helper.make_node("Sum", ["p", "q", "r"], ["y"])], [vi(n, [3, 4]) for n in "pqr"], [vi("y", None)]),
                dict(zip("pqr", s)), s[0] + s[1] + s[2], dlrun)
    m3 = rng.uniform(-1, 1, (2, 4, 3)).astype(np.float32)
    v = rng.uniform(-1, 1, (3,)).astype(np.float32)
    expect_runs("MatMul of a batch by a 1-D constant", model([helper.make_node("MatMul", ["x", "v"], ["y"])], [vi("x", [2, 4, 3])],
                                                           [vi("y", None)], [("v", v)]), {"x": m3}, m3 @ v, dlrun)
    # a converted model whose reshapes keep the batch dimension runs at another batch size
    xb = rng.uniform(-1, 1, (5, 3, 4)).astype(np.float32)
    expect_runs("reshapes follow dlrun --batch",
                model([helper.make_node("Unsqueeze", ["x", "ax"], ["u"]), helper.make_node("Relu", ["u"], ["r"]),
                       helper.make_node("Flatten", ["r"], ["y"], axis=2)],
                      [vi("x", [2, 3, 4])], [vi("y", None)], [("ax", np.array([1], np.int64))]),
                {"x": xb}, np.maximum(xb, 0).reshape(5, 1, 3, 4).reshape(5, 12), dlrun, run_extra=["--batch", "5"])
    new_mappings(dlrun, rng)
    spelled_ops(dlrun, rng)
    control_flow(dlrun, rng)
    if failures:
        print("\n".join("FAIL  " + f for f in failures))
        sys.exit(1)


def layer_ops(m):
    """The dlrun ops of m's conversion."""
    with tempfile.TemporaryDirectory() as d:
        p = convert(m, d)
        if p.returncode != 0:
            return p.stderr.strip()
        return [line.split(", op: ")[1].split(",")[0] for line in open(os.path.join(d, "m.yaml")) if ", op: " in line]


def new_mappings(dlrun, rng):
    """Conversions the ONNX backend tests do not cover: constant indices and shapes, fusions."""
    x = rng.uniform(-2, 2, (2, 3, 4, 5)).astype(np.float32)
    xi = vi("x", [2, 3, 4, 5])
    expect_runs("runtime Transpose", model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 3, 1, 2])], [xi], [vi("y", None)]),
                {"x": x}, x.transpose(0, 3, 1, 2), dlrun)
    idx = np.array([[4, 0], [1, 2]], np.int64)
    expect_runs("Gather of constant 2-D indices (slices and a concat)",
                model([helper.make_node("Gather", ["x", "i"], ["y"], axis=-1)], [xi], [vi("y", None)], [("i", idx)]),
                {"x": x}, np.take(x, idx, axis=-1), dlrun)
    expect_runs("Gather of a scalar index", model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [xi], [vi("y", None)],
                                                  [("i", np.array(-1, np.int64))]), {"x": x}, x[:, -1], dlrun)
    big = np.array([9223372036854775807], np.int64)
    expect_runs("Slice with a huge end and a negative step",
                model([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], [xi], [vi("y", None)],
                      [("s", np.array([-1], np.int64)), ("e", -big), ("a", np.array([2], np.int64)), ("t", np.array([-2], np.int64))]),
                {"x": x}, x[:, :, ::-2], dlrun)
    expect_runs("Expand of a runtime tensor", model([helper.make_node("Expand", ["x", "s"], ["y"])], [vi("x", [3, 1])], [vi("y", None)],
                                                    [("s", np.array([2, 3, 4], np.int64))]),
                {"x": x[0, :, 0, :1]}, np.broadcast_to(x[0, :, 0, :1], (2, 3, 4)), dlrun)
    expect_runs("Pad with negative pads (a crop) and a value",
                model([helper.make_node("Pad", ["x", "p", "v"], ["y"])], [xi], [vi("y", None)],
                      [("p", np.array([0, 0, -1, 2, 0, 1, 0, -2], np.int64)), ("v", np.array(1.5, np.float32))]),
                {"x": x}, np.pad(x[:, :, 1:, :3], [(0, 0), (0, 1), (0, 0), (2, 0)], constant_values=1.5), dlrun)
    # fusions: x·sigmoid(x) -> silu; the spelled-out LayerNorm with γ and β -> one layer_norm
    g, b = rng.uniform(0.5, 1.5, 5).astype(np.float32), rng.uniform(-1, 1, 5).astype(np.float32)
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["h"]),
             helper.make_node("ReduceMean", ["h"], ["m"], axes=[-1]), helper.make_node("Sub", ["h", "m"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["p"]), helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
             helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n"]), helper.make_node("Mul", ["n", "g"], ["ng"]),
             helper.make_node("Add", ["ng", "b"], ["y"])]
    m = model(nodes, [xi], [vi("y", None)], [("two", np.array(2, np.float32)), ("eps", np.array(1e-5, np.float32)),
                                             ("g", g), ("b", b)])
    h = x / (1 + np.exp(-x))
    d = h - h.mean(-1, keepdims=True)
    want = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * g + b
    ops = layer_ops(m)
    if ops != ["silu", "layer_norm"]:
        failures.append(f"silu and LayerNorm fusion: dlrun ops {ops}, wanted ['silu', 'layer_norm']")
    expect_runs("silu and LayerNorm fusion", m, {"x": x}, want, dlrun)

    # a transformer's MLP: MatMul of [batch, tokens, d] by a constant, + bias, spelled-out GELU ->
    # reshape, one linear layer with its bias (GELU then fuses into it at run time), reshape
    from math import erf
    t = rng.uniform(-2, 2, (1, 7, 6)).astype(np.float32)
    w, c = rng.uniform(-1, 1, (6, 9)).astype(np.float32), rng.uniform(-1, 1, 9).astype(np.float32)
    gelu_nodes = [helper.make_node("Div", ["a", "sq2"], ["q"]), helper.make_node("Erf", ["q"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["a", "e1"], ["ae"]),
                  helper.make_node("Mul", ["ae", "half"], ["y"])]
    consts = [("w", w), ("c", c), ("sq2", np.array(np.sqrt(2), np.float32)), ("one", np.array(1, np.float32)),
              ("half", np.array(0.5, np.float32))]
    m = model([helper.make_node("MatMul", ["t", "w"], ["mm"]), helper.make_node("Add", ["mm", "c"], ["a"])] + gelu_nodes,
              [vi("t", [1, 7, 6])], [vi("y", None)], consts)
    a = t.astype(np.float64) @ w + c
    want = 0.5 * a * (1 + np.vectorize(erf)(a / np.sqrt(2)))
    ops = layer_ops(m)
    if ops != ["reshape", "linear", "gelu", "reshape"]:
        failures.append(f"MatMul + bias + GELU: dlrun ops {ops}, wanted ['reshape', 'linear', 'gelu', 'reshape']")
    expect_runs("MatMul + bias + GELU as one linear layer", m, {"t": t}, want, dlrun)
    # the reshapes around the layer write the batch as -1: dlrun --batch 3 runs the same model
    t3 = rng.uniform(-2, 2, (3, 7, 6)).astype(np.float32)
    a3 = t3.astype(np.float64) @ w + c
    expect_runs("MatMul + bias + GELU at --batch 3", m, {"t": t3}, 0.5 * a3 * (1 + np.vectorize(erf)(a3 / np.sqrt(2))),
                dlrun, run_extra=("--batch", "3"))
    # Einsum on runtime tensors (ONNX's own Einsum tests are all float64): transposes, sums and a
    # batched matmul; MaxViT's attention equations among them
    def einsum(eq, *arrays, const=()):
        names = [f"e{i}" for i in range(len(arrays))]
        ins = [vi(n, list(a.shape)) for n, a in zip(names, arrays) if n not in const]
        inits = [(n, a) for n, a in zip(names, arrays) if n in const]
        m = model([helper.make_node("Einsum", names, ["y"], equation=eq)], ins, [vi("y", None)], inits, opset=12)
        expect_runs(f"Einsum '{eq}'", m, {n: a for n, a in zip(names, arrays) if n not in const},
                    np.einsum(eq, *[a.astype(np.float64) for a in arrays]), dlrun)
    u = lambda *shape: rng.uniform(-1, 1, shape).astype(np.float32)
    einsum("bghid,bghjd->bghij", u(1, 3, 2, 5, 4), u(1, 3, 2, 7, 4))
    einsum("bghij,bghjd->bghid", u(1, 3, 2, 5, 7), u(1, 3, 2, 7, 4))
    einsum("ij,jk", u(3, 5), u(5, 4))
    einsum("bij,kj->bki", u(2, 3, 5), u(4, 5), const=("e1",))
    einsum("i,j->ij", u(3), u(4))
    einsum("i,i->", u(6), u(6))
    einsum("ijk->kj", u(2, 3, 4))
    einsum("ijk->", u(2, 3, 4))
    expect_error("Einsum with an ellipsis", model([helper.make_node("Einsum", ["x"], ["y"], equation="...ii->...i")],
                                                 [vi("x", [2, 3, 3])], [vi("y", None)], opset=12), "ellipses")
    expect_error("Einsum of a diagonal", model([helper.make_node("Einsum", ["x"], ["y"], equation="ii->i")],
                                              [vi("x", [3, 3])], [vi("y", None)], opset=12), "once")

    # the product read twice: the bias stays an add of its own (the other reader needs it without)
    m = model([helper.make_node("MatMul", ["t", "w"], ["mm"]), helper.make_node("Add", ["mm", "c"], ["a"]),
               helper.make_node("Mul", ["a", "mm"], ["y"])], [vi("t", [1, 7, 6])], [vi("y", None)], [("w", w), ("c", c)])
    ops = layer_ops(m)
    if ops.count("linear") != 1 or "add" not in ops:
        failures.append(f"MatMul read twice: dlrun ops {ops}, wanted one linear layer and an add")
    p = t.astype(np.float64) @ w
    expect_runs("MatMul read twice keeps its add", m, {"t": t}, (p + c) * p, dlrun)

    # an operand transposed in its last two dimensions is the matmul's trans_a / trans_b: attention's
    # K^T as a pure swap (no transpose left), or [tokens, heads, d] by [1, 2, 0] (a transpose by
    # [1, 0, 2] that copies whole rows, then the swap); read twice, the transpose stays
    q, k = u(3, 5, 4), u(3, 7, 4)
    m = model([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), helper.make_node("MatMul", ["q", "kt"], ["y"])],
              [vi("q", [3, 5, 4]), vi("k", [3, 7, 4])], [vi("y", None)])
    if layer_ops(m) != ["matmul"]:
        failures.append(f"MatMul by a swapped operand: dlrun ops {layer_ops(m)}, wanted ['matmul']")
    expect_runs("MatMul by K^T as trans_b", m, {"q": q, "k": k}, q.astype(np.float64) @ k.transpose(0, 2, 1), dlrun)
    m = model([helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1]), helper.make_node("MatMul", ["qt", "k"], ["y"])],
              [vi("q", [3, 5, 4]), vi("k", [3, 5, 7])], [vi("y", None)])
    k2 = u(3, 5, 7)
    if layer_ops(m) != ["matmul"]:
        failures.append(f"MatMul of a swapped operand: dlrun ops {layer_ops(m)}, wanted ['matmul']")
    expect_runs("MatMul of a swapped operand as trans_a", m, {"q": q, "k": k2}, q.transpose(0, 2, 1).astype(np.float64) @ k2,
                dlrun)
    kh = u(7, 3, 4)  # [tokens, heads, d]
    want = q.astype(np.float64) @ kh.transpose(1, 2, 0)
    m = model([helper.make_node("Transpose", ["k"], ["kt"], perm=[1, 2, 0]), helper.make_node("MatMul", ["q", "kt"], ["y"])],
              [vi("q", [3, 5, 4]), vi("k", [7, 3, 4])], [vi("y", None)])
    if layer_ops(m) != ["transpose", "matmul"]:
        failures.append(f"MatMul by K^T of [tokens, heads, d]: dlrun ops {layer_ops(m)}, wanted ['transpose', 'matmul']")
    expect_runs("MatMul by K^T of [tokens, heads, d]", m, {"q": q, "k": kh}, want, dlrun)
    m = model([helper.make_node("Transpose", ["k"], ["kt"], perm=[1, 2, 0]), helper.make_node("MatMul", ["q", "kt"], ["y"]),
               helper.make_node("Mul", ["kt", "kt"], ["z"])], [vi("q", [3, 5, 4]), vi("k", [7, 3, 4])],
              [vi("y", None), vi("z", None)])
    if layer_ops(m) != ["transpose", "matmul", "mul"]:
        failures.append(f"K^T read twice: dlrun ops {layer_ops(m)}, wanted ['transpose', 'matmul', 'mul']")
    expect_runs("MatMul by K^T read twice", m, {"q": q, "k": kh}, want, dlrun)

    # ShuffleNet's channel shuffle (Reshape to 5-D, Transpose of dims 1 and 2, Reshape back) is one
    # channel_shuffle layer, at --batch 3 too; a transpose of other dims stays as it was
    xs = u(1, 12, 5, 3)
    shape5, shape4 = np.array([1, 3, 4, 5, 3], np.int64), np.array([1, 12, 5, 3], np.int64)
    def shuffle_model(perm, shape=(1, 12, 5, 3)):
        return model([helper.make_node("Reshape", ["x", "s5"], ["r5"]), helper.make_node("Transpose", ["r5"], ["t5"], perm=perm),
                      helper.make_node("Reshape", ["t5", "s4"], ["y"])], [vi("x", list(shape))], [vi("y", None)],
                     [("s5", shape5), ("s4", shape4)])
    m = shuffle_model([0, 2, 1, 3, 4])
    if layer_ops(m) != ["channel_shuffle"]:
        failures.append(f"channel shuffle: dlrun ops {layer_ops(m)}, wanted ['channel_shuffle']")
    want = xs.reshape(1, 3, 4, 5, 3).transpose(0, 2, 1, 3, 4).reshape(1, 12, 5, 3)
    expect_runs("channel shuffle as one layer", m, {"x": xs}, want, dlrun, exact=True)
    x3 = u(3, 12, 5, 3)
    shape5[0], shape4[0] = 0, 0  # the batch copied from the input: the model runs at any batch
    m = shuffle_model([0, 2, 1, 3, 4])
    expect_runs("channel shuffle at --batch 3", m, {"x": x3},
                x3.reshape(3, 3, 4, 5, 3).transpose(0, 2, 1, 3, 4).reshape(3, 12, 5, 3), dlrun, run_extra=("--batch", "3"),
                exact=True)
    shape5[0], shape4[0] = 1, 1
    m = shuffle_model([0, 1, 2, 4, 3])
    if "channel_shuffle" in layer_ops(m):
        failures.append(f"a transpose of the last dims became a channel_shuffle: {layer_ops(m)}")
    expect_runs("a 5-D transpose that is no shuffle", m, {"x": xs},
                xs.reshape(1, 3, 4, 5, 3).transpose(0, 1, 2, 4, 3).reshape(1, 12, 5, 3), dlrun, exact=True)



def unary(op, shape=(2, 3, 4, 5), opset=13, **attrs):
    return model([helper.make_node(op, ["x"], ["y"], **attrs)], [vi("x", list(shape))], [vi("y", None)], opset=opset)


def spelled_ops(dlrun, rng):
    """ONNX ops written as a few dlrun ops (convert.py), against NumPy; the steps of
    ThresholdedRelu and Shrink must be exact at the threshold's neighbours, and ReduceLogSumExp
    must give ONNX's infinities."""
    x = rng.uniform(-3, 3, (2, 3, 4, 5)).astype(np.float32)
    f = np.float32
    expect_runs("Elu", unary("Elu", alpha=0.7), {"x": x}, np.where(x > 0, x, 0.7 * (np.exp(np.minimum(x, 0)) - 1)), dlrun)
    sa, sg = 1.67326319217681884765625, 1.05070102214813232421875
    expect_runs("Selu", unary("Selu"), {"x": x}, sg * np.where(x > 0, x, sa * (np.exp(np.minimum(x, 0)) - 1)), dlrun)
    expect_runs("Celu", unary("Celu", alpha=2.0), {"x": x}, np.maximum(x, 0) + np.minimum(0, 2 * (np.exp(x / 2) - 1)), dlrun)
    expect_runs("Softsign", unary("Softsign"), {"x": x}, x / (1 + np.abs(x)), dlrun)
    slope = rng.uniform(0, 0.5, (3, 1, 1)).astype(np.float32)
    expect_runs("PRelu with a per-channel constant slope",
                model([helper.make_node("PRelu", ["x", "s"], ["y"])], [vi("x", [2, 3, 4, 5])], [vi("y", None)], [("s", slope)]),
                {"x": x}, np.where(x >= 0, x, slope * x), dlrun)
    expect_runs("PRelu with a runtime slope", model([helper.make_node("PRelu", ["x", "s"], ["y"])],
                                                     [vi("x", [2, 3, 4, 5]), vi("s", [5])], [vi("y", None)]),
                {"x": x, "s": x[0, 0, 0]}, np.where(x >= 0, x, x[0, 0, 0] * x), dlrun)
    expect_error("PRelu slope that does not broadcast to x",
                 model([helper.make_node("PRelu", ["x", "s"], ["y"], name="p")], [vi("x", [2, 3, 4, 5])], [vi("y", None)],
                       [("s", np.ones((2, 3, 4, 5, 1), np.float32))]),
                 "node 'p' (PRelu): slope [2, 3, 4, 5, 1] does not broadcast to the input [2, 3, 4, 5]")
    ys = [rng.uniform(-1, 1, s).astype(np.float32) for s in ((2, 3, 4, 5), (4, 1), (5,))]
    expect_runs("Mean of three, broadcasting", model([helper.make_node("Mean", ["p", "q", "r"], ["y"])],
                                                     [vi("p", [2, 3, 4, 5]), vi("q", [4, 1]), vi("r", [5])], [vi("y", None)]),
                dict(zip("pqr", ys)), (ys[0] + ys[1] + ys[2]) / 3, dlrun)
    expect_runs("ReduceL1", unary("ReduceL1", axes=[1, 3], keepdims=0), {"x": x}, np.abs(x).sum((1, 3)), dlrun)
    expect_runs("ReduceLogSum", unary("ReduceLogSum", axes=[-1]), {"x": np.abs(x)},
                np.log(np.abs(x).sum(-1, keepdims=True)), dlrun)
    big = x * 40  # exp overflows float32 without the maximum subtracted
    want = np.log(np.exp(big.astype(np.float64)).sum((0, 2))).astype(np.float32)
    expect_runs("ReduceLogSumExp of large values", unary("ReduceLogSumExp", axes=[0, 2], keepdims=0), {"x": big}, want, dlrun)
    inf = np.array([[1, np.inf, 2], [-np.inf, -np.inf, -np.inf], [-np.inf, 3, -1]], np.float32)
    with np.errstate(divide="ignore", over="ignore"):
        want = np.log(np.exp(inf.astype(np.float64)).sum(1)).astype(np.float32)
    expect_runs("ReduceLogSumExp with infinities", unary("ReduceLogSumExp", (3, 3), axes=[1], keepdims=0), {"x": inf}, want,
                dlrun, exact=True)
    d2s = x.reshape(2, 12, 1, 5)
    b, c, h, w = d2s.shape
    for mode in ("DCR", "CRD"):
        v = d2s.reshape(b, 2, 2, 3, h, w).transpose(0, 3, 4, 1, 5, 2) if mode == "DCR" else \
            d2s.reshape(b, 3, 2, 2, h, w).transpose(0, 1, 4, 2, 5, 3)
        expect_runs(f"DepthToSpace {mode}", unary("DepthToSpace", (2, 12, 1, 5), blocksize=2, mode=mode), {"x": d2s},
                    v.reshape(b, 3, 2, 10), dlrun, exact=True)
    s2d = x.reshape(2, 3, 4, 5)[:, :, :, :4]
    expect_runs("SpaceToDepth", unary("SpaceToDepth", (2, 3, 4, 4), blocksize=2), {"x": np.ascontiguousarray(s2d)},
                s2d.reshape(2, 3, 2, 2, 2, 2).transpose(0, 3, 5, 1, 2, 4).reshape(2, 12, 2, 2), dlrun, exact=True)
    # the steps: values at and next to the threshold, zeros, infinities
    t = f(1.5)
    edge = np.array([t, np.nextafter(t, f(9)), np.nextafter(t, f(0)), -t, np.nextafter(-t, f(-9)), np.nextafter(-t, f(0)),
                     0, -0.0, np.inf, -np.inf, 3e38, -3e38, 1e-30, -1e-30, 2.5, -2.5], np.float32)
    expect_runs("ThresholdedRelu at its threshold", unary("ThresholdedRelu", (16,), alpha=1.5), {"x": edge},
                np.where(edge > t, edge, 0).astype(np.float32), dlrun, exact=True)
    e2 = np.concatenate([edge, -edge])
    expect_runs("ThresholdedRelu below 0", unary("ThresholdedRelu", (32,), alpha=-1.5), {"x": e2},
                np.where(e2 > -t, e2, 0).astype(np.float32), dlrun, exact=True)
    for lambd, bias in ((1.5, 0.0), (1.5, 1.5), (1.5, 0.25)):
        want = np.where(edge < -lambd, edge + f(bias), np.where(edge > lambd, edge - f(bias), 0)).astype(np.float32)
        expect_runs(f"Shrink lambd {lambd} bias {bias} at its thresholds", unary("Shrink", (16,), lambd=lambd, bias=bias),
                    {"x": edge}, want, dlrun, exact=True)
    expect_error("Shrink with a negative lambd", model([helper.make_node("Shrink", ["x"], ["y"], name="s", lambd=-1.0)],
                                                       [vi("x", [4])], [vi("y", None)]),
                 "node 's' (Shrink): lambd -1.0 is negative")
    expect_runs("GlobalMaxPool", unary("GlobalMaxPool"), {"x": x}, x.max((2, 3), keepdims=True), dlrun)
    xl = np.abs(x)
    sq = np.pad(xl * xl, [(0, 0), (1, 1), (0, 0), (0, 0)])
    want = xl / (2 + 1e-2 / 3 * (sq[:, :3] + sq[:, 1:4] + sq[:, 2:5])) ** 0.75
    expect_runs("LRN", unary("LRN", size=3, alpha=1e-2, bias=2.0), {"x": xl}, want, dlrun)
    m = x.mean((0, 2, 3), keepdims=True)
    expect_runs("MeanVarianceNormalization", unary("MeanVarianceNormalization"), {"x": x},
                (x - m) / (np.sqrt((x * x).mean((0, 2, 3), keepdims=True) - m * m) + 1e-9), dlrun)
    expect_runs("CastLike to float32 is the tensor itself",
                model([helper.make_node("CastLike", ["x", "l"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
                      [vi("x", [2, 3, 4, 5])], [vi("y", None)], [("l", np.zeros(1, np.float32))]), {"x": x}, np.maximum(x, 0), dlrun)
    expect_error("CastLike of a runtime tensor to double",
                 model([helper.make_node("CastLike", ["x", "l"], ["y"], name="c")], [vi("x", [2, 3])], [vi("y", None)],
                       [("l", np.zeros(1, np.float64))]),
                 "node 'c' (CastLike): casts a runtime tensor to double; dlrun runs float32 tensors only")
    # every input a constant: folded, nothing of the op left at run time
    k = rng.uniform(-2, 2, (3, 4)).astype(np.float32)
    ops = layer_ops(model([helper.make_node("Elu", ["k"], ["e"]), helper.make_node("ReduceLogSumExp", ["e"], ["r"], axes=[0]),
                           helper.make_node("Add", ["x", "r"], ["y"])], [vi("x", [3, 4])], [vi("y", None)], [("k", k)]))
    if ops != ["add"]:
        failures.append(f"Elu and ReduceLogSumExp of constants: dlrun ops {ops}, wanted ['add'] (folded)")
    else:
        print("ok    Elu and ReduceLogSumExp of constants fold")


def scalar_vi(name, t):
    return helper.make_tensor_value_info(name, t, [])


def control_flow(dlrun, rng):
    """Loops with constant trip counts unroll, Ifs with constant conditions inline, sequences are
    lists known while converting (PyTorch's torch.tensor_split and list unpacking export so)."""
    x = rng.uniform(-2, 2, (2, 6, 5)).astype(np.float32)
    xi = vi("x", [2, 6, 5])
    B, I = TensorProto.BOOL, TensorProto.INT64
    seq_vi = helper.make_tensor_sequence_value_info
    # tensor_split(x, (2,), dim=1) as PyTorch writes it: a Loop over the bounds appends slices to a
    # sequence, one more slice after it; then the parts are taken out and recombined
    bounds = np.array([0, 2], np.int64)
    body = helper.make_graph(
        [helper.make_node("Gather", ["bounds", "i"], ["b0"]), helper.make_node("Add", ["i", "one"], ["i1"]),
         helper.make_node("Gather", ["bounds_hi", "i"], ["b1"]),
         helper.make_node("Unsqueeze", ["b0", "zero"], ["s0"]), helper.make_node("Unsqueeze", ["b1", "zero"], ["s1"]),
         helper.make_node("Slice", ["x", "s0", "s1", "axis1"], ["part"]),
         helper.make_node("SequenceInsert", ["seq_in", "part"], ["seq_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [scalar_vi("i", I), scalar_vi("cond_in", B), seq_vi("seq_in", TensorProto.FLOAT, None)],
        [scalar_vi("cond_out", B), seq_vi("seq_out", TensorProto.FLOAT, None)])
    m = model([helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
               helper.make_node("Loop", ["trip", "yes", "empty"], ["seq"], body=body),
               helper.make_node("Slice", ["x", "from", "to", "axis1"], ["tail"]),
               helper.make_node("SequenceInsert", ["seq", "tail"], ["all"]),
               helper.make_node("SequenceAt", ["all", "zero_s"], ["p0"]),
               helper.make_node("SequenceAt", ["all", "minus_one"], ["p2"]),
               helper.make_node("Relu", ["p0"], ["r0"]),
               helper.make_node("Concat", ["p2", "r0"], ["y"], axis=1)],
              [xi], [vi("y", None)],
              [("bounds", bounds), ("bounds_hi", np.array([2, 4], np.int64)), ("one", np.array(1, np.int64)),
               ("zero", np.array([0], np.int64)), ("axis1", np.array([1], np.int64)), ("trip", np.array(2, np.int64)),
               ("yes", np.array(True)), ("from", np.array([4], np.int64)), ("to", np.array([6], np.int64)),
               ("zero_s", np.array(0, np.int64)), ("minus_one", np.array(-1, np.int64))])
    expect_runs("Loop building a sequence (torch.tensor_split)", m, {"x": x},
                np.concatenate([x[:, 4:], np.maximum(x[:, :2], 0)], axis=1), dlrun)
    ops = layer_ops(m)
    if sorted(ops) != ["concat", "relu", "slice", "slice"]:
        failures.append(f"Loop building a sequence: dlrun ops {ops}, wanted two slices (the one the loop does not "
                        "read is pruned), a relu and a concat")

    # a Loop whose scan output is a runtime tensor per iteration, carrying a runtime sum
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT), helper.make_node("Mul", ["x", "f"], ["xf"]),
         helper.make_node("Add", ["acc_in", "xf"], ["acc_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Sigmoid", ["xf"], ["scan"])],
        "body", [scalar_vi("i", I), scalar_vi("cond_in", B), vi("acc_in", [2, 6, 5])],
        [scalar_vi("cond_out", B), vi("acc_out", [2, 6, 5]), vi("scan", [2, 6, 5])])
    m = model([helper.make_node("Loop", ["trip", "", "x"], ["acc", "scans"], body=body),
               helper.make_node("ReduceSum", ["scans"], ["s"], axes=[0], keepdims=0),
               helper.make_node("Add", ["acc", "s"], ["y"])],
              [xi], [vi("y", None)], [("trip", np.array(3, np.int64))])
    x64 = x.astype(np.float64)
    sig = sum(1 / (1 + np.exp(-x64 * k)) for k in range(3))
    expect_runs("Loop with a carried tensor and a scan output", m, {"x": x}, x64 * (1 + 0 + 1 + 2) + sig, dlrun)

    # If on a shape check folds to one branch; sequences split, erased, inserted, counted, joined
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", None)])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", None)])
    m = model([helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "one"], ["d1"]),
               helper.make_node("Equal", ["d1", "six"], ["is6"]),
               helper.make_node("If", ["is6"], ["z"], then_branch=then_g, else_branch=else_g),
               helper.make_node("SplitToSequence", ["z"], ["parts"], axis=1, keepdims=0),
               helper.make_node("SequenceErase", ["parts", "zero"], ["rest"]),
               helper.make_node("SequenceConstruct", ["x0", "x0"], ["pair"]),
               helper.make_node("SequenceAt", ["pair", "one"], ["x0b"]),
               helper.make_node("SequenceInsert", ["rest", "x0b", "one"], ["mixed"]),
               helper.make_node("SequenceLength", ["mixed"], ["n"]), helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
               helper.make_node("ConcatFromSequence", ["mixed"], ["cat"], axis=1, new_axis=1),
               helper.make_node("Mul", ["cat", "nf"], ["y"])],
              [xi], [vi("y", None)],
              [("one", np.array(1, np.int64)), ("six", np.array(6, np.int64)), ("zero", np.array(0, np.int64)),
               ("x0", np.full((2, 5), 0.5, np.float32))])
    parts = [-x[:, k] for k in range(1, 6)]
    want = np.stack(parts[:1] + [np.full((2, 5), 0.5)] + parts[1:], axis=1) * 6
    expect_runs("If on a constant condition, and sequence ops", m, {"x": x}, want, dlrun)
    split = model([helper.make_node("SplitToSequence", ["x", "four"], ["parts"], axis=1),
                   helper.make_node("ConcatFromSequence", ["parts"], ["y"], axis=2)],
                  [xi], [vi("y", None)], [("four", np.array(4, np.int64))])
    expect_error("ConcatFromSequence of unequal parts", split, "does not match")

    # what cannot be resolved while converting gets one line
    expect_error("If on a runtime condition",
                 model([helper.make_node("If", ["x"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
                       [xi], [vi("y", None)]),
                 "node 'if' (If): If's condition 'x' must be a constant")
    endless = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                                 helper.make_node("Identity", ["v_in"], ["v_out"])],
                                "body", [scalar_vi("i", I), scalar_vi("cond_in", B), vi("v_in", [2, 6, 5])],
                                [scalar_vi("cond_out", B), vi("v_out", [2, 6, 5])])
    expect_error("Loop with a huge trip count",
                 model([helper.make_node("Loop", ["trip", "", "x"], ["y"], name="lp", body=endless)], [xi], [vi("y", None)],
                       [("trip", np.array(10**12, np.int64))]),
                 "node 'lp' (Loop): the loop runs more than 4096 iterations")
    chain = [helper.make_node("Identity", ["v_in" if j == 0 else f"v{j}"], [f"v{j + 1}"]) for j in range(99)]
    long_body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"])] + chain +
                                  [helper.make_node("Identity", ["v99"], ["v_out"])],
                                  "body", [scalar_vi("i", I), scalar_vi("cond_in", B), vi("v_in", [2, 6, 5])],
                                  [scalar_vi("cond_out", B), vi("v_out", [2, 6, 5])])
    expect_error("Loop unrolling past the node limit",
                 model([helper.make_node("Loop", ["trip", "", "x"], ["y"], name="lp", body=long_body)], [xi],
                       [vi("y", None)], [("trip", np.array(4000, np.int64))]),
                 "node 'lp' (Loop): unrolling loops and inlining branches would convert more than 200000 nodes")
    expect_error("Loop with no end", model([helper.make_node("Loop", ["", "", "x"], ["y"], name="lp", body=endless)], [xi],
                                           [vi("y", None)]), "never ends")
    expect_error("SequenceAt past the end",
                 model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
                        helper.make_node("SequenceAt", ["s", "two"], ["y"], name="at")], [xi], [vi("y", None)],
                       [("two", np.array(2, np.int64))]),
                 "node 'at' (SequenceAt): position 2 is outside a sequence of 2 item(s)")
    expect_error("a sequence as an output",
                 model([helper.make_node("SplitToSequence", ["x"], ["y"], axis=0)], [xi],
                       [seq_vi("y", TensorProto.FLOAT, None)]),
                 "output 'y' is a sequence")


if __name__ == "__main__":
    main()
