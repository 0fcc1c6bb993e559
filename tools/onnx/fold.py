"""fold.py — NumPy evaluation of ONNX ops whose inputs are all constants (constant folding).

Used by convert.py: exporters compute shapes, masks and indices inside the graph (Shape ->
Gather -> Concat -> Reshape, Range -> Less -> Where, ...); with every input known these fold to
constants and the dlrun model stays static. Each function takes the node's attributes (a dict),
its inputs (NumPy arrays; None for an omitted optional input) and the opset, and returns the
list of outputs. FOLDERS names the ops that have *only* a folding here (dlrun has no runtime op
for them); the ops dlrun also runs fold through the same functions from convert.py.
"""
import math

import numpy as np
import onnx


class FoldError(ValueError):
    """The inputs or attributes are outside what this folding handles."""


def np_type(elem_type):
    if hasattr(onnx.helper, "tensor_dtype_to_np_dtype"):
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    return onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[elem_type]


def ints(v):
    return [int(i) for i in np.asarray(v).reshape(-1)]


# ---- elementwise ----

def div(a, b):
    """ONNX Div: true division for floats, truncation toward zero for integers."""
    a, b = np.asarray(a), np.asarray(b)
    if np.issubdtype(a.dtype, np.integer):
        q = np.abs(a) // np.abs(b)
        return (q * np.sign(a) * np.sign(b)).astype(a.dtype)
    return (a / b).astype(a.dtype)


def pow_(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)


def erf(a):
    a = np.asarray(a)
    return np.vectorize(math.erf, otypes=[np.float64])(a).astype(a.dtype) if a.size else a.copy()


def softplus(a):
    a = np.asarray(a)
    return np.logaddexp(0, a.astype(np.float64)).astype(a.dtype)


def hard_sigmoid(a, alpha, beta):
    a = np.asarray(a)
    return np.clip(alpha * a.astype(np.float64) + beta, 0, 1).astype(a.dtype)


def gelu(a, approximate):
    a = np.asarray(a)
    x = a.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1 + erf(x / math.sqrt(2)))
    return y.astype(a.dtype)


def _same(fn):
    """A unary NumPy function whose result keeps the input's dtype."""
    return lambda a: np.asarray(fn(np.asarray(a))).astype(np.asarray(a).dtype)


UNARY = {
    "Sqrt": _same(np.sqrt), "Exp": _same(np.exp), "Log": _same(np.log), "Tanh": _same(np.tanh),
    "Erf": erf, "Neg": _same(np.negative), "Abs": _same(np.abs), "Reciprocal": _same(lambda a: 1 / a),
    "Softplus": softplus, "Floor": _same(np.floor), "Ceil": _same(np.ceil), "Round": _same(np.round),
    "Sign": _same(np.sign), "Not": np.logical_not, "IsNaN": np.isnan,
    "Sin": _same(np.sin), "Cos": _same(np.cos),
}

BINARY = {
    "Add": lambda a, b: (np.asarray(a) + np.asarray(b)).astype(np.asarray(a).dtype),
    "Sub": lambda a, b: (np.asarray(a) - np.asarray(b)).astype(np.asarray(a).dtype),
    "Mul": lambda a, b: (np.asarray(a) * np.asarray(b)).astype(np.asarray(a).dtype),
    "Div": div, "Pow": pow_,
    "Min": lambda a, b: np.minimum(a, b), "Max": lambda a, b: np.maximum(a, b),
    "Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
    "BitShift": None,  # not folded
}


def _unary_folder(op):
    return lambda at, ins, opset: [UNARY[op](ins[0])]


def _binary_folder(op):
    return lambda at, ins, opset: [BINARY[op](ins[0], ins[1])]


def _variadic(fn):
    def f(at, ins, opset):
        acc = ins[0]
        for v in ins[1:]:
            acc = fn(acc, v)
        return [np.asarray(acc)]
    return f


def _mod(at, ins, opset):
    a, b = np.asarray(ins[0]), np.asarray(ins[1])
    if int(at.get("fmod", 0)):
        return [np.fmod(a, b).astype(a.dtype)]
    if not np.issubdtype(a.dtype, np.integer):
        raise FoldError("Mod with fmod=0 is defined for integers only")
    return [np.mod(a, b).astype(a.dtype)]


def _is_inf(at, ins, opset):
    a = np.asarray(ins[0])
    pos, neg = int(at.get("detect_positive", 1)), int(at.get("detect_negative", 1))
    return [np.isinf(a) & (((a > 0) & bool(pos)) | ((a < 0) & bool(neg)))]


# ---- shapes, indices, masks ----

def _constant_of_shape(at, ins, opset):
    value = np.zeros(1, np.float32)
    if "value" in at:
        from onnx import numpy_helper
        value = numpy_helper.to_array(at["value"]).reshape(-1)
    return [np.full(tuple(ints(ins[0])), value[0], dtype=value.dtype)]


def _range(at, ins, opset):
    start, limit, delta = (np.asarray(v).reshape(()) for v in ins)
    n = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    return [(start + np.arange(n, dtype=np.float64 if start.dtype.kind == "f" else np.int64) * delta).astype(start.dtype)]


def _where(at, ins, opset):
    c, x, y = ins
    return [np.where(np.asarray(c), x, y).astype(np.result_type(np.asarray(x), np.asarray(y)))]


def broadcast_shape(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise FoldError(f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


def _expand(at, ins, opset):
    x = np.asarray(ins[0])
    return [np.broadcast_to(x, broadcast_shape(x.shape, ints(ins[1]))).copy()]


def _tile(at, ins, opset):
    return [np.tile(np.asarray(ins[0]), ints(ins[1]))]


def gather(data, indices, axis):
    data, indices = np.asarray(data), np.asarray(indices)
    axis = axis % max(data.ndim, 1)
    idx = np.where(indices < 0, indices + data.shape[axis], indices)
    if idx.size and (idx.min() < 0 or idx.max() >= data.shape[axis]):
        raise FoldError(f"index out of range for dimension {data.shape[axis]}")
    return np.take(data, idx, axis=axis)


def _gather(at, ins, opset):
    return [gather(ins[0], ins[1], int(at.get("axis", 0)))]


def _gather_elements(at, ins, opset):
    data, idx = np.asarray(ins[0]), np.asarray(ins[1])
    axis = int(at.get("axis", 0)) % data.ndim
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [np.take_along_axis(data, idx, axis=axis)]


def _gather_nd(at, ins, opset):
    data, idx = np.asarray(ins[0]), np.asarray(ins[1])
    if int(at.get("batch_dims", 0)):
        raise FoldError("GatherND with batch_dims is not folded")
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    out = [data[tuple(int(i) for i in row)] for row in flat]
    return [np.asarray(out, dtype=data.dtype).reshape(idx.shape[:-1] + data.shape[k:])]


def slice_ranges(shape, starts, ends, axes, steps):
    """Per axis of shape, ONNX Slice's effective (start, end, step), clamped as the spec says;
    axes not listed get (0, dim, 1). Raises FoldError on a repeated axis or a zero step."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise FoldError("starts, ends, axes and steps differ in length")
    out = [(0, d, 1) for d in shape]
    seen = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = a + rank if a < 0 else a
        if not 0 <= a < rank or a in seen:
            raise FoldError(f"axis {a} is out of range or repeated")
        seen.add(a)
        if st == 0:
            raise FoldError("a step of 0")
        d = shape[a]
        s, e = int(s), int(e)
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, -1), d - 1), min(max(e, -1), d - 1)
        out[a] = (s, e, st)
    return out


def slice_inputs(at, ins, opset):
    """Slice's starts, ends, axes, steps: attributes before opset 10, inputs since."""
    if opset < 10:
        return at["starts"], at["ends"], at.get("axes"), None
    axes = ins[3] if len(ins) > 3 and ins[3] is not None else None
    steps = ins[4] if len(ins) > 4 and ins[4] is not None else None
    return ints(ins[1]), ints(ins[2]), None if axes is None else ints(axes), None if steps is None else ints(steps)


def _slice(at, ins, opset):
    x = np.asarray(ins[0])
    rs = slice_ranges(x.shape, *slice_inputs(at, ins, opset))
    return [x[tuple(slice(s, e if e >= 0 else None, st) for s, e, st in rs)].copy()]


def _scatter_nd(at, ins, opset):
    data, idx, upd = (np.asarray(v) for v in ins)
    red = at.get("reduction", "none")
    out = data.copy()
    k = idx.shape[-1]
    for row, u in zip(idx.reshape(-1, k), upd.reshape((-1,) + data.shape[k:])):
        at_ = tuple(int(i) for i in row)
        if red == "none":
            out[at_] = u
        elif red == "add":
            out[at_] = out[at_] + u
        elif red == "mul":
            out[at_] = out[at_] * u
        else:
            raise FoldError(f"reduction '{red}' is not folded")
    return [out]


def _scatter_elements(at, ins, opset):
    data, idx, upd = (np.asarray(v) for v in ins)
    if at.get("reduction", "none") != "none":
        raise FoldError("ScatterElements with a reduction is not folded")
    axis = int(at.get("axis", 0)) % data.ndim
    out = data.copy()
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[axis] = int(idx[pos])
        out[tuple(tgt)] = upd[pos]
    return [out]


def _trilu(at, ins, opset):
    x = np.asarray(ins[0])
    k = int(np.asarray(ins[1]).reshape(())) if len(ins) > 1 and ins[1] is not None else 0
    return [np.triu(x, k) if int(at.get("upper", 1)) else np.tril(x, k)]


def _size(at, ins, opset):
    return [np.array(np.asarray(ins[0]).size, dtype=np.int64)]


def _non_zero(at, ins, opset):
    return [np.array(np.nonzero(np.asarray(ins[0])), dtype=np.int64).reshape(np.asarray(ins[0]).ndim, -1)]


def _cum_sum(at, ins, opset):
    x = np.asarray(ins[0])
    axis = int(np.asarray(ins[1]).reshape(())) % x.ndim
    if int(at.get("reverse", 0)):
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if int(at.get("exclusive", 0)):
        y = y - x
    return [np.flip(y, axis) if int(at.get("reverse", 0)) else y]


def _arg(fn):
    def f(at, ins, opset):
        x = np.asarray(ins[0])
        axis = int(at.get("axis", 0)) % x.ndim
        if int(at.get("select_last_index", 0)):
            y = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            y = fn(x, axis=axis)
        y = y.astype(np.int64)
        return [np.expand_dims(y, axis) if int(at.get("keepdims", 1)) else y]
    return f


def reduce_axes(at, ins, opset, rank, axes_input_from):
    """The axes a Reduce* node reduces (None: all, [] with noop_with_empty_axes: none)."""
    if "axes" in at:
        axes = [int(a) for a in at["axes"]]
    elif opset >= axes_input_from and len(ins) > 1 and ins[1] is not None:
        axes = ints(ins[1])
    else:
        axes = []
    if not axes:
        return [] if int(at.get("noop_with_empty_axes", 0)) else list(range(rank))
    out = sorted({a + rank if a < 0 else a for a in axes})
    if any(not 0 <= a < rank for a in out):
        raise FoldError(f"axes {axes} out of range for rank {rank}")
    return out


REDUCE_NP = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min,
             "ReduceProd": np.prod, "ReduceL2": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
             "ReduceSumSquare": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
             "ReduceL1": lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims),
             "ReduceLogSum": lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)),
             "ReduceLogSumExp": lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))}
# The opset from which each Reduce* takes its axes as an input instead of an attribute.
REDUCE_AXES_INPUT = {"ReduceSum": 13}


def _reduce(op):
    def f(at, ins, opset):
        x = np.asarray(ins[0])
        axes = reduce_axes(at, ins, opset, x.ndim, REDUCE_AXES_INPUT.get(op, 18))
        if not axes:
            return [x.copy()]
        y = REDUCE_NP[op](x.astype(np.float64) if x.dtype.kind == "f" else x, axis=tuple(axes),
                          keepdims=bool(int(at.get("keepdims", 1))))
        return [np.asarray(y).astype(x.dtype)]
    return f


def _split(at, ins, opset, n_out):
    x = np.asarray(ins[0])
    axis = int(at.get("axis", 0)) % x.ndim
    return [x[tuple(slice(None) if d != axis else slice(b, e) for d in range(x.ndim))].copy()
            for b, e in split_bounds(at, ins, opset, x.shape[axis], n_out)]


def split_bounds(at, ins, opset, dim, n_out):
    """Split's [begin, end) along its axis for each output."""
    if "split" in at:
        sizes = [int(s) for s in at["split"]]
    elif opset >= 13 and len(ins) > 1 and ins[1] is not None:
        sizes = ints(ins[1])
    else:
        n = int(at.get("num_outputs", n_out))
        each = -(-dim // n)
        sizes = [min(each, dim - i * each) for i in range(n)]
    if sum(sizes) != dim or len(sizes) != n_out or min(sizes) < 0:
        raise FoldError(f"split sizes {sizes} do not cut dimension {dim} into {n_out} parts")
    bounds, at_ = [], 0
    for s in sizes:
        bounds.append((at_, at_ + s))
        at_ += s
    return bounds


# ---- activations, reductions and moves that dlrun runs as a few of its ops (convert.py) ----

def _f64(fn):
    """A float op computed in float64 and returned in the input's dtype."""
    def f(at, ins, opset):
        x = np.asarray(ins[0])
        return [np.asarray(fn(at, x.astype(np.float64), ins, opset)).astype(x.dtype)]
    return f


def _elu(at, x, ins, opset):
    a = float(at.get("alpha", 1.0))
    return np.clip(x, 0, np.inf) + (np.exp(np.clip(x, -np.inf, 0)) - 1) * a


SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def _selu(at, x, ins, opset):
    a, g = float(at.get("alpha", SELU_ALPHA)), float(at.get("gamma", SELU_GAMMA))
    return np.clip(x, 0, np.inf) * g + (np.exp(np.clip(x, -np.inf, 0)) - 1) * a * g


def _celu(at, x, ins, opset):
    a = float(at.get("alpha", 1.0))
    return np.clip(x, 0, np.inf) + np.clip(a * (np.exp(x / a) - 1), -np.inf, 0)


def prelu_slope_shape(x_shape, slope_shape, opset):
    """The shape PRelu's slope is viewed as against x: ONNX's unidirectional broadcasting (opset
    7 on); before, one value for all, the input's own shape, or one value per channel (dimension 1)."""
    x_shape, slope_shape = tuple(x_shape), tuple(slope_shape)
    size = int(np.prod(slope_shape)) if slope_shape else 1
    if opset < 7:
        if size == 1:
            return (1,) * len(x_shape)
        if slope_shape == x_shape:
            return x_shape
        if len(slope_shape) == 1 and len(x_shape) >= 2 and size == x_shape[1]:
            return (1, size) + (1,) * (len(x_shape) - 2)
        raise FoldError(f"slope {list(slope_shape)} is neither one value, the input's shape {list(x_shape)} nor one per channel")
    if len(slope_shape) > len(x_shape) or broadcast_shape(x_shape, slope_shape) != x_shape:
        raise FoldError(f"slope {list(slope_shape)} does not broadcast to the input {list(x_shape)}")
    return slope_shape


def _prelu(at, x, ins, opset):
    s = np.asarray(ins[1], dtype=np.float64)
    s = s.reshape(prelu_slope_shape(x.shape, s.shape, opset))
    return np.clip(x, 0, np.inf) + np.clip(x, -np.inf, 0) * s


def _softsign(at, x, ins, opset):
    return x / (1 + np.abs(x))


def _shrink(at, x, ins, opset):
    lambd, bias = float(at.get("lambd", 0.5)), float(at.get("bias", 0.0))
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


def _thresholded_relu(at, x, ins, opset):
    alpha = float(at.get("alpha", 1.0))
    return np.where(x > alpha, x, 0)


def _mean(at, ins, opset):
    acc = np.asarray(ins[0])
    for v in ins[1:]:
        acc = acc + np.asarray(v)
    return [np.asarray(acc / len(ins)).astype(np.asarray(ins[0]).dtype)]


def depth_to_space_views(shape, blocksize, mode):
    """DepthToSpace as reshape -> transpose -> reshape: the 6-D view, the permutation, the result."""
    if len(shape) != 4:
        raise FoldError(f"needs a 4-D input, got {list(shape)}")
    n, c, h, w = shape
    b = int(blocksize)
    if b < 1 or c % (b * b):
        raise FoldError(f"blocksize {b}: {c} channels are not a multiple of {b * b}")
    if mode == "DCR":
        view, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        view, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    else:
        raise FoldError(f"mode '{mode}' is not DCR or CRD")
    return view, perm, (n, c // (b * b), h * b, w * b)


def space_to_depth_views(shape, blocksize):
    """SpaceToDepth as reshape -> transpose -> reshape."""
    if len(shape) != 4:
        raise FoldError(f"needs a 4-D input, got {list(shape)}")
    n, c, h, w = shape
    b = int(blocksize)
    if b < 1 or h % b or w % b:
        raise FoldError(f"blocksize {b} does not divide the spatial size {h}x{w}")
    return (n, c, h // b, b, w // b, b), (0, 3, 5, 1, 2, 4), (n, c * b * b, h // b, w // b)


def _depth_to_space(at, ins, opset):
    x = np.asarray(ins[0])
    view, perm, out = depth_to_space_views(x.shape, at["blocksize"], at.get("mode", "DCR"))
    return [np.transpose(x.reshape(view), perm).reshape(out).copy()]


def _space_to_depth(at, ins, opset):
    x = np.asarray(ins[0])
    view, perm, out = space_to_depth_views(x.shape, at["blocksize"])
    return [np.transpose(x.reshape(view), perm).reshape(out).copy()]


def _global_max_pool(at, ins, opset):
    x = np.asarray(ins[0])
    return [np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)]


def lrn_window(size):
    """LRN's channel window around c: from c - floor((size-1)/2) to c + ceil((size-1)/2)."""
    return (int(size) - 1) // 2, -(-(int(size) - 1) // 2)


def _lrn(at, x, ins, opset):
    size = int(at["size"])
    alpha, beta, bias = float(at.get("alpha", 1e-4)), float(at.get("beta", 0.75)), float(at.get("bias", 1.0))
    lo, hi = lrn_window(size)
    sq = np.pad(x * x, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    s = sum(sq[:, k:k + c] for k in range(size))
    return x / (bias + alpha / size * s) ** beta


def _mvn(at, x, ins, opset):
    axes = tuple(int(a) for a in at.get("axes", [0, 2, 3]))
    m = np.mean(x, axis=axes, keepdims=True)
    std = np.sqrt(np.mean(x * x, axis=axes, keepdims=True) - m * m)
    return (x - m) / (std + 1e-9)


def _cast_like(at, ins, opset):
    return [np.asarray(ins[0]).astype(np.asarray(ins[1]).dtype)]


def _einsum(at, ins, opset):
    return [np.einsum(at["equation"], *[np.asarray(v) for v in ins])]


FOLDERS = {
    "ConstantOfShape": _constant_of_shape, "Range": _range, "Where": _where, "Expand": _expand, "Tile": _tile,
    "Gather": _gather, "GatherElements": _gather_elements, "GatherND": _gather_nd, "Slice": _slice,
    "ScatterND": _scatter_nd, "ScatterElements": _scatter_elements, "Trilu": _trilu, "Size": _size,
    "NonZero": _non_zero, "CumSum": _cum_sum, "ArgMax": _arg(np.argmax), "ArgMin": _arg(np.argmin),
    "Mod": _mod, "IsInf": _is_inf, "Einsum": _einsum, "Split": None,  # Split: n_out, see convert.py
    "Elu": _f64(_elu), "Selu": _f64(_selu), "Celu": _f64(_celu), "PRelu": _f64(_prelu), "Softsign": _f64(_softsign),
    "Shrink": _f64(_shrink), "ThresholdedRelu": _f64(_thresholded_relu), "Mean": _mean,
    "DepthToSpace": _depth_to_space, "SpaceToDepth": _space_to_depth, "GlobalMaxPool": _global_max_pool,
    "LRN": _f64(_lrn), "MeanVarianceNormalization": _f64(_mvn), "CastLike": _cast_like,
}
for _op in UNARY:
    FOLDERS[_op] = _unary_folder(_op)
for _op, _fn in BINARY.items():
    if _fn is not None:
        FOLDERS[_op] = _binary_folder(_op)
FOLDERS["Min"] = _variadic(np.minimum)
FOLDERS["Max"] = _variadic(np.maximum)
for _op in REDUCE_NP:
    FOLDERS[_op] = _reduce(_op)
del FOLDERS["Split"]


def fold(op, at, ins, opset, n_out=1):
    """Outputs of op on constant inputs; raises FoldError (or KeyError: no folding)."""
    if op == "Split":
        return _split(at, ins, opset, n_out)
    return FOLDERS[op](at, ins, opset)
