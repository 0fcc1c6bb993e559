"""convert.py — ONNX model to dlrun model (YAML layers + safetensors weights).

Used by tools/onnx2dlrun (the command) and tools/onnx-conformance (the test runner). Runs with
Debian's /usr/bin/python3 and python3-onnx, python3-numpy; nothing else.

How it works: the ONNX graph is walked in order (ONNX requires topological order). Every tensor
is either a *constant* (an initializer, a Constant node, or something computed only from those,
folded here with numpy) or a *runtime* value with a known shape, produced by a dlrun layer.
Each supported op becomes one or a few dlrun layers named after the ONNX output they produce,
so `--output NAME=FILE` takes ONNX names. Constants that are operands (a bias added to a tensor)
become the model's `constants:`; weights of conv, linear and batchnorm layers are stored under
`<layer>.weight` and friends. Anything dlrun cannot express is a ConvertError naming the node
and what is unsupported; nothing is silently approximated. Ops whose inputs are all constants
are folded with NumPy (fold.py), and a few spelled-out patterns become one dlrun op
(x·sigmoid(x) -> silu, the erf form of GELU -> gelu, the decomposed LayerNorm -> layer_norm; see
fuse()); layers nothing uses afterwards are pruned.

16-bit weights: a constant whose values are float16 or bfloat16 (an initializer or Constant of
that type, or one only cast to float or moved: Cast, Identity, Reshape, Transpose, Squeeze,
Unsqueeze, Flatten, Dropout) is written to the safetensors file as F16 or BF16 wherever the weight or
constant it becomes still holds values exact in that type (checked when writing); everything else
is F32. Runtime tensors stay float32: dlrun computes in f32 from the f16 weights, which is what
the usual export (f16 initializers -> Cast(to=FLOAT) -> Conv/Gemm/...) asks for.
"""
import json

import numpy as np
import onnx
from onnx import numpy_helper

try:  # inside the Python package (dlrun.onnx), or run from tools/ (onnx2dlrun puts tools/onnx on the path)
    from . import fold
    from .safetensors_write import to_bf16_bits, write_safetensors
except ImportError:
    import fold
    from safetensors_write import to_bf16_bits, write_safetensors

# ONNX ops with a dlrun mapping; the helpers below fold constants or are views. tools/onnx-conformance
# runs the ONNX backend tests whose ops are all in these two lists.
MAPPED_OPS = ("Conv Relu LeakyRelu Sigmoid Clip MaxPool AveragePool GlobalAveragePool Gemm MatMul "
              "Flatten Dropout Softmax Add Sum Concat BatchNormalization "
              "Mul Sub Div Pow Min Max Sqrt Exp Log Tanh Erf Neg Abs Reciprocal HardSigmoid HardSwish "
              "Softplus Gelu Transpose Slice Pad ReduceMean ReduceSum ReduceMax ReduceMin ReduceL2 "
              "ReduceSumSquare Resize Upsample LayerNormalization Gather Split Expand Tile "
              "LogSoftmax InstanceNormalization GroupNormalization Elu Selu Celu PRelu Softsign ThresholdedRelu "
              "Shrink Mean ReduceL1 ReduceLogSum ReduceLogSumExp DepthToSpace SpaceToDepth GlobalMaxPool LRN "
              "MeanVarianceNormalization ConvTranspose Einsum").split()
HELPER_OPS = "Constant Identity Cast CastLike Reshape Squeeze Unsqueeze Shape".split()
# Ops folded when all their inputs are constants and refused on a runtime tensor (fold.py).
FOLD_ONLY_OPS = sorted(set(fold.FOLDERS) - set(MAPPED_OPS))

# Element types a runtime tensor may have (dlrun computes in f32).
RUNTIME_TYPES = {onnx.TensorProto.FLOAT: "float32"}
# Graph input types taken as int64 token ids where they only index (Gather's indices).
INDEX_TYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}

# 16-bit float element types a constant may be stored in (safetensors dtype names).
HALF_TYPES = {onnx.TensorProto.FLOAT16: "F16", onnx.TensorProto.BFLOAT16: "BF16"}
# Helper ops that only move a constant's values (Cast: to float, double or its own type).
# dlrun ops that fuse into the layer before them as its activation (core/src/fuse.c)
FUSING_ACTIVATIONS = {"relu", "gelu", "silu", "hard_swish", "clip", "leaky_relu", "sigmoid"}
MOVE_OPS = {"Identity", "Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Dropout"}


class ConvertError(Exception):
    """An ONNX construct dlrun cannot run; the message names the node and the reason."""


class UnsupportedDtype(ConvertError):
    """A runtime tensor of an element type other than float32."""


class TrainingMode(ConvertError):
    """An op asked to run in training mode; dlrun is an inference runtime."""


class Unsupported(ConvertError):
    """A variant of a mapped op dlrun has no equivalent for (an attribute value such as Resize's
    cubic mode, an empty result, runtime indices); the message says which."""


class Runtime:
    """A tensor computed at run time: the dlrun value that holds it, and its shape."""

    def __init__(self, name, shape):
        self.name, self.shape = name, tuple(int(d) for d in shape)


class Sequence:
    """An ONNX sequence whose length is known while converting: a list of values (each a
    Runtime or a constant array). Only the sequence ops take one; tensors ops refuse it."""

    def __init__(self, items):
        self.items = list(items)


def _dtype_name(elem_type):
    return onnx.TensorProto.DataType.Name(elem_type).lower()


def _elem_type(np_dtype):
    """The ONNX element type of a NumPy dtype."""
    if hasattr(onnx.helper, "np_dtype_to_tensor_dtype"):
        return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(np_dtype))
    return onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(np_dtype)]


def _to_array(t):
    """A TensorProto as a NumPy array; bfloat16 as float32 holding the exact values (NumPy has no
    bfloat16, and onnx versions differ in what to_array gives for it)."""
    if t.data_type != onnx.TensorProto.BFLOAT16:
        return numpy_helper.to_array(t)
    if t.HasField("raw_data"):
        bits = np.frombuffer(t.raw_data, dtype="<u2")
    else:
        bits = np.asarray(t.int32_data, dtype=np.uint32).astype(np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32).reshape(tuple(t.dims))


def _exact_in(arr, half):
    """Whether every value of arr (float) is exact in half ("F16" or "BF16")."""
    a = np.asarray(arr, dtype=np.float32)
    if half == "F16":
        with np.errstate(over="ignore"):
            return bool(np.array_equal(a.astype(np.float16).astype(np.float32), a, equal_nan=True))
    return not (np.ascontiguousarray(a).view(np.uint32) & 0xFFFF).any()


def _window_out(n, k, s, pb, pe, d, ceil_mode):
    """ONNX's output size of a window along one axis (explicit pads)."""
    span = n + pb + pe - ((k - 1) * d + 1)
    if span < 0:
        return 0
    return (-(-span // s) if ceil_mode else span // s) + 1


def _dlrun_window_out(n, k, s, pb, pe, d, ceil_mode):
    """dlrun's (PyTorch's) rule: in ceil mode the last window must start inside input or left pad."""
    o = _window_out(n, k, s, pb, pe, d, ceil_mode)
    if ceil_mode and o > 1 and (o - 1) * s >= n + pb:
        o -= 1
    return o


def _broadcast(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


class Converter:
    def __init__(self, model, feeds=None, dims=None):
        self.model = model
        self.graph = model.graph
        self.opset = 1
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = imp.version
        self.feeds = feeds or {}   # graph input name -> array, used where a constant is required
        self.dims = dims or {}     # symbolic dimension name -> size
        self.values = {}           # ONNX tensor name -> np.ndarray | Runtime
        self.used_names = set()    # dlrun names given out
        self.reserved = set()      # every ONNX tensor name: helpers never take one
        self.inputs = []           # (dlrun name, shape, dtype): dtype "float32", or "int64" for token ids
        self.int_values = {}       # ONNX name -> Runtime of an int64 graph input (gather's indices only)
        self.pending_inputs = {}   # ONNX graph input name -> (shape, elem_type), declared when used
        self.constants = []        # (dlrun name, shape)
        self.layers = []           # dicts, in order
        self.tensors = {}          # safetensors name -> float32 array
        self.stored = {}           # safetensors name -> "F16" | "BF16" (absent: F32)
        self.halves = {}           # ONNX constant name -> "F16" | "BF16": its values are 16-bit floats
        self.operands = {}         # ONNX constant name -> Runtime: the model constant made of it
        self.const_of = {}         # dlrun constant name -> its float32 values (for pattern fusion)
        self.layer_of = {}         # dlrun layer name -> its entry in self.layers
        self.weights_of = {}       # dlrun layer name -> its safetensors keys
        self.shape_of = {}         # dlrun name of a value some ONNX tensor names -> its shape
        self.consumed = set()      # ONNX tensor names some node or graph output reads
        self.readers = {}          # ONNX tensor name -> how many node inputs and graph outputs read it
        self.bias_free = {}        # dlrun value -> (linear layer, its input, ONNX name): a MatMul by a constant
        self.inlined = 0           # subgraph nodes converted so far (Loop bodies, If branches)
        self.node = None

    # ---- errors and names ----

    def fail(self, what, cls=ConvertError):
        n = self.node
        where = f"node '{n.name or n.output[0]}' ({n.op_type})" if n is not None else "model"
        raise cls(f"{where}: {what}")

    def fresh(self, base, own=False):
        """A new dlrun name: base itself when free (own: base is this tensor's ONNX name)."""
        name, i = base, 1
        while name in self.used_names or (name in self.reserved and not (own and name == base)):
            i += 1
            name = f"{base}_{i}"
        self.used_names.add(name)
        return name

    # ---- values ----

    def get(self, name, allow_int=False, allow_seq=False):
        """The value of `name`. An int64 (or int32) graph input, token ids, is a runtime value only
        where allow_int says the op takes it (gather's indices, Shape); elsewhere it is refused.
        A Sequence only where allow_seq says the op takes one."""
        if name in self.values:
            v = self.values[name]
            if isinstance(v, Sequence) and not allow_seq:
                self.fail(f"uses the sequence '{name}' as a tensor")
            return v
        if name in self.pending_inputs:  # a graph input first used here: declare it
            shape, elem = self.pending_inputs[name]
            if any(d == 0 for d in shape):
                self.fail(f"input '{name}' has an empty dimension {list(shape)}", Unsupported)
            if elem in INDEX_TYPES and allow_int:
                self.pending_inputs.pop(name)
                dl = self.fresh(name, own=True)
                self.inputs.append((dl, shape if shape else (1,), "int64"))
                self.int_values[name] = Runtime(dl, shape)
            elif elem not in RUNTIME_TYPES:
                self.fail(f"input '{name}' is {_dtype_name(elem)}; dlrun runs float32 tensors only (and int64 token "
                          "ids as Gather's indices)", UnsupportedDtype)
            else:
                self.pending_inputs.pop(name)
                dl = self.fresh(name, own=True)
                self.inputs.append((dl, shape if shape else (1,), "float32"))
                self.set_out(name, Runtime(dl, shape))
                return self.values[name]
        if name in self.int_values:
            if allow_int:
                return self.int_values[name]
            self.fail(f"uses the int64 tensor '{name}' as a float tensor; dlrun takes int64 tensors only as Gather's "
                      "indices", UnsupportedDtype)
        self.fail(f"uses '{name}', which nothing defines before it")

    def const(self, name, what):
        """The constant value of input `name`; a graph input is taken from the feeds."""
        if name in self.pending_inputs and name in self.feeds:
            self.pending_inputs.pop(name)
            self.values[name] = np.asarray(self.feeds[name])
        v = self.get(name)
        if isinstance(v, Runtime):
            self.fail(f"{what} '{name}' must be a constant (an initializer) for dlrun, but is computed at run time")
        return v

    def half(self, name):
        """"F16" or "BF16" when constant `name` holds 16-bit float values (see the top), else None."""
        if name is None:
            return None
        if name in self.halves:
            return self.halves[name]
        v = self.values.get(name)
        return "F16" if isinstance(v, np.ndarray) and v.dtype == np.float16 else None

    def store(self, key, arr, half):
        """Records safetensors tensor `key` (float32) and, when its values allow, a 16-bit dtype."""
        self.tensors[key] = arr
        if half and _exact_in(arr, half):
            self.stored[key] = half

    def opt_input(self, i):
        n = self.node
        return n.input[i] if len(n.input) > i and n.input[i] else None

    def runtime(self, name, as_float=False):
        """A runtime value for `name`; a constant operand becomes one of the model's constants (once;
        the ONNX value stays a constant for folding). as_float: an integer or double constant is
        converted to float32 (Pow's exponent), refused if that changes a value."""
        v = self.get(name)
        if isinstance(v, Runtime):
            return v
        if name not in self.operands:
            arr = np.asarray(v)
            if as_float and arr.dtype != np.float32:
                f = arr.astype(np.float32)
                if not np.array_equal(f.astype(arr.dtype), arr):
                    self.fail(f"constant '{name}' ({arr.dtype}) is not exact in float32")
                arr = f
            self.operands[name] = self.constant_operand(name, arr, np.shape(v))
        return self.operands[name]

    def new_constant(self, base, arr):
        """A model constant holding arr (float32), made by the converter (a fresh name)."""
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        dl = self.fresh(base)
        self.constants.append((dl, arr.shape if arr.ndim else (1,)))
        self.store(dl, arr.reshape(arr.shape if arr.ndim else (1,)), None)
        self.const_of[dl] = arr
        return Runtime(dl, arr.shape)

    def constant_operand(self, name, arr, shape):
        """Declares arr (viewed as shape) as one of the model's constants."""
        if arr.dtype != np.float32:
            self.fail(f"constant '{name}' is {arr.dtype}; dlrun runs float32 tensors only", UnsupportedDtype)
        if arr.size == 0:
            self.fail(f"constant '{name}' is empty")
        dl = self.fresh(name, own=True)
        self.constants.append((dl, tuple(shape) if len(shape) else (1,)))
        self.store(dl, arr.reshape(tuple(shape) if len(shape) else (1,)), self.half(name))
        self.const_of[dl] = arr.reshape(tuple(shape))
        return Runtime(dl, shape)

    def operand(self, name, shape):
        """Input `name` as a runtime value of the given shape (same element count)."""
        v = self.get(name)
        if isinstance(v, Runtime):
            return self.reshape_to(v, shape, self.node.output[0] + "/" + name)
        return self.constant_operand(name, np.asarray(v), shape)

    def attrs(self, known):
        out = {}
        for a in self.node.attribute:
            if a.name not in known:
                self.fail(f"attribute '{a.name}' is not supported")
            out[a.name] = onnx.helper.get_attribute_value(a)
        for k, v in out.items():
            if isinstance(v, bytes):
                out[k] = v.decode()
        return out

    # ---- emitting layers ----

    def layer(self, out_name, op, inputs, weights=None, halves=None, **attrs):
        """Adds a dlrun layer named after ONNX output out_name (or, taken, a fresh helper name).
        halves: weight suffix -> "F16"/"BF16" for weights made from 16-bit constants."""
        name = self.fresh(out_name, own=True)
        entry = {"name": name, "op": op, "inputs": [i.name for i in inputs]}
        entry.update(attrs)
        self.layers.append(entry)
        self.layer_of[name] = entry
        self.weights_of[name] = []
        for suffix, arr in (weights or {}).items():
            self.store(f"{name}.{suffix}", np.ascontiguousarray(arr, dtype=np.float32), (halves or {}).get(suffix))
            self.weights_of[name].append(f"{name}.{suffix}")
        return name

    def emit(self, onnx_out, op, inputs, shape, weights=None, halves=None, **attrs):
        if op in FUSING_ACTIVATIONS and len(inputs) == 1:
            r = self.producer(inputs[0], "reshape")
            if r and self.producer(Runtime(r["inputs"][0], ()), "linear"):
                # act(reshape(linear)) = reshape(act(linear)): the activation then fuses into the layer
                inner = Runtime(r["inputs"][0], self.shape_of[r["inputs"][0]])
                y = Runtime(self.layer(onnx_out + "/" + op, op, [inner], **attrs), inner.shape)
                self.set_out(onnx_out, self.reshape_to(y, shape, onnx_out, rows=self.batch_leads(shape)))
                return self.values[onnx_out]
        name = self.layer(onnx_out, op, inputs, weights, halves, **attrs)
        self.set_out(onnx_out, Runtime(name, shape))
        return self.values[onnx_out]

    def reshape_to(self, x, shape, base, rows=False):
        """A runtime reshape of x to shape (a helper layer), or x itself when the shape is equal.
        rows: shape's first dimension is written -1 (what is left), so that a batch given with
        dlrun --batch N, which scales x's first dimension, goes into it (a linear layer's rows)."""
        shape = tuple(shape)
        if x.shape == shape:
            return x
        if not shape:  # 0-D: dlrun keeps [1]
            shape = (1,)
        spec = list(shape)
        if rows:
            spec[0] = -1
        elif x.shape and spec[0] == x.shape[0]:
            spec[0] = 0  # "the input's first dimension": the model still runs with dlrun --batch N
        name = self.layer(base, "reshape", [x], shape=spec)
        return Runtime(name, shape)

    def batch_leads(self, shape):
        """Whether shape's first dimension is the model's batch: the first input's first dimension,
        which dlrun --batch N scales. A reshape back from a linear layer's rows then writes it -1;
        otherwise (a sequence-first [tokens, batch, d]) it stays fixed, and --batch fails there
        with a clear error instead of giving a wrong shape."""
        return bool(self.inputs) and bool(shape) and shape[0] == self.inputs[0][1][0]

    def set_out(self, onnx_out, rv):
        self.values[onnx_out] = rv
        self.shape_of[rv.name] = rv.shape

    # ---- the walk ----

    def convert(self):
        g = self.graph
        for init in g.initializer:
            self.values[init.name] = _to_array(init)
            if init.data_type in HALF_TYPES:
                self.halves[init.name] = HALF_TYPES[init.data_type]
        for inp in g.input:
            if inp.name in self.values:
                continue  # an initializer listed as an input too (older exporters)
            if not inp.type.HasField("tensor_type"):
                raise Unsupported(f"input '{inp.name}' is a {inp.type.WhichOneof('value') or 'value of no type'}; "
                                  "dlrun's inputs are tensors")
            t = inp.type.tensor_type
            shape = []
            for d in t.shape.dim:
                if d.HasField("dim_value"):
                    shape.append(d.dim_value)
                elif d.dim_param in self.dims:
                    shape.append(self.dims[d.dim_param])
                else:
                    raise ConvertError(f"input '{inp.name}': dimension '{d.dim_param or '?'}' has no size "
                                       f"(give it with --dim {d.dim_param or 'NAME'}=SIZE)")
            self.pending_inputs[inp.name] = (tuple(shape), t.elem_type)
        self.reserved = set(self.values) | set(self.pending_inputs)
        self.consumed = {o.name for o in g.output}  # every tensor something reads
        self.readers = {o.name: 1 for o in g.output}
        self.count_readers(g, set())
        self.walk(g.node)
        self.node = None
        outputs = []
        for o in g.output:
            if o.type.tensor_type.elem_type not in RUNTIME_TYPES and o.type.tensor_type.elem_type:
                raise UnsupportedDtype(f"output '{o.name}' is {_dtype_name(o.type.tensor_type.elem_type)}; "
                                       "dlrun runs float32 tensors only")
            v = self.values.get(o.name)
            if v is None and o.name in self.pending_inputs:
                v = self.get(o.name)
            if v is None:
                raise ConvertError(f"output '{o.name}' is not computed by the graph")
            if isinstance(v, Sequence):
                raise Unsupported(f"output '{o.name}' is a sequence; dlrun's outputs are tensors")
            if not isinstance(v, Runtime):
                raise ConvertError(f"output '{o.name}' is a constant; dlrun models compute their outputs")
            if v.name != o.name:  # an alias (Identity, a one-input Sum): a copy layer carries the name
                v = self.emit(o.name, "dropout", [v], v.shape)
            outputs.append(v.name)
        if not self.layers:
            raise ConvertError("the graph has no operations dlrun runs")
        self.prune(outputs)
        return outputs

    def count_readers(self, g, outer):
        """Fills reserved, consumed and readers from graph g and, recursively, its subgraphs (Loop
        bodies, If branches). A name of an enclosing graph read inside a subgraph counts twice: a
        Loop reads it once per iteration, so no fusion may assume it has one reader."""
        local = {i.name for i in g.input} | {t.name for t in g.initializer}
        for node in g.node:
            local.update(o for o in node.output if o)
        self.reserved.update(local)
        for node in g.node:
            reads = [i for i in node.input if i]
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    sub = a.g
                    self.count_readers(sub, outer | local)
                    reads += [o.name for o in sub.output]
            for i in reads:
                self.consumed.add(i)
                self.readers[i] = self.readers.get(i, 0) + (2 if i in outer else 1)

    def walk(self, nodes):
        """Converts nodes in order (the graph's, or a subgraph's being inlined)."""
        for node in nodes:
            self.node = node
            if node.domain not in ("", "ai.onnx"):
                self.fail(f"op domain '{node.domain}' is not supported")
            fn = getattr(self, "op_" + node.op_type, None)
            if fn is None and node.op_type in fold.FOLDERS:
                fn = self.fold_only
            if fn is None:
                self.fail(f"op {node.op_type} is not supported by dlrun")
            fn()
            self.follow_half(node)

    def prune(self, outputs):
        """Drops the layers and constants nothing uses: what a fusion (x·sigmoid(x) -> silu, the
        spelled-out LayerNorm -> layer_norm) left behind, with their weights."""
        used = set(outputs)
        for entry in reversed(self.layers):
            if entry["name"] in used:
                used.update(entry["inputs"])
        for entry in [e for e in self.layers if e["name"] not in used]:
            self.layers.remove(entry)
            for key in self.weights_of.get(entry["name"], []):
                self.tensors.pop(key, None)
                self.stored.pop(key, None)
        for name, shape in [c for c in self.constants if c[0] not in used]:
            self.constants.remove((name, shape))
            self.tensors.pop(name, None)
            self.stored.pop(name, None)

    def follow_half(self, node):
        """A constant only moved or cast to float keeps the 16-bit origin of its input."""
        h = self.half(node.input[0]) if node.op_type in MOVE_OPS and node.input else None
        out = node.output[0] if node.output else None
        if not h or out is None or out not in self.values or isinstance(self.values[out], Runtime):
            return
        if node.op_type == "Cast":
            to = next(onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "to")
            keeps = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE}
            keeps.add(onnx.TensorProto.FLOAT16 if h == "F16" else onnx.TensorProto.BFLOAT16)
            if to not in keeps:
                return
        self.halves[out] = h

    # ---- helper ops: constants and views ----

    def op_Constant(self):
        a = self.attrs({"value", "value_float", "value_floats", "value_int", "value_ints", "sparse_value",
                        "value_string", "value_strings"})
        if "value" in a:
            v = _to_array(a["value"])
            if a["value"].data_type in HALF_TYPES:
                self.halves[self.node.output[0]] = HALF_TYPES[a["value"].data_type]
        elif "value_float" in a:
            v = np.array(a["value_float"], dtype=np.float32)
        elif "value_floats" in a:
            v = np.array(a["value_floats"], dtype=np.float32)
        elif "value_int" in a:
            v = np.array(a["value_int"], dtype=np.int64)
        elif "value_ints" in a:
            v = np.array(a["value_ints"], dtype=np.int64)
        else:
            self.fail("only dense numeric constants are supported")
        self.values[self.node.output[0]] = v

    def op_Identity(self):
        self.attrs(set())
        self.values[self.node.output[0]] = self.get(self.node.input[0], allow_seq=True)

    def op_Cast(self):
        a = self.attrs({"to", "saturate"})
        v = self.get(self.node.input[0], allow_int=a["to"] in INDEX_TYPES)
        if isinstance(v, Runtime) and self.node.input[0] in self.int_values:  # ids to int64/int32: the ids
            self.int_values[self.node.output[0]] = v
            return
        if isinstance(v, Runtime):
            if a["to"] != onnx.TensorProto.FLOAT:
                self.fail(f"casts a runtime tensor to {_dtype_name(a['to'])}; dlrun runs float32 tensors only",
                          UnsupportedDtype)
            self.values[self.node.output[0]] = v
        else:
            if a["to"] == onnx.TensorProto.BFLOAT16:  # NumPy has none: float32 rounded to bfloat16's values
                bits = to_bf16_bits(np.asarray(v, dtype=np.float32)).astype(np.uint32) << 16
                self.values[self.node.output[0]] = bits.view(np.float32).reshape(np.shape(v))
                self.halves[self.node.output[0]] = "BF16"
                return
            np_type = onnx.helper.tensor_dtype_to_np_dtype(a["to"]) if hasattr(onnx.helper, "tensor_dtype_to_np_dtype") \
                else onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[a["to"]]
            self.values[self.node.output[0]] = np.asarray(v).astype(np_type)

    def op_Shape(self):
        a = self.attrs({"start", "end"})
        v = self.get(self.node.input[0], allow_int=True)
        shape = np.array(v.shape if isinstance(v, Runtime) else np.shape(v), dtype=np.int64)
        self.values[self.node.output[0]] = shape[a.get("start", 0):a.get("end", len(shape))]

    def _reshape_target(self, in_shape, spec, allowzero):
        spec = [int(s) for s in spec]
        out = []
        for i, s in enumerate(spec):
            out.append(in_shape[i] if s == 0 and not allowzero else s)
        if out.count(-1) > 1:
            self.fail("more than one -1 in the target shape")
        if -1 in out:
            known = int(np.prod([d for d in out if d != -1]))
            total = int(np.prod(in_shape))
            if known == 0 or total % known:
                self.fail(f"cannot reshape {list(in_shape)} to {spec}")
            out[out.index(-1)] = total // known
        if int(np.prod(out)) != int(np.prod(in_shape)):
            self.fail(f"cannot reshape {list(in_shape)} to {spec}")
        return tuple(out)

    def op_Reshape(self):
        a = self.attrs({"allowzero", "shape"})
        if self.opset < 5:
            spec = a.get("shape", [])
        else:
            spec = self.const(self.node.input[1], "shape")
        x = self.get(self.node.input[0])
        if isinstance(x, Runtime):
            shape = self._reshape_target(x.shape, spec, a.get("allowzero", 0))
            out = self.node.output[0]
            self.set_out(out, self.channel_shuffle(x, shape, out) or self.reshape_to(x, shape, out))
        else:
            self.values[self.node.output[0]] = np.reshape(x, self._reshape_target(np.shape(x), spec, a.get("allowzero", 0)))

    def channel_shuffle(self, x, shape, out):
        """ShuffleNet's channel shuffle, Reshape [N, C, ...] -> [N, g, C/g, ...], Transpose of dims 1
        and 2, Reshape back to [N, C, ...], as one channel_shuffle layer (which runs channels-last,
        where the 5-D transpose made the model convert to row-major and back around it); None when
        runtime value x, reshaped to shape, does not complete that pattern."""
        t = self.producer(x, "transpose")
        if t is None or len(x.shape) < 4 or list(t["perm"]) != [0, 2, 1] + list(range(3, len(x.shape))):
            return None
        r = self.producer(Runtime(t["inputs"][0], ()), "reshape")
        src = r and self.layer_shape(r["inputs"][0])
        if not src or tuple(src) != tuple(shape) or len(src) != len(x.shape) - 1:
            return None
        g, per = x.shape[2], x.shape[1]  # x is [N, C/g, g, ...]; the reshape made [N, g, C/g, ...]
        if g * per != src[1] or tuple(x.shape[3:]) != tuple(src[2:]) or x.shape[0] != src[0]:
            return None
        return Runtime(self.layer(out, "channel_shuffle", [Runtime(r["inputs"][0], tuple(src))], groups=int(g)),
                       tuple(src))

    def op_Transpose(self):
        a = self.attrs({"perm"})
        x = self.get(self.node.input[0])
        if not isinstance(x, Runtime):
            self.values[self.node.output[0]] = np.transpose(x, a.get("perm"))
            return
        rank = len(x.shape)
        perm = [int(p) % max(rank, 1) for p in a.get("perm", list(range(rank))[::-1])]
        if sorted(perm) != list(range(rank)):
            self.fail(f"perm {a.get('perm')} is not a permutation of {rank} dimensions")
        out = self.node.output[0]
        self.set_out(out, self.transpose(x, perm, out))

    def transpose(self, x, perm, name):
        """Runtime x with its dimensions in perm's order: a transpose layer, a reshape where only
        unit dimensions move, or x itself."""
        perm = list(perm)
        moved = [p for p in perm if x.shape[p] != 1]
        if moved == sorted(moved):  # only unit dims move (or none): a reshape, or x itself
            return self.reshape_to(x, [x.shape[p] for p in perm], name)
        return Runtime(self.layer(name, "transpose", [x], perm=perm), tuple(x.shape[p] for p in perm))

    def _axes(self, a):
        """Squeeze's and Unsqueeze's axes: an attribute before opset 13, an input since."""
        if "axes" in a:
            return [int(v) for v in a["axes"]]
        if self.opt_input(1):
            return [int(v) for v in np.asarray(self.const(self.node.input[1], "axes")).reshape(-1)]
        return None

    def op_Squeeze(self):
        a = self.attrs({"axes"})
        x = self.get(self.node.input[0])
        shape = x.shape if isinstance(x, Runtime) else np.shape(x)
        axes = self._axes(a)
        axes = [i for i, d in enumerate(shape) if d == 1] if axes is None else [ax % len(shape) for ax in axes]
        if any(shape[i] != 1 for i in axes):
            self.fail(f"squeezes a dimension that is not 1 in {list(shape)}")
        new = tuple(d for i, d in enumerate(shape) if i not in axes)
        if isinstance(x, Runtime):
            self.set_out(self.node.output[0], self.reshape_to(x, new, self.node.output[0]))
        else:
            self.values[self.node.output[0]] = np.reshape(x, new)

    def op_Unsqueeze(self):
        a = self.attrs({"axes"})
        x = self.get(self.node.input[0])
        shape = list(x.shape if isinstance(x, Runtime) else np.shape(x))
        axes = self._axes(a) or []
        for ax in sorted(ax % (len(shape) + len(axes)) for ax in axes):
            shape.insert(ax, 1)
        if isinstance(x, Runtime):
            self.set_out(self.node.output[0], self.reshape_to(x, shape, self.node.output[0]))
        else:
            self.values[self.node.output[0]] = np.reshape(x, shape)

    # ---- mapped ops ----

    def _fold_unary(self, fn):
        x = self.get(self.node.input[0])
        if isinstance(x, Runtime):
            return x
        self.values[self.node.output[0]] = fn(np.asarray(x))
        return None

    def op_Relu(self):
        self.attrs(set())
        x = self._fold_unary(lambda v: np.maximum(v, 0))
        if x:
            self.emit(self.node.output[0], "relu", [x], x.shape)

    def op_LeakyRelu(self):
        a = self.attrs({"alpha"})
        alpha = float(a.get("alpha", 0.01))
        x = self._fold_unary(lambda v: np.where(v >= 0, v, alpha * v))
        if x:
            self.emit(self.node.output[0], "leaky_relu", [x], x.shape, alpha=alpha)

    def op_Sigmoid(self):
        self.attrs(set())
        x = self._fold_unary(lambda v: 1 / (1 + np.exp(-v)))
        if x:
            self.emit(self.node.output[0], "sigmoid", [x], x.shape)

    def op_Clip(self):
        if self.opset < 11:
            a = self.attrs({"min", "max"})
            lo, hi = a.get("min"), a.get("max")
        else:
            self.attrs(set())
            lo = float(self.const(self.opt_input(1), "min")) if self.opt_input(1) else None
            hi = float(self.const(self.opt_input(2), "max")) if self.opt_input(2) else None
        x = self.get(self.node.input[0])
        if not isinstance(x, Runtime):
            self.values[self.node.output[0]] = np.clip(x, lo, hi)
            return
        kw = {}
        if lo is not None and np.isfinite(lo):
            kw["min"] = float(lo)
        if hi is not None and np.isfinite(hi):
            kw["max"] = float(hi)
        if lo is not None and hi is not None and lo > hi:
            self.fail(f"min {lo} is above max {hi}")
        self.emit(self.node.output[0], "clip", [x], x.shape, **kw)

    def _pads(self, a, spatial_in, kernel, strides, dilations, ceil_mode=0):
        """[top, left, bottom, right] for dlrun from ONNX pads / auto_pad, 1-D padded out to 2-D."""
        n = len(spatial_in)
        auto = a.get("auto_pad", "NOTSET")
        if auto in ("NOTSET", ""):
            pads = list(a.get("pads", [0] * (2 * n)))
            if len(pads) != 2 * n:
                self.fail(f"pads has {len(pads)} values for {n} spatial dimensions")
            begin, end = pads[:n], pads[n:]
        elif auto == "VALID":
            begin, end = [0] * n, [0] * n
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            begin, end = [], []
            for i in range(n):
                out = -(-spatial_in[i] // strides[i])
                total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - spatial_in[i])
                small = total // 2
                b = small if auto == "SAME_UPPER" else total - small
                begin.append(b)
                end.append(total - b)
        else:
            self.fail(f"auto_pad '{auto}' is not supported")
        if any(p < 0 for p in begin + end):
            self.fail("negative pads are not supported")
        return begin, end

    def op_Conv(self):
        a = self.attrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
        x0 = self.get(self.node.input[0])
        if not isinstance(x0, Runtime):
            self.fail("convolution of a constant input is not supported")
        w = np.asarray(self.const(self.node.input[1], "weight"), dtype=np.float32)
        b = self.opt_input(2)
        bias = np.asarray(self.const(b, "bias"), dtype=np.float32).reshape(-1) if b else None
        halves = {"weight": self.half(self.node.input[1]), "bias": self.half(b)}
        nsp = len(x0.shape) - 2
        if nsp not in (1, 2, 3):
            self.fail(f"{nsp}-D convolution (input {list(x0.shape)}): 1-D, 2-D and 3-D are supported")
        if w.ndim != nsp + 2:
            self.fail(f"weight {list(w.shape)} does not match the input {list(x0.shape)}")
        kernel = list(w.shape[2:])
        if "kernel_shape" in a and list(a["kernel_shape"]) != kernel:
            self.fail(f"kernel_shape {a['kernel_shape']} differs from the weight's {kernel}")
        strides = list(a.get("strides", [1] * nsp))
        dil = list(a.get("dilations", [1] * nsp))
        group = int(a.get("group", 1))
        begin, end = self._pads(a, x0.shape[2:], kernel, strides, dil)
        n, c, sp = x0.shape[0], x0.shape[1], x0.shape[2:]
        oc = w.shape[0]
        if group < 1 or c != w.shape[1] * group or oc % group:
            self.fail(f"input has {c} channels; weight {list(w.shape)} with group {group} does not fit")
        osp = [_window_out(sp[i], kernel[i], strides[i], begin[i], end[i], dil[i], 0) for i in range(nsp)]
        if min(osp) < 1:
            self.fail(f"kernel {kernel} does not fit the padded input {list(x0.shape)}")
        out = self.node.output[0]
        if nsp == 1:  # [N, C, L] as [N, C, 1, L], the weight as [OC, C/g, 1, k]
            x = self.reshape_to(x0, (n, c, 1, sp[0]), out + "/as2d")
            y = self._conv2d(out + "/2d", x, w.reshape(oc, w.shape[1], 1, kernel[0]), bias, [1, strides[0]],
                             [0, begin[0], 0, end[0]], [1, dil[0]], group, (n, oc, 1, osp[0]), halves)
        elif nsp == 2:
            y = self._conv2d(out, x0, w, bias, strides, [begin[0], begin[1], end[0], end[1]], dil, group,
                             (n, oc, osp[0], osp[1]), halves)
        else:
            weights = {"weight": w} if bias is None else {"weight": w, "bias": bias}
            y = Runtime(self.layer(out, "conv3d", [x0], weights, halves, filters=int(oc), kernel=kernel,
                                   stride=strides, padding=begin + end, dilation=dil, groups=group,
                                   bias=bias is not None), (n, oc) + tuple(osp))
        self.set_out(out, self.reshape_to(y, (n, oc) + tuple(osp), out))

    def op_ConvTranspose(self):
        """2-D (and 1-D through a reshape) ConvTranspose -> conv_transpose2d: pads from `pads`, or
        from `output_shape` / `auto_pad` as ONNX's formula gives them; output_padding kept."""
        a = self.attrs({"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads",
                        "strides"})
        x0 = self.get(self.node.input[0])
        if not isinstance(x0, Runtime):
            self.fail("transposed convolution of a constant input is not supported")
        w = np.asarray(self.const(self.node.input[1], "weight"), dtype=np.float32)
        b = self.opt_input(2)
        bias = np.asarray(self.const(b, "bias"), dtype=np.float32).reshape(-1) if b else None
        nsp = len(x0.shape) - 2
        if nsp not in (1, 2) or w.ndim != nsp + 2:
            self.fail(f"{nsp}-D transposed convolution (input {list(x0.shape)}, weight {list(w.shape)}): 1-D and 2-D "
                      "are supported", Unsupported)
        kernel = list(w.shape[2:])
        if "kernel_shape" in a and list(a["kernel_shape"]) != kernel:
            self.fail(f"kernel_shape {a['kernel_shape']} differs from the weight's {kernel}")
        strides, dil = list(a.get("strides", [1] * nsp)), list(a.get("dilations", [1] * nsp))
        extra = list(a.get("output_padding", [0] * nsp))
        group = int(a.get("group", 1))
        n, c, sp = x0.shape[0], x0.shape[1], list(x0.shape[2:])
        if group < 1 or c != w.shape[0] or c % group:
            self.fail(f"input has {c} channels; weight {list(w.shape)} with group {group} does not fit")
        oc = w.shape[1] * group
        full = [strides[i] * (sp[i] - 1) + extra[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(nsp)]
        pads = list(a.get("pads", [0] * 2 * nsp))
        mode = a.get("auto_pad", "NOTSET")
        if "output_shape" in a or mode in ("SAME_UPPER", "SAME_LOWER"):
            want = list(a["output_shape"])[-nsp:] if "output_shape" in a else [sp[i] * strides[i] for i in range(nsp)]
            total = [full[i] - want[i] for i in range(nsp)]
            for i in range(nsp):  # an output larger than the full one: the rest is output_padding
                if total[i] < 0:
                    extra[i], full[i], total[i] = extra[i] - total[i], full[i] - total[i], 0
            upper = mode == "SAME_UPPER"
            pads = [t // 2 if upper else t - t // 2 for t in total] + [t - t // 2 if upper else t // 2 for t in total]
        elif mode not in ("NOTSET", "VALID"):
            self.fail(f"auto_pad {mode} is not supported")
        begin, end = pads[:nsp], pads[nsp:]
        osp = [full[i] - begin[i] - end[i] for i in range(nsp)]
        if min(osp) < 1 or min(pads) < 0:
            self.fail(f"pads {pads} leave no output", Unsupported)
        if any(not (0 <= extra[i] < max(strides[i], dil[i])) for i in range(nsp)):
            self.fail(f"output_padding {extra} must be below the stride or the dilation", Unsupported)
        out = self.node.output[0]
        if nsp == 1:  # [N, C, L] as [N, C, 1, L]
            x0 = self.reshape_to(x0, (n, c, 1, sp[0]), out + "/as2d")
            w, kernel, strides, dil, extra = (w.reshape(c, w.shape[1], 1, kernel[0]), [1, kernel[0]], [1, strides[0]],
                                              [1, dil[0]], [0, extra[0]])
            begin, end, osp2 = [0, begin[0]], [0, end[0]], (1, osp[0])
        else:
            osp2 = tuple(osp)
        weights = {"weight": w}
        if bias is not None:
            weights["bias"] = bias
        halves = {"weight": self.half(self.node.input[1]), "bias": self.half(b)}
        name = out if nsp == 2 else out + "/2d"
        y = Runtime(self.layer(name, "conv_transpose2d", [x0], weights, halves, filters=int(oc), kernel=kernel,
                               stride=strides, padding=[begin[0], begin[1], end[0], end[1]], output_padding=extra,
                               dilation=dil, groups=group, bias=bias is not None), (n, oc) + osp2)
        self.set_out(out, self.reshape_to(y, (n, oc) + tuple(osp), out))

    def _conv2d(self, name, x, w, bias, strides, pad, dil, group, yshape, halves=None):
        weights = {"weight": w}
        if bias is not None:
            weights["bias"] = bias
        return Runtime(self.layer(name, "conv2d", [x], weights, halves, filters=int(w.shape[0]), kernel=list(w.shape[2:]),
                                  stride=list(strides), padding=list(pad), dilation=list(dil), groups=group,
                                  bias=bias is not None), yshape)

    def _pool(self, op):
        known = {"auto_pad", "ceil_mode", "kernel_shape", "pads", "strides"}
        if op == "maxpool2d":
            known |= {"dilations", "storage_order"}
        else:
            known |= {"count_include_pad"}
        a = self.attrs(known)
        if len(self.node.output) > 1 and self.node.output[1]:
            self.fail("the Indices output of MaxPool (int64) is not supported", UnsupportedDtype)
        x0 = self.runtime(self.node.input[0])
        nsp = len(x0.shape) - 2
        if nsp not in (1, 2, 3):
            self.fail(f"{nsp}-D pooling (input {list(x0.shape)}): 1-D, 2-D and 3-D pooling are supported")
        kernel = list(a["kernel_shape"])
        strides = list(a.get("strides", [1] * nsp))
        dil = list(a.get("dilations", [1] * nsp))
        ceil_mode = int(a.get("ceil_mode", 0))
        begin, end = self._pads(a, x0.shape[2:], kernel, strides, dil)
        axes = []  # per spatial axis: (kernel, stride, dilation, pad begin, pad end, output size)
        for i in range(nsp):
            ext = (kernel[i] - 1) * dil[i] + 1
            if begin[i] >= ext or end[i] >= ext:
                self.fail(f"padding {begin[i]},{end[i]} is not smaller than the window {ext}")
            o = _window_out(x0.shape[2 + i], kernel[i], strides[i], begin[i], end[i], dil[i], ceil_mode)
            if o != _dlrun_window_out(x0.shape[2 + i], kernel[i], strides[i], begin[i], end[i], dil[i], ceil_mode):
                self.fail("ceil_mode makes a last window that lies entirely in the padding")
            if o < 1:
                self.fail(f"the window does not fit the input {list(x0.shape)}")
            axes.append((kernel[i], strides[i], dil[i], begin[i], end[i], o))
        extra = {"ceil_mode": bool(ceil_mode)}  # a unit axis (k = s = 1) is the same either way
        if op == "avgpool2d":
            extra["count_include_pad"] = bool(a.get("count_include_pad", 0))
        out = self.node.output[0]
        n, c, sp = x0.shape[0], x0.shape[1], x0.shape[2:]
        unit = (1, 1, 1, 0, 0, 1)
        if nsp == 2:
            self.set_out(out, self._pool2d(op, x0, axes[0], axes[1], extra, out))
        elif nsp == 1:  # [N, C, L] as [N, C, 1, L]
            x = self.reshape_to(x0, (n, c, 1, sp[0]), out + "/as2d")
            y = self._pool2d(op, x, unit, axes[0], extra, out + "/2d")
            self.set_out(out, self.reshape_to(y, (n, c, axes[0][5]), out))
        else:
            # 3-D windows are boxes, and max and mean over a box are separable (the mean's count,
            # padding included or not, is a product of per-axis counts): pool H and W on
            # [N, C*D, H, W], then D on [N, C, D, OH*OW].
            oh, ow = axes[1][5], axes[2][5]
            x = self.reshape_to(x0, (n, c * sp[0], sp[1], sp[2]), out + "/as2d")
            y = self._pool2d(op, x, axes[1], axes[2], extra, out + "/hw")
            y = self.reshape_to(y, (n, c, sp[0], oh * ow), out + "/dview")
            y = self._pool2d(op, y, axes[0], unit, extra, out + "/d")
            self.set_out(out, self.reshape_to(y, (n, c, axes[0][5], oh, ow), out))

    def _pool2d(self, op, x, ay, ax, extra, name):
        kw = dict(kernel=[ay[0], ax[0]], stride=[ay[1], ax[1]], padding=[ay[3], ax[3], ay[4], ax[4]])
        if op == "maxpool2d":
            kw["dilation"] = [ay[2], ax[2]]
        kw.update(extra)
        return Runtime(self.layer(name, op, [x], **kw), (x.shape[0], x.shape[1], ay[5], ax[5]))

    def op_MaxPool(self):
        self._pool("maxpool2d")

    def op_AveragePool(self):
        self._pool("avgpool2d")

    def op_GlobalAveragePool(self):
        self.attrs(set())
        x0 = self.runtime(self.node.input[0])
        if len(x0.shape) < 3:
            self.fail(f"needs [N, C, ...], got {list(x0.shape)}")
        # any spatial rank: view the spatial dims as [N, C, 1, H*W...] and average them all
        spatial = int(np.prod(x0.shape[2:]))
        x = x0 if len(x0.shape) == 4 else self.reshape_to(x0, (x0.shape[0], x0.shape[1], 1, spatial), self.node.output[0] + "/as2d")
        out = self.node.output[0]
        yshape = (x0.shape[0], x0.shape[1]) + (1,) * (len(x0.shape) - 2)
        if len(x0.shape) == 4:
            self.emit(out, "global_avgpool", [x], yshape)
        else:
            y = Runtime(self.layer(out + "/2d", "global_avgpool", [x]), (x0.shape[0], x0.shape[1], 1, 1))
            self.set_out(out, self.reshape_to(y, yshape, out))

    def op_Gemm(self):
        a = self.attrs({"alpha", "beta", "transA", "transB", "broadcast"})
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        ta, tb = int(a.get("transA", 0)), int(a.get("transB", 0))
        A, B = self.get(self.node.input[0]), self.get(self.node.input[1])
        cname = self.opt_input(2)
        C = self.get(cname) if cname else None
        ashape = A.shape if isinstance(A, Runtime) else np.shape(A)
        bshape = B.shape if isinstance(B, Runtime) else np.shape(B)
        if len(ashape) != 2 or len(bshape) != 2:
            self.fail(f"Gemm needs 2-D A and B, got {list(ashape)} and {list(bshape)}")
        m, k = (ashape[1], ashape[0]) if ta else ashape
        kb, n = (bshape[1], bshape[0]) if tb else bshape
        if k != kb:
            self.fail(f"inner dimensions differ: {k} and {kb}")
        out = self.node.output[0]
        if not isinstance(A, Runtime) and not isinstance(B, Runtime) and (C is None or not isinstance(C, Runtime)):
            am, bm = (A.T if ta else A), (B.T if tb else B)
            self.values[out] = alpha * (am @ bm) + (beta * C if C is not None else 0)
            return
        cshape = None if C is None else (C.shape if isinstance(C, Runtime) else np.shape(C))
        if C is not None and _broadcast(cshape, (m, n)) != (m, n):
            self.fail(f"C {list(cshape)} does not broadcast to [{m}, {n}]")
        # a C with one value per column (or one value) folds into a linear layer's bias
        c_per_column = C is None or (not isinstance(C, Runtime) and all(d == 1 for d in tuple(cshape)[:-1]))
        if isinstance(A, Runtime) and not isinstance(B, Runtime) and not ta and c_per_column:
            # y = A · (alpha op(B)) + beta C, C one value per column: a linear layer
            w = alpha * (np.asarray(B, dtype=np.float64) if tb else np.asarray(B, dtype=np.float64).T)
            weights = {"weight": w.astype(np.float32)}
            if C is not None:
                weights["bias"] = (beta * np.broadcast_to(np.asarray(C, dtype=np.float64).reshape(-1), (n,))).astype(np.float32)
            halves = {"weight": self.half(self.node.input[1]), "bias": self.half(cname)}
            self.emit(out, "linear", [A], (m, n), weights, halves, units=int(n), bias=C is not None)
            return
        kw = {}
        if ta:
            kw["trans_a"] = True
        if tb:
            kw["trans_b"] = True
        if alpha != 1.0:
            kw["alpha"] = alpha
        if C is not None and beta != 1.0:
            kw["beta"] = beta
        ins = [self.runtime(self.node.input[0]), self.runtime(self.node.input[1])]
        self.emit(out, "matmul", ins + ([self.runtime(cname)] if C is not None else []), (m, n), **kw)

    def op_MatMul(self):
        self.attrs(set())
        A, B = self.get(self.node.input[0]), self.get(self.node.input[1])
        out = self.node.output[0]
        if not isinstance(A, Runtime) and not isinstance(B, Runtime):
            self.values[out] = np.matmul(A, B)
            return
        ashape = A.shape if isinstance(A, Runtime) else np.shape(A)
        bshape = B.shape if isinstance(B, Runtime) else np.shape(B)
        if not ashape or not bshape:
            self.fail("MatMul of a scalar")
        a2 = ashape if len(ashape) > 1 else (1,) + tuple(ashape)
        b2 = bshape if len(bshape) > 1 else tuple(bshape) + (1,)
        if a2[-1] != b2[-2]:
            self.fail(f"inner dimensions differ: {list(ashape)} and {list(bshape)}")
        batch = _broadcast(a2[:-2], b2[:-2])
        if batch is None:
            self.fail(f"batch dimensions of {list(ashape)} and {list(bshape)} do not broadcast")
        y2 = tuple(batch) + (a2[-2], b2[-1])
        yshape = tuple(batch) + ((a2[-2],) if len(ashape) > 1 else ()) + ((b2[-1],) if len(bshape) > 1 else ())
        if isinstance(A, Runtime) and not isinstance(B, Runtime) and len(ashape) >= 2 and len(bshape) == 2:
            # a weight: a linear layer on A's rows (a transformer's [batch, tokens, d] folds into rows)
            rows = int(np.prod(ashape[:-1]))
            x = self.reshape_to(A, (rows, int(ashape[-1])), out + "/rows", rows=True)
            lin = self.layer(out if len(ashape) == 2 else out + "/linear", "linear", [x], {"weight": np.asarray(B, dtype=np.float32).T},
                             {"weight": self.half(self.node.input[1])}, units=int(b2[-1]), bias=False)
            self.shape_of[lin] = (rows, int(b2[-1]))
            y = self.reshape_to(Runtime(lin, (rows, int(b2[-1]))), yshape, out, rows=self.batch_leads(yshape))
            self.bias_free[y.name] = (self.layer_of[lin], x, out)
            self.set_out(out, y)
            return
        else:
            ar, br = self.operand(self.node.input[0], a2), self.operand(self.node.input[1], b2)
            # an operand transposed in its last two dimensions (attention's K^T) is read as it
            # lay, trans_a / trans_b: no transpose layer (prune drops it when nothing else reads it)
            ar, ta = self.untransposed(ar)
            br, tb = self.untransposed(br)
            kw = {k: True for k, t in (("trans_a", ta), ("trans_b", tb)) if t}
            y = Runtime(self.layer(out if y2 == yshape else out + "/2d", "matmul", [ar, br], **kw), y2)
        self.set_out(out, self.reshape_to(y, yshape, out) if y2 != yshape else y)

    def untransposed(self, rv):
        """(x, True) where runtime value rv, a transpose layer's output, is x with its last two
        dimensions swapped, else (rv, False). A transpose P that moves its input's last dimension
        to the second last is transpose Q (P with its last two entries swapped) then that swap:
        Q's layer replaces P's where Q is not the identity and P's output has no other reader
        (attention's K of [tokens, heads, 64] by [1, 2, 0]: [1, 0, 2] copies runs of 64 floats
        where [1, 2, 0] gathered single ones, 4x faster in ViT-B/16)."""
        t = self.producer(rv, "transpose")
        rank = len(rv.shape)
        if t is None or rank < 2:
            return rv, False
        perm = [int(p) for p in t["perm"]]
        if perm[-2] != rank - 1:
            return rv, False
        q = perm[:-2] + [perm[-1], perm[-2]]
        shape = [0] * rank  # the transpose's input: dimension perm[i] is rv's dimension i
        for i, p in enumerate(perm):
            shape[p] = rv.shape[i]
        x = Runtime(t["inputs"][0], tuple(shape))
        if q != list(range(rank)):
            if self.readers.get(t["name"], 0) != 1:
                return rv, False
            x = self.transpose(x, q, t["name"] + "/before_swap")
        return Runtime(x.name, tuple(rv.shape[:-2]) + (rv.shape[-1], rv.shape[-2])), True

    def op_Einsum(self):
        """Einsum of one or two operands, at least one at run time, written with dlrun's ops: one
        operand is a reduce_sum over the letters the output drops and a transpose; two are a
        batched product: each operand transposed to [batch, own, summed] letters and reshaped to
        3-D, one matmul, then reshape and transpose to the output's order. Refused: ellipses, a
        letter twice in one operand (a diagonal), a letter only one of two operands has that the
        output drops, and batch letters whose sizes differ (broadcasting)."""
        a = self.attrs({"equation"})
        if self.try_fold():
            return
        eq = a["equation"].decode() if isinstance(a["equation"], bytes) else str(a["equation"])
        eq = eq.replace(" ", "")
        if "..." in eq:
            self.fail(f"equation '{eq}': ellipses are not supported", Unsupported)
        lhs, arrow, rhs = eq.partition("->")
        terms = lhs.split(",")
        if len(terms) != len(self.node.input) or len(terms) > 2:
            self.fail(f"equation '{eq}': {len(terms)} operand(s) for {len(self.node.input)} input(s); "
                      "dlrun writes Einsum of one or two operands", Unsupported)
        if not arrow:  # implicit output: the letters seen once, in alphabetical order
            rhs = "".join(sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1))
        xs = [self.runtime(n) for n in self.node.input]
        size = {}
        for t, x in zip(terms, xs):
            if len(t) != len(x.shape) or len(set(t)) != len(t):
                self.fail(f"equation '{eq}': term '{t}' does not name each of {list(x.shape)}'s dimensions once",
                          Unsupported)
            for c, d in zip(t, x.shape):
                if size.setdefault(c, d) != d:
                    self.fail(f"equation '{eq}': letter '{c}' is {size[c]} and {d} (broadcasting is not supported)",
                              Unsupported)
        if len(set(rhs)) != len(rhs) or any(c not in size for c in rhs):
            self.fail(f"equation '{eq}': output '{rhs}' is not made of distinct input letters")
        out = self.node.output[0]
        if len(terms) == 1:
            (t,), (x,) = terms, xs
            drop = [i for i, c in enumerate(t) if c not in rhs]
            if drop:
                x = self.reduce("reduce_sum", x, drop, 0, out + "/sum")
                t = "".join(c for c in t if c in rhs)
            if x.shape == ():
                x = self.reshape_to(x, (1,), out + "/1")
            self.set_out(out, self.transpose(x, [t.index(c) for c in rhs], out))
            return
        ta, tb = terms
        for t, other in ((ta, tb), (tb, ta)):
            if any(c not in other and c not in rhs for c in t):
                self.fail(f"equation '{eq}': a letter of '{t}' is summed over by itself", Unsupported)
        batch = [c for c in rhs if c in ta and c in tb]
        own_a = [c for c in rhs if c in ta and c not in tb]
        own_b = [c for c in rhs if c in tb and c not in ta]
        summed = [c for c in ta if c in tb and c not in rhs]
        n = lambda cs: int(np.prod([size[c] for c in cs])) if cs else 1
        def side(x, t, order, shape, name):
            y = self.transpose(x, [t.index(c) for c in order], name + "/t")
            return self.reshape_to(y, shape, name + "/3d")
        am = side(xs[0], ta, batch + own_a + summed, (n(batch), n(own_a), n(summed)), out + "/a")
        bm = side(xs[1], tb, batch + summed + own_b, (n(batch), n(summed), n(own_b)), out + "/b")
        y = Runtime(self.layer(out + "/matmul", "matmul", [am, bm]), (n(batch), n(own_a), n(own_b)))
        order = batch + own_a + own_b
        y = self.reshape_to(y, tuple(size[c] for c in order) or (1,), out + "/nd")
        self.set_out(out, self.transpose(y, [order.index(c) for c in rhs], out) if rhs else y)

    def op_Flatten(self):
        a = self.attrs({"axis"})
        x = self.get(self.node.input[0])
        shape = x.shape if isinstance(x, Runtime) else np.shape(x)
        axis = int(a.get("axis", 1))
        if axis < 0:
            axis += len(shape)
        if not 0 <= axis <= len(shape):
            self.fail(f"axis {a.get('axis')} out of range for {list(shape)}")
        y = (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))
        out = self.node.output[0]
        if not isinstance(x, Runtime):
            self.values[out] = np.reshape(x, y)
        elif axis == 1 and len(shape) >= 2:
            self.emit(out, "flatten", [x], y)
        else:
            self.set_out(out, self.reshape_to(x, y, out))

    def op_Dropout(self):
        a = self.attrs({"ratio", "seed", "is_test"})
        rate = float(a.get("ratio", 0.5))
        if self.opt_input(1):
            rate = float(np.asarray(self.const(self.node.input[1], "ratio")).reshape(-1)[0])
        if self.opt_input(2):
            tm = self.const(self.node.input[2], "training_mode")
            # training with ratio 0 keeps every value (PyTorch's F.dropout(p=0.0) exports so): the identity
            if bool(np.asarray(tm).reshape(-1)[0]) and rate != 0.0:
                self.fail("training_mode is true; dlrun runs inference only", TrainingMode)
        if len(self.node.output) > 1 and self.node.output[1] in self.consumed:
            self.fail("the mask output of Dropout (a bool tensor) is not supported", UnsupportedDtype)
        x = self.get(self.node.input[0])
        if not isinstance(x, Runtime):
            self.values[self.node.output[0]] = x
            return
        self.emit(self.node.output[0], "dropout", [x], x.shape, rate=rate if 0 <= rate < 1 else 0.0)

    def op_Softmax(self, op="softmax"):
        a = self.attrs({"axis"})
        x = self.runtime(self.node.input[0])
        nd = len(x.shape)
        axis = int(a.get("axis", 1 if self.opset < 13 else -1))
        if axis < 0:
            axis += nd
        if not 0 <= axis < max(nd, 1):
            self.fail(f"axis {a.get('axis')} out of range for {list(x.shape)}")
        out = self.node.output[0]
        if self.opset >= 13 or axis == nd - 1:
            self.emit(out, op, [x], x.shape, axis=axis)
            return
        # before opset 13: softmax over all dimensions from axis on, flattened
        flat = (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))
        xf = self.reshape_to(x, flat, out + "/flat")
        y = Runtime(self.layer(out + "/2d", op, [xf], axis=1), flat)
        self.set_out(out, self.reshape_to(y, x.shape, out))

    def op_LogSoftmax(self):
        self.op_Softmax("log_softmax")

    def _add(self, out, a_name, b_name):
        A, B = self.get(a_name), self.get(b_name)
        if not isinstance(A, Runtime) and not isinstance(B, Runtime):
            self.values[out] = np.asarray(A) + np.asarray(B)
            return self.values[out]
        return self._binary(out, "add", a_name, b_name)

    def op_Add(self):
        a = self.attrs({"broadcast", "axis"})
        if "axis" in a:
            self.fail("the legacy axis attribute of Add is not supported")
        self._add(self.node.output[0], self.node.input[0], self.node.input[1])

    def op_Sum(self):
        self.attrs(set())
        ins = list(self.node.input)
        out = self.node.output[0]
        if len(ins) == 1:
            self.values[out] = self.get(ins[0])
            return
        acc = ins[0]
        for i, name in enumerate(ins[1:]):
            last = i == len(ins) - 2
            target = out if last else self.fresh(f"{out}/partial{i + 1}")
            self._add(target, acc, name)
            acc = target

    def op_Concat(self):
        a = self.attrs({"axis"})
        vals = [self.get(n) for n in self.node.input if n]
        out = self.node.output[0]
        if all(not isinstance(v, Runtime) for v in vals):
            self.values[out] = np.concatenate([np.asarray(v) for v in vals], axis=int(a.get("axis", 1)))
            return
        self.concat(out, [self.runtime(n) for n in self.node.input if n], int(a.get("axis", 1)))

    def concat(self, out, rvs, axis):
        """ONNX output out = runtime values rvs (at least one) joined along axis."""
        nd, given = len(rvs[0].shape), axis
        if axis < 0:
            axis += nd
        if not 0 <= axis < nd:
            self.fail(f"axis {given} out of range for {list(rvs[0].shape)}")
        for r in rvs:
            if len(r.shape) != nd or any(r.shape[d] != rvs[0].shape[d] for d in range(nd) if d != axis):
                self.fail(f"input {list(r.shape)} does not match {list(rvs[0].shape)} outside axis {axis}")
        shape = list(rvs[0].shape)
        shape[axis] = sum(r.shape[axis] for r in rvs)
        if len(rvs) == 1:
            self.set_out(out, rvs[0])
        else:
            self.emit(out, "concat", rvs, tuple(shape), axis=axis)

    def op_BatchNormalization(self):
        a = self.attrs({"epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs"})
        if int(a.get("training_mode", 0)):
            self.fail("training_mode is set; dlrun runs inference only", TrainingMode)
        if "spatial" in a and int(a["spatial"]) != 1:
            self.fail("spatial=0 (per-element statistics) is not supported")
        if sum(1 for o in self.node.output if o) > 1:
            self.fail("the running statistics outputs (training) are not supported")
        x = self.runtime(self.node.input[0])
        if len(x.shape) < 2:
            self.fail(f"needs [N, C, ...], got {list(x.shape)}")
        c = x.shape[1]
        p, halves = {}, {}
        for i, key in enumerate(["weight", "bias", "running_mean", "running_var"]):
            halves[key] = self.half(self.node.input[i + 1])
            v = np.asarray(self.const(self.node.input[i + 1], ["scale", "B", "mean", "var"][i]), dtype=np.float32)
            if v.size != c:
                self.fail(f"{['scale', 'B', 'mean', 'var'][i]} has {v.size} values for {c} channels")
            p[key] = v.reshape(c)
        eps = float(a.get("epsilon", 1e-5))
        if not eps > 0:
            self.fail(f"epsilon {eps} must be positive")
        self.emit(self.node.output[0], "batchnorm", [x], x.shape, p, halves, eps=eps)

    # ---- folding: every op whose inputs are all constants ----

    def all_attrs(self):
        out = {}
        for a in self.node.attribute:
            v = onnx.helper.get_attribute_value(a)
            out[a.name] = v.decode() if isinstance(v, bytes) else v
        return out

    def inputs_if_constant(self):
        """The node's inputs as arrays (None for an omitted one) when every one is a constant,
        else None."""
        vals = []
        for name in self.node.input:
            if not name:
                vals.append(None)
                continue
            if name in self.pending_inputs:  # a graph input: a runtime tensor
                return None
            v = self.get(name)
            if isinstance(v, Runtime):
                return None
            vals.append(np.asarray(v))
        return vals

    def try_fold(self):
        """Folds the node with NumPy when all its inputs are constants; True when it did."""
        vals = self.inputs_if_constant()
        if vals is None:
            return False
        n_out = len(self.node.output)
        try:
            outs = fold.fold(self.node.op_type, self.all_attrs(), vals, self.opset, n_out)
        except (fold.FoldError, ValueError, IndexError, KeyError, TypeError) as e:
            self.fail(f"cannot fold on constants: {e}")
        for name, v in zip(self.node.output, outs):
            if name:
                self.values[name] = np.asarray(v)
        return True

    def fold_only(self):
        """An op dlrun has no layer for: folded on constants, refused on a runtime tensor."""
        if not self.try_fold():
            rt = [n for n in self.node.input if n and isinstance(self.get(n), Runtime)]
            self.fail(f"{self.node.op_type} of a runtime tensor ('{rt[0]}') is not supported: dlrun has no "
                      f"{self.node.op_type} op (only a {self.node.op_type} of constants is folded)", Unsupported)

    # ---- elementwise ----

    def _unary(self, dl, **kw):
        if self.try_fold():
            return None
        x = self.runtime(self.node.input[0])
        return self.emit(self.node.output[0], dl, [x], x.shape, **kw)

    def _binary(self, out, dl, a_name, b_name):
        """dlrun's broadcasting binary op dl on two ONNX tensors (at least one at run time)."""
        ar, br = self.runtime(a_name, as_float=dl == "pow"), self.runtime(b_name, as_float=dl == "pow")
        shape = _broadcast(ar.shape, br.shape)
        if shape is None:
            self.fail(f"shapes {list(ar.shape)} and {list(br.shape)} do not broadcast")
        fused = self.fuse(dl, out, ar, br, shape)
        if fused is not None:
            self.set_out(out, fused)
            return fused
        if not shape:  # dlrun keeps 0-D tensors as [1]: give both operands one dimension
            ar, br, shape = self.reshape_to(ar, (1,), out + "/a"), self.reshape_to(br, (1,), out + "/b"), (1,)
        return self.emit(out, dl, [ar, br], shape)

    def _elementwise2(self, dl):
        self.attrs({"broadcast"} if self.opset < 7 else set())
        if not self.try_fold():
            self._binary(self.node.output[0], dl, self.node.input[0], self.node.input[1])

    def op_Mul(self):
        self._elementwise2("mul")

    def op_Sub(self):
        self._elementwise2("sub")

    def op_Div(self):
        self._elementwise2("div")

    def op_Pow(self):
        self.attrs(set())
        if not self.try_fold():
            if not isinstance(self.get(self.node.input[0]), Runtime):
                self.fail("Pow of a constant base with a runtime exponent is not supported", Unsupported)
            self._binary(self.node.output[0], "pow", self.node.input[0], self.node.input[1])

    def _chain(self, dl):
        """Min, Max: one input is itself; more are a chain of dlrun's two-input op."""
        self.attrs(set())
        if self.try_fold():
            return
        ins, out = [n for n in self.node.input if n], self.node.output[0]
        if len(ins) == 1:
            self.set_out(out, self.runtime(ins[0]))
            return
        self._fold_inputs(ins, dl, out, out)

    def _fold_inputs(self, ins, dl, out, last):
        """ins combined left to right by dlrun's two-input op dl, the last step named `last`
        (partial results get fresh names after out); returns the last step's name."""
        acc = ins[0]
        for i, name in enumerate(ins[1:]):
            target = last if i == len(ins) - 2 else self.fresh(f"{out}/partial{i + 1}")
            self._binary(target, dl, acc, name)
            acc = target
        return acc

    def op_Min(self):
        self._chain("min")

    def op_Max(self):
        self._chain("max")

    def op_HardSigmoid(self):
        a = self.attrs({"alpha", "beta"})
        alpha, beta = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
        vals = self.inputs_if_constant()
        if vals is not None:
            self.values[self.node.output[0]] = fold.hard_sigmoid(vals[0], alpha, beta)
            return
        self._unary("hard_sigmoid", alpha=alpha, beta=beta)

    def op_HardSwish(self):
        self.attrs(set())
        vals = self.inputs_if_constant()
        if vals is not None:
            self.values[self.node.output[0]] = vals[0] * fold.hard_sigmoid(vals[0], 1 / 6, 0.5)
            return
        self._unary("hard_swish")

    def op_Gelu(self):
        a = self.attrs({"approximate"})
        approx = a.get("approximate", "none")
        if approx not in ("none", "tanh"):
            self.fail(f"approximate '{approx}' is not supported", Unsupported)
        vals = self.inputs_if_constant()
        if vals is not None:
            self.values[self.node.output[0]] = fold.gelu(vals[0], approx)
            return
        self._unary("gelu", approximate=approx)

    # ---- ops spelled with a few dlrun ops (each the ONNX definition, operation for operation) ----

    def rt(self, name, op, inputs, shape=None, **kw):
        """A helper dlrun layer (named after name, or a fresh variant) as a runtime value; its shape
        is the first input's unless given."""
        return Runtime(self.layer(name, op, inputs, **kw), inputs[0].shape if shape is None else shape)

    def scalar_const(self, base, value):
        """A one-value model constant (float32), broadcast by dlrun's binary ops."""
        return self.new_constant(base, np.array([value], np.float32))

    def fold_if_constant(self, known):
        """Checks the attributes; folds the node (fold.py) when every input is a constant."""
        self.attrs(known)
        return self.try_fold()

    def neg_part_exp(self, x, out):
        """exp(min(x, 0)) − 1, with min(x, 0) as clip(max: 0)."""
        m = self.rt(out + "/neg", "clip", [x], max=0.0)
        e = self.rt(out + "/exp", "exp", [m])
        return self.rt(out + "/expm1", "sub", [e, self.scalar_const(out + "/one", 1.0)])

    def op_Elu(self):
        """max(x, 0) + (exp(min(x, 0)) − 1)·alpha, ONNX's reference formula."""
        if self.fold_if_constant({"alpha", "consumed_inputs"}):
            return
        alpha = float(self.attrs({"alpha", "consumed_inputs"}).get("alpha", 1.0))
        x, out = self.runtime(self.node.input[0]), self.node.output[0]
        r = self.rt(out + "/pos", "relu", [x])
        n = self.neg_part_exp(x, out)
        if alpha != 1.0:
            n = self.rt(out + "/scaled", "mul", [n, self.scalar_const(out + "/alpha", alpha)])
        self.emit(out, "add", [r, n], x.shape)

    def op_Selu(self):
        """max(x, 0)·gamma + (exp(min(x, 0)) − 1)·alpha·gamma."""
        if self.fold_if_constant({"alpha", "gamma", "consumed_inputs"}):
            return
        a = self.attrs({"alpha", "gamma", "consumed_inputs"})
        alpha, gamma = float(a.get("alpha", fold.SELU_ALPHA)), float(a.get("gamma", fold.SELU_GAMMA))
        x, out = self.runtime(self.node.input[0]), self.node.output[0]
        g = self.scalar_const(out + "/gamma", gamma)
        r = self.rt(out + "/pos_scaled", "mul", [self.rt(out + "/pos", "relu", [x]), g])
        n = self.rt(out + "/neg_alpha", "mul", [self.neg_part_exp(x, out), self.scalar_const(out + "/alpha", alpha)])
        n = self.rt(out + "/neg_scaled", "mul", [n, g])
        self.emit(out, "add", [r, n], x.shape)

    def op_Celu(self):
        """max(x, 0) + min(0, alpha·(exp(x / alpha) − 1)), the ONNX definition as written."""
        if self.fold_if_constant({"alpha"}):
            return
        alpha = float(self.attrs({"alpha"}).get("alpha", 1.0))
        x, out = self.runtime(self.node.input[0]), self.node.output[0]
        r = self.rt(out + "/pos", "relu", [x])
        a = self.scalar_const(out + "/alpha", alpha)
        e = self.rt(out + "/exp", "exp", [self.rt(out + "/div", "div", [x, a])])
        e = self.rt(out + "/expm1", "sub", [e, self.scalar_const(out + "/one", 1.0)])
        n = self.rt(out + "/neg", "clip", [self.rt(out + "/scaled", "mul", [a, e], x.shape)], max=0.0)
        self.emit(out, "add", [r, n], x.shape)

    def op_PRelu(self):
        """leaky_relu for one constant slope; otherwise max(x, 0) + min(x, 0)·slope with the slope
        broadcast to x (unidirectionally; before opset 7 one value per channel)."""
        if self.fold_if_constant({"consumed_inputs"}):
            return
        x, out = self.runtime(self.node.input[0]), self.node.output[0]
        sname = self.node.input[1]
        s = self.get(sname)
        sshape = s.shape if isinstance(s, Runtime) else np.shape(s)
        try:
            view = fold.prelu_slope_shape(x.shape, sshape, self.opset)
        except fold.FoldError as e:
            self.fail(str(e))
        if not isinstance(s, Runtime) and np.size(s) == 1:
            arr = np.asarray(s)
            if arr.dtype != np.float32:
                self.fail(f"slope '{sname}' is {arr.dtype}; dlrun runs float32 tensors only", UnsupportedDtype)
            self.emit(out, "leaky_relu", [x], x.shape, alpha=float(arr.reshape(-1)[0]))
            return
        slope = self.operand(sname, view)
        r = self.rt(out + "/pos", "relu", [x])
        n = self.rt(out + "/neg", "clip", [x], max=0.0)
        n = self.rt(out + "/neg_scaled", "mul", [n, slope], x.shape)
        self.emit(out, "add", [r, n], x.shape)

    def op_Softsign(self):
        """x / (1 + |x|)."""
        if self.fold_if_constant(set()):
            return
        x, out = self.runtime(self.node.input[0]), self.node.output[0]
        d = self.rt(out + "/den", "add", [self.scalar_const(out + "/one", 1.0), self.rt(out + "/abs", "abs", [x])], x.shape)
        self.emit(out, "div", [x, d], x.shape)

    def step_above(self, x, t, name, negate=False):
        """1 where x > t (negate: where −x > t), else 0, exactly: hard_sigmoid with alpha = A (−A),
        beta = −A·t, A = 1 / (the float32 spacing just above t), a power of two. A·x is exact (or
        overflows to ±inf), so A·x − A·t is A·(x − t) rounded, at least A·spacing = 1 when x > t,
        at most 0 when x ≤ t; clamped to [0, 1] it is the step. None when A or A·t is not a finite
        float32 (|t| below about 2⁻¹⁰⁴, t = 0 included)."""
        t32 = np.float32(t)
        if float(t32) != float(t) or not np.isfinite(t32):
            return None
        with np.errstate(over="ignore", divide="ignore"):
            spacing = np.nextafter(t32, np.float32(np.inf)) - t32
            a = np.float32(1) / spacing
            at = a * t32
        if not (np.isfinite(a) and np.isfinite(at) and a * spacing == 1 and spacing > 0):
            return None
        return self.rt(name, "hard_sigmoid", [x], alpha=float(-a if negate else a), beta=float(-at))

    def op_ThresholdedRelu(self):
        """x where x > alpha, else 0: relu for alpha 0; otherwise clip(x, min: alpha) · step(x > alpha)
        (step_above: exact; the clip keeps −inf · 0 out)."""
        if self.fold_if_constant({"alpha"}):
            return
        alpha = float(self.attrs({"alpha"}).get("alpha", 1.0))
        x, out = self.runtime(self.node.input[0]), self.node.output[0]
        if alpha == 0.0:
            self.emit(out, "relu", [x], x.shape)
            return
        s = self.step_above(x, alpha, out + "/step")
        if s is None:
            self.fail(f"alpha {alpha} is too close to 0 for an exact step in float32", Unsupported)
        c = self.rt(out + "/clip", "clip", [x], min=alpha)
        self.emit(out, "mul", [c, s], x.shape)

    def op_Shrink(self):
        """x + bias where x < −lambd, x − bias where x > lambd, else 0. bias = lambd (soft shrink):
        x − clip(x, −lambd, lambd); otherwise x·(p + n) − bias·(p − n) with the exact steps
        p = [x > lambd], n = [−x > lambd] (step_above), the same roundings as the definition."""
        if self.fold_if_constant({"lambd", "bias"}):
            return
        a = self.attrs({"lambd", "bias"})
        lambd, bias = float(a.get("lambd", 0.5)), float(a.get("bias", 0.0))
        x, out = self.runtime(self.node.input[0]), self.node.output[0]
        if lambd < 0:
            self.fail(f"lambd {lambd} is negative", Unsupported)
        if lambd == 0 and bias == 0:
            self.set_out(out, x)
            return
        if lambd == bias:
            c = self.rt(out + "/clip", "clip", [x], min=-lambd, max=lambd)
            self.emit(out, "sub", [x, c], x.shape)
            return
        p = self.step_above(x, lambd, out + "/above")
        n = self.step_above(x, lambd, out + "/below", negate=True)
        if p is None or n is None:
            self.fail(f"lambd {lambd} is too close to 0 for an exact step in float32", Unsupported)
        s = self.rt(out + "/outside", "add", [p, n])
        if bias == 0.0:
            self.emit(out, "mul", [x, s], x.shape)
            return
        xs = self.rt(out + "/kept", "mul", [x, s])
        sign = self.rt(out + "/side", "sub", [p, n])
        b = self.rt(out + "/shift", "mul", [sign, self.scalar_const(out + "/bias", bias)], x.shape)
        self.emit(out, "sub", [xs, b], x.shape)

    def op_Mean(self):
        """The inputs' sum (a chain of adds, broadcasting) divided by their number."""
        if self.fold_if_constant(set()):
            return
        ins, out = [n for n in self.node.input if n], self.node.output[0]
        if len(ins) == 1:
            self.set_out(out, self.runtime(ins[0]))
            return
        acc = self._fold_inputs(ins, "add", out, self.fresh(f"{out}/sum"))
        count = self.fresh(f"{out}/count")
        self.values[count] = np.array(len(ins), np.float32)
        self._binary(out, "div", acc, count)

    def op_CastLike(self):
        """Cast to the element type of the second input; a runtime tensor only to float32 (an alias)."""
        self.attrs({"saturate"})
        like = self.node.input[1]
        if like in self.pending_inputs:  # a graph input used for its type only: not declared
            to = self.pending_inputs[like][1]
        else:
            v = self.get(like)
            to = onnx.TensorProto.FLOAT if isinstance(v, Runtime) else _elem_type(np.asarray(v).dtype)
        x = self.get(self.node.input[0])
        if isinstance(x, Runtime):
            if to != onnx.TensorProto.FLOAT:
                self.fail(f"casts a runtime tensor to {_dtype_name(to)}; dlrun runs float32 tensors only", UnsupportedDtype)
            self.values[self.node.output[0]] = x
            return
        try:
            self.values[self.node.output[0]] = np.asarray(x).astype(fold.np_type(to))
        except (KeyError, TypeError, ValueError) as e:
            self.fail(f"cannot cast a constant to {_dtype_name(to)}: {e}", UnsupportedDtype)

    def _rearrange(self, view, perm, shape):
        x, out = self.runtime(self.node.input[0]), self.node.output[0]
        v = self.reshape_to(x, view, out + "/view")
        t = self.rt(out + "/perm", "transpose", [v], tuple(view[p] for p in perm), perm=list(perm))
        self.set_out(out, self.reshape_to(t, shape, out))

    def op_DepthToSpace(self):
        """reshape to 6-D, transpose, reshape (DCR and CRD, as ONNX defines them)."""
        if self.fold_if_constant({"blocksize", "mode"}):
            return
        a = self.attrs({"blocksize", "mode"})
        x = self.runtime(self.node.input[0])
        try:
            self._rearrange(*fold.depth_to_space_views(x.shape, a["blocksize"], a.get("mode", "DCR")))
        except fold.FoldError as e:
            self.fail(str(e))

    def op_SpaceToDepth(self):
        """reshape to 6-D, transpose, reshape."""
        if self.fold_if_constant({"blocksize"}):
            return
        a = self.attrs({"blocksize"})
        x = self.runtime(self.node.input[0])
        try:
            self._rearrange(*fold.space_to_depth_views(x.shape, a["blocksize"]))
        except fold.FoldError as e:
            self.fail(str(e))

    def op_GlobalMaxPool(self):
        """reduce_max over every spatial dimension, kept."""
        if self.fold_if_constant(set()):
            return
        x = self.runtime(self.node.input[0])
        if len(x.shape) < 3:
            self.fail(f"needs [N, C, ...], got {list(x.shape)}")
        self.set_out(self.node.output[0], self.reduce("reduce_max", x, list(range(2, len(x.shape))), True, self.node.output[0]))

    def op_LRN(self):
        """x / (bias + alpha/size · Σ x² over the channel window)^beta. The window sum is
        size · avgpool2d over channels ([N, 1, C, rest]; the padding counted, stride 1, so each
        window divides by size): written alpha · mean, the same value as alpha/size · sum."""
        if self.fold_if_constant({"alpha", "beta", "bias", "size"}):
            return
        a = self.attrs({"alpha", "beta", "bias", "size"})
        size = int(a["size"])
        alpha, beta, bias = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), float(a.get("bias", 1.0))
        x, out = self.runtime(self.node.input[0]), self.node.output[0]
        if len(x.shape) < 2 or size < 1:
            self.fail(f"needs [N, C, ...] and size ≥ 1, got {list(x.shape)} and size {size}")
        n, c = x.shape[0], x.shape[1]
        rest = int(np.prod(x.shape[2:]))
        lo, hi = fold.lrn_window(size)
        sq = self.rt(out + "/square", "mul", [x, x])
        v = self.reshape_to(sq, (n, 1, c, rest), out + "/channels")
        m = self.rt(out + "/window_mean", "avgpool2d", [v], (n, 1, c, rest), kernel=[size, 1], stride=[1, 1],
                    padding=[lo, 0, hi, 0], count_include_pad=True, ceil_mode=False)
        m = self.reshape_to(m, x.shape, out + "/back")
        d = self.rt(out + "/scaled", "mul", [m, self.scalar_const(out + "/alpha", alpha)], x.shape)
        d = self.rt(out + "/plus_bias", "add", [d, self.scalar_const(out + "/bias", bias)], x.shape)
        d = self.rt(out + "/pow", "pow", [d, self.scalar_const(out + "/beta", beta)], x.shape)
        self.emit(out, "div", [x, d], x.shape)

    def op_MeanVarianceNormalization(self):
        """(x − E[x]) / (sqrt(E[x²] − E[x]²) + 1e-9) over axes (default [0, 2, 3]), ONNX's function body."""
        if self.fold_if_constant({"axes"}):
            return
        a = self.attrs({"axes"})
        x, out = self.runtime(self.node.input[0]), self.node.output[0]
        rank = len(x.shape)
        axes = sorted({int(ax) + rank if int(ax) < 0 else int(ax) for ax in a.get("axes", [0, 2, 3])})
        if not axes or any(not 0 <= ax < rank for ax in axes):
            self.fail(f"axes {a.get('axes', [0, 2, 3])} out of range for {list(x.shape)}")
        m = self.reduce("reduce_mean", x, axes, True, out + "/mean")
        m2 = self.rt(out + "/mean_squared", "mul", [m, m])
        sq = self.rt(out + "/square", "mul", [x, x])
        e2 = self.reduce("reduce_mean", sq, axes, True, out + "/square_mean")
        var = self.rt(out + "/var", "sub", [e2, m2])
        sd = self.rt(out + "/std", "sqrt", [var])
        sd = self.rt(out + "/std_eps", "add", [sd, self.scalar_const(out + "/eps", 1e-9)], sd.shape)
        d = self.rt(out + "/centred", "sub", [x, m], x.shape)
        self.emit(out, "div", [d, sd], x.shape)

    # ---- fusions: patterns of runtime layers with one dlrun op for them (exact in meaning) ----

    def producer(self, rv, op):
        """The layer entry that computes runtime value rv when its op is `op`, else None."""
        e = self.layer_of.get(rv.name)
        return e if e is not None and e["op"] == op else None

    def scalar(self, rv):
        """The single value of a model constant (any shape of one element), else None."""
        c = self.const_of.get(rv.name)
        return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None

    def fuse(self, dl, out, a, b, shape):
        """A fused layer for `a dl b` when it completes a known pattern, else None. The layers the
        pattern used stay (other layers may use them); prune() drops them when nothing does."""
        if dl == "mul":
            for x, y in ((a, b), (b, a)):
                s = self.producer(y, "sigmoid")
                if s and s["inputs"] == [x.name] and shape == x.shape:
                    return self.emit(out, "silu", [x], shape)
                h = self.producer(y, "hard_sigmoid")
                if (h and h["inputs"] == [x.name] and shape == x.shape and
                        np.float32(h["alpha"]) == np.float32(1 / 6) and h["beta"] == 0.5):
                    return self.emit(out, "hard_swish", [x], shape)
            return self.fuse_gelu(out, a, b, shape) or self.fuse_ln_affine(out, a, b, shape, "weight")
        if dl == "add":
            return self.fuse_bias(out, a, b, shape) or self.fuse_ln_affine(out, a, b, shape, "bias")
        if dl == "div":
            return self.fuse_layer_norm(out, a, b, shape)
        return None

    def fuse_bias(self, out, a, b, shape):
        """MatMul(x, W) + c, W and c constants, c one value per column, the product read by this Add
        only -> one linear layer with c as its bias (the layer a fused activation then joins)."""
        for y, c in ((a, b), (b, a)):
            found, bias = self.bias_free.get(y.name), self.const_of.get(c.name)
            if not found or bias is None or shape != y.shape:
                continue
            lin, x, onnx_name = found
            n = lin["units"]
            if self.readers.get(onnx_name, 0) != 1 or bias.size != n or bias.shape[-1:] != (n,):
                continue
            key = lin["name"] + ".weight"
            name = self.layer(out if len(shape) == 2 else out + "/linear", "linear", [x],
                              {"weight": self.tensors[key], "bias": bias.reshape(n)},
                              {"weight": self.stored.get(key), "bias": self.stored.get(c.name)}, units=n, bias=True)
            self.shape_of[name] = x.shape[:1] + (n,)
            return self.reshape_to(Runtime(name, x.shape[:1] + (n,)), shape, out, rows=self.batch_leads(shape))
        return None

    def factors(self, rv):
        e = self.producer(rv, "mul")
        return [Runtime(n, ()) for n in e["inputs"]] if e else [rv]

    def fuse_gelu(self, out, a, b, shape):
        """0.5 · x · (1 + erf(x / √2)) in any grouping of the two multiplications -> gelu."""
        fs = self.factors(a) + self.factors(b)
        if len(fs) != 3:
            return None
        for i, half in enumerate(fs):
            if self.scalar(half) != 0.5:
                continue
            rest = fs[:i] + fs[i + 1:]
            for x, q in (rest, rest[::-1]):
                if self.is_one_plus_erf(q.name, x.name) and self.layer_shape(x.name) == shape:
                    return self.emit(out, "gelu", [Runtime(x.name, shape)], shape, approximate="none")
        return None

    def layer_shape(self, name):
        return self.shape_of.get(name)

    def is_one_plus_erf(self, q, x):
        """Whether layer q computes 1 + erf(x / √2) (or x · (1/√2))."""
        add = self.producer(Runtime(q, ()), "add")
        if not add:
            return False
        for e, one in (add["inputs"], add["inputs"][::-1]):
            erf = self.producer(Runtime(e, ()), "erf")
            if not erf or self.scalar(Runtime(one, ())) != 1.0:
                continue
            d = self.layer_of.get(erf["inputs"][0])
            if not d or d["inputs"][0] != x:
                continue
            c = self.scalar(Runtime(d["inputs"][1], ()))
            if c is None:
                continue
            if d["op"] == "div" and abs(c - np.sqrt(2)) < 1e-6 or d["op"] == "mul" and abs(c - np.sqrt(0.5)) < 1e-7:
                return True
        return False

    def fuse_layer_norm(self, out, d, s, shape):
        """(x − mean(x)) / sqrt(mean((x − mean(x))²) + eps) over trailing axes -> layer_norm
        (weight ones, bias zeros; a following Mul and Add by constants fold into them)."""
        sub, sq = self.producer(d, "sub"), self.producer(s, "sqrt")
        if not sub or not sq:
            return None
        x, m = sub["inputs"]
        mean = self.layer_of.get(m)
        addeps = self.producer(Runtime(sq["inputs"][0], ()), "add")
        if not mean or mean["op"] != "reduce_mean" or mean["inputs"] != [x] or not addeps:
            return None
        if self.layer_shape(x) != tuple(shape):
            return None
        rank = len(shape)
        axes = mean["axes"]
        if not mean["keepdims"] or not axes or axes != list(range(axes[0], rank)):
            return None
        for v, epsn in (addeps["inputs"], addeps["inputs"][::-1]):
            eps = self.scalar(Runtime(epsn, ()))
            var = self.layer_of.get(v)
            if eps is None or not var or var["op"] != "reduce_mean" or var["axes"] != axes or not var["keepdims"]:
                continue
            p = self.layer_of.get(var["inputs"][0])
            squares = p and (p["op"] == "pow" and p["inputs"][0] == d.name and self.scalar(Runtime(p["inputs"][1], ())) == 2.0
                             or p["op"] == "mul" and p["inputs"] == [d.name, d.name])
            if squares:
                ns = shape[axes[0]:]
                return self.emit(out, "layer_norm", [Runtime(x, shape)], shape,
                                 {"weight": np.ones(ns, np.float32), "bias": np.zeros(ns, np.float32)},
                                 axis=axes[0], eps=eps)
        return None

    def fuse_ln_affine(self, out, a, b, shape, which):
        """layer_norm · γ (weight still ones, bias zeros) or layer_norm + β (bias still zeros), γ and
        β constants varying only over the normalised dimensions -> one layer_norm."""
        for y, c in ((a, b), (b, a)):
            ln = self.producer(y, "layer_norm")
            k = self.const_of.get(c.name)
            if not ln or k is None or shape != y.shape:
                continue
            ns = y.shape[ln["axis"]:]
            lead = k.shape[:max(0, k.ndim - len(ns))]
            if any(d != 1 for d in lead) or _broadcast(k.shape[len(lead):], ns) != tuple(ns):
                continue
            w, bias = self.tensors[ln["name"] + ".weight"], self.tensors[ln["name"] + ".bias"]
            if bias.any() or (which == "weight" and not (w == 1).all()):
                continue
            k = np.broadcast_to(k.reshape(k.shape[len(lead):]), ns).astype(np.float32)
            weights = {"weight": k if which == "weight" else w, "bias": k if which == "bias" else bias}
            return self.emit(out, "layer_norm", [Runtime(ln["inputs"][0], shape)], shape, weights,
                             axis=ln["axis"], eps=ln["eps"])
        return None

    # ---- moving data: slice, pad, gather, split, expand, tile ----

    def slice_rt(self, x, ranges, name):
        """dlrun's slice of runtime x with ONNX Slice's clamped (start, end, step) per axis (from
        fold.slice_ranges); x itself when nothing is cut. Written with clamped values; an end
        before index 0 of a backward slice is written as -(dim + 1), which ONNX clamps to -1."""
        shape = tuple(len(range(s, e, st)) for s, e, st in ranges)
        if 0 in shape:
            self.fail(f"the slice of {list(x.shape)} is empty; dlrun tensors have no empty dimensions", Unsupported)
        axes = [i for i, r in enumerate(ranges) if r != (0, x.shape[i], 1)]
        if not axes:
            return x
        starts = [ranges[i][0] for i in axes]
        ends = [ranges[i][1] if ranges[i][1] >= 0 else -(x.shape[i] + 1) for i in axes]
        steps = [ranges[i][2] for i in axes]
        kw = {"starts": starts, "ends": ends, "axes": axes}
        if any(st != 1 for st in steps):
            kw["steps"] = steps
        return Runtime(self.layer(name, "slice", [x], **kw), shape)

    def op_Slice(self):
        a = self.attrs({"starts", "ends", "axes"} if self.opset < 10 else set())
        if self.try_fold():
            return
        x = self.runtime(self.node.input[0])
        if self.opset < 10:
            spec = (a["starts"], a["ends"], a.get("axes"), None)
        else:
            ins = [np.asarray(self.const(n, what)) if n else None
                   for n, what in zip(list(self.node.input[1:]) + [""] * 4, ["starts", "ends", "axes", "steps"])]
            spec = fold.slice_inputs({}, [None] + ins, self.opset)
        try:
            ranges = fold.slice_ranges(x.shape, *spec)
        except fold.FoldError as e:
            self.fail(str(e))
        out = self.node.output[0]
        self.set_out(out, self.slice_rt(x, ranges, out))

    def op_Pad(self):
        a = self.attrs({"mode", "pads", "value", "paddings"})
        if self.try_fold_pad(a):
            return
        x = self.runtime(self.node.input[0])
        rank, out = len(x.shape), self.node.output[0]
        if self.opset < 11:
            pads, value = list(a.get("pads", a.get("paddings", []))), float(a.get("value", 0.0))
        else:
            pads = fold.ints(self.const(self.node.input[1], "pads"))
            value = float(np.asarray(self.const(self.opt_input(2), "constant_value")).reshape(-1)[0]) if self.opt_input(2) else 0.0
            if self.opt_input(3):
                axes = [ax % rank for ax in fold.ints(self.const(self.opt_input(3), "axes"))]
                full = [0] * (2 * rank)
                for i, ax in enumerate(axes):
                    full[ax], full[rank + ax] = pads[i], pads[len(axes) + i]
                pads = full
        mode = a.get("mode", "constant")
        if len(pads) != 2 * rank:
            self.fail(f"pads has {len(pads)} values for a rank-{rank} input")
        if mode not in ("constant", "reflect", "edge"):
            self.fail(f"mode '{mode}' is not supported (constant, reflect, edge are)", Unsupported)
        if min(pads) < 0:  # negative pads crop: a slice first (in constant mode the order does not matter)
            if mode != "constant":
                self.fail(f"negative pads in mode '{mode}' are not supported", Unsupported)
            ranges = [(max(0, -pads[i]), x.shape[i] - max(0, -pads[rank + i]), 1) for i in range(rank)]
            x = self.slice_rt(x, ranges, out + "/crop")
            pads = [max(0, p) for p in pads]
        if not any(pads):
            self.set_out(out, x)
            return
        if mode == "reflect" and any(pads[i] >= x.shape[i] or pads[rank + i] >= x.shape[i] for i in range(rank)):
            self.fail(f"reflect padding {pads} is not smaller than the input {list(x.shape)}", Unsupported)
        if mode == "edge" and any(d == 0 for d in x.shape):
            self.fail("edge padding of an empty tensor", Unsupported)
        kw = {"pads": pads, "mode": mode}
        if mode == "constant" and value != 0.0:
            kw["value"] = value
        shape = tuple(x.shape[i] + pads[i] + pads[rank + i] for i in range(rank))
        self.emit(out, "pad", [x], shape, **kw)

    def try_fold_pad(self, a):
        vals = self.inputs_if_constant()
        if vals is None:
            return False
        x = vals[0]
        rank = x.ndim
        if self.opset < 11:
            pads, value = list(a.get("pads", a.get("paddings", []))), a.get("value", 0.0)
        else:
            pads = fold.ints(vals[1])
            value = vals[2].reshape(-1)[0] if len(vals) > 2 and vals[2] is not None else 0
            if len(vals) > 3 and vals[3] is not None:
                self.fail("a Pad of constants with axes is not folded")
        mode = a.get("mode", "constant")
        if min(pads) < 0:
            x = x[tuple(slice(max(0, -pads[i]), x.shape[i] - max(0, -pads[rank + i])) for i in range(rank))]
            pads = [max(0, p) for p in pads]
        width = [(pads[i], pads[rank + i]) for i in range(rank)]
        kw = {"constant_values": value} if mode == "constant" else {}
        self.values[self.node.output[0]] = np.pad(x, width, mode={"edge": "edge", "reflect": "reflect"}.get(mode, mode), **kw)
        return True

    def op_Gather(self):
        a = self.attrs({"axis"})
        if self.try_fold():
            return
        x = self.runtime(self.node.input[0])
        rank, out = len(x.shape), self.node.output[0]
        axis = int(a.get("axis", 0))
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank:
            self.fail(f"axis {a.get('axis', 0)} out of range for {list(x.shape)}")
        ind = self.get(self.node.input[1], allow_int=True)
        if isinstance(ind, Runtime) and self.node.input[1] in self.int_values:  # token ids: dlrun's gather
            if len(x.shape) - 1 + len(ind.shape) > 8:
                self.fail("the output would have more than 8 dimensions")
            self.emit(out, "gather", [x, ind], x.shape[:axis] + ind.shape + x.shape[axis + 1:], axis=axis)
            return
        if isinstance(ind, Runtime):
            self.fail("Gather with indices computed at run time is not supported (dlrun's gather takes int64 "
                      "model inputs or constants as indices)", Unsupported)
        idx = np.asarray(self.const(self.node.input[1], "indices")).astype(np.int64)
        d = x.shape[axis]
        flat = [int(i) + d if i < 0 else int(i) for i in idx.reshape(-1)]
        if any(not 0 <= i < d for i in flat):
            self.fail(f"index out of range for dimension {d}")
        y = self.take(x, flat, axis, out)
        self.set_out(out, self.reshape_to(y, x.shape[:axis] + idx.shape + x.shape[axis + 1:], out))

    MAX_GATHER_PIECES = 256

    def take(self, x, flat, axis, name):
        """x's entries flat (indices, in order) along axis: one slice when they step evenly,
        else one slice per run of consecutive indices, concatenated."""
        def ranges(s, e, st):
            r = [(0, n, 1) for n in x.shape]
            r[axis] = (s, e, st)
            return r
        if len(flat) == 1 or len({b - a for a, b in zip(flat, flat[1:])}) == 1 and flat[1] != flat[0]:
            st = flat[1] - flat[0] if len(flat) > 1 else 1
            end = flat[-1] + (1 if st > 0 else -1)
            return self.slice_rt(x, ranges(flat[0], end if end >= 0 else -1, st), name if len(flat) == x.shape[axis] else name + "/take")
        runs = [[flat[0], flat[0] + 1]]
        for i in flat[1:]:
            if i == runs[-1][1]:
                runs[-1][1] += 1
            else:
                runs.append([i, i + 1])
        if len(runs) > self.MAX_GATHER_PIECES:
            self.fail(f"gathers {len(runs)} separate pieces (at most {self.MAX_GATHER_PIECES} are made of slices)", Unsupported)
        parts = [self.slice_rt(x, ranges(s, e, 1), f"{name}/part{k}") for k, (s, e) in enumerate(runs)]
        shape = list(x.shape)
        shape[axis] = len(flat)
        return Runtime(self.layer(name + "/take", "concat", parts, axis=axis), tuple(shape))

    # ---- control flow and sequences, resolved while converting ----
    # A Loop with a constant trip count is unrolled, an If with a constant condition inlines its
    # branch, and a sequence is a list of values known at conversion time (PyTorch exports
    # torch.tensor_split and list unpacking so).

    # the most iterations one Loop may unroll into, and the most subgraph nodes all unrolling and
    # inlining may convert: a hostile trip count gets a one-line error, not hours of work
    MAX_LOOP_ITERATIONS = 4096
    MAX_INLINED_NODES = 200_000

    def inline(self, g, bindings):
        """Converts subgraph g's nodes with its inputs bound to `bindings` (values); its outputs'
        values. Its own names are cleared first: a Loop body runs once per iteration, and a value
        of the last iteration (a constant made a model operand, say) must not leak into this one."""
        self.inlined += len(g.node)
        if self.inlined > self.MAX_INLINED_NODES:
            self.fail(f"unrolling loops and inlining branches would convert more than {self.MAX_INLINED_NODES} "
                      "nodes", Unsupported)
        own = [i.name for i in g.input] + [o for n in g.node for o in n.output if o]
        for name in own:
            for table in (self.values, self.operands, self.halves, self.int_values):
                table.pop(name, None)
        for t in g.initializer:
            self.values[t.name] = _to_array(t)
        for inp, v in zip(g.input, bindings):
            self.values[inp.name] = v
        node = self.node
        self.walk(g.node)
        self.node = node
        return [self.get(o.name, allow_seq=True) for o in g.output]

    def bind(self, name, v):
        """ONNX name `name` now holds v (a value of a subgraph or a sequence: no new layer)."""
        if isinstance(v, Runtime):
            self.set_out(name, v)
        else:
            self.values[name] = v

    def flag(self, name, what):
        """A constant boolean (or number) scalar input's truth."""
        v = np.asarray(self.const(name, what))
        if v.size != 1:
            self.fail(f"{what} '{name}' has {v.size} values; one is needed")
        return bool(v.reshape(-1)[0])

    def op_If(self):
        """Inlines the branch a constant condition picks (PyTorch writes shape checks so)."""
        a = self.attrs({"then_branch", "else_branch"})
        node = self.node
        branch = a["then_branch"] if self.flag(node.input[0], "If's condition") else a["else_branch"]
        if len(branch.output) != len(node.output):
            self.fail(f"the branch has {len(branch.output)} outputs, the node {len(node.output)}")
        for name, v in zip(node.output, self.inline(branch, [])):
            self.bind(name, v)

    def op_Loop(self):
        """Unrolls a loop whose trip count and condition are constants while converting; the body
        may carry tensors and sequences, and its scan outputs are stacked along a new first axis."""
        a = self.attrs({"body"})
        node, body = self.node, a["body"]
        m, c = self.opt_input(0), self.opt_input(1)
        if m is None and c is None:
            self.fail("a Loop with neither a trip count nor a condition never ends", Unsupported)
        trip = int(np.asarray(self.const(m, "Loop's trip count")).reshape(-1)[0]) if m else None
        go = self.flag(c, "Loop's condition") if c else True
        carried = [self.get(n, allow_seq=True) for n in node.input[2:]]
        n_scan = len(body.output) - 1 - len(carried)
        if len(body.input) != len(carried) + 2 or n_scan < 0 or len(node.output) != len(carried) + n_scan:
            self.fail(f"the body's {len(body.input)} inputs and {len(body.output)} outputs do not fit the node's "
                      f"{len(node.input)} inputs and {len(node.output)} outputs")
        scans = [[] for _ in range(n_scan)]
        i = 0
        while go and (trip is None or i < trip):
            if i == self.MAX_LOOP_ITERATIONS:
                self.fail(f"the loop runs more than {self.MAX_LOOP_ITERATIONS} iterations; dlrun unrolls loops while "
                          "converting", Unsupported)
            outs = self.inline(body, [np.array(i, dtype=np.int64), np.array(go)] + carried)
            cond_name = body.output[0].name
            self.node = node
            if isinstance(outs[0], (Runtime, Sequence)):
                self.fail(f"the body's condition '{cond_name}' is computed at run time; dlrun unrolls loops while "
                          "converting", Unsupported)
            go = bool(np.asarray(outs[0]).reshape(-1)[0]) if c else True
            carried = outs[1:1 + len(carried)]
            for k, v in enumerate(outs[1 + len(carried):]):
                scans[k].append(v)
            i += 1
        for name, v in zip(node.output, carried):
            if name:
                self.bind(name, v)
        for name, items in zip(node.output[len(carried):], scans):
            if name:
                self.bind(name, self.stack(name, items))

    def stack(self, out, items):
        """Values items (tensors of one shape) stacked along a new first axis."""
        if not items:
            self.fail(f"scan output '{out}' of a loop that ran no iteration would be empty", Unsupported)
        if any(isinstance(v, Sequence) for v in items):
            self.fail(f"scan output '{out}' is a sequence")
        if not any(isinstance(v, Runtime) for v in items):
            return np.stack([np.asarray(v) for v in items])
        rvs = [self.as_runtime(v, out) for v in items]
        return self.join(out, rvs, 0, new_axis=True)

    def as_runtime(self, v, base):
        return v if isinstance(v, Runtime) else self.new_constant(base + "/item", np.asarray(v))

    def join(self, out, rvs, axis, new_axis):
        """Runtime values rvs joined along axis into ONNX output out; new_axis: each first gets a
        dimension of 1 there (a stack)."""
        if new_axis:
            nd = len(rvs[0].shape) + 1
            if not -nd <= axis < nd:
                self.fail(f"axis {axis} out of range for a stack of {list(rvs[0].shape)}")
            axis %= nd
            rvs = [self.reshape_to(r, r.shape[:axis] + (1,) + r.shape[axis:], f"{out}/item{k}")
                   for k, r in enumerate(rvs)]
        self.concat(out, rvs, axis)
        return self.values[out]

    def sequence(self, i):
        name = self.opt_input(i)
        v = self.get(name, allow_seq=True)
        if not isinstance(v, Sequence):
            self.fail(f"'{name}' is not a sequence")
        return v.items

    def position(self, i, n, default, insert=False):
        """Input i as a position in a sequence of n items (negative counts from the end)."""
        if self.opt_input(i) is None:
            return default
        p = np.asarray(self.const(self.opt_input(i), "position"))
        if p.size != 1 or p.dtype.kind not in "iu":
            self.fail(f"position must be one integer, not {p.dtype} {list(p.shape)}")
        p = int(p.reshape(-1)[0])
        top = n if insert else n - 1
        if not -n <= p <= top:
            self.fail(f"position {p} is outside a sequence of {n} item(s)")
        return p + n if p < 0 else p

    def op_SequenceEmpty(self):
        self.attrs({"dtype"})
        self.values[self.node.output[0]] = Sequence([])

    def op_SequenceConstruct(self):
        self.attrs(set())
        self.values[self.node.output[0]] = Sequence(self.get(n) for n in self.node.input)

    def op_SequenceInsert(self):
        self.attrs(set())
        items = self.sequence(0)
        at = self.position(2, len(items), len(items), insert=True)
        self.values[self.node.output[0]] = Sequence(items[:at] + [self.get(self.node.input[1])] + items[at:])

    def op_SequenceErase(self):
        self.attrs(set())
        items = self.sequence(0)
        if not items:
            self.fail("erases from an empty sequence")
        at = self.position(1, len(items), len(items) - 1)
        self.values[self.node.output[0]] = Sequence(items[:at] + items[at + 1:])

    def op_SequenceAt(self):
        self.attrs(set())
        items = self.sequence(0)
        self.bind(self.node.output[0], items[self.position(1, len(items), None)])

    def op_SequenceLength(self):
        self.attrs(set())
        self.values[self.node.output[0]] = np.array(len(self.sequence(0)), dtype=np.int64)

    def op_ConcatFromSequence(self):
        a = self.attrs({"axis", "new_axis"})
        items, out = self.sequence(0), self.node.output[0]
        if not items:
            self.fail("concatenates an empty sequence")
        axis, new = int(a["axis"]), bool(a.get("new_axis", 0))
        if not any(isinstance(v, Runtime) for v in items):
            arrs = [np.asarray(v) for v in items]
            self.values[out] = np.stack(arrs, axis=axis) if new else np.concatenate(arrs, axis=axis)
            return
        self.join(out, [self.as_runtime(v, out) for v in items], axis, new)

    def op_SplitToSequence(self):
        """A split into a sequence: sizes from `split` (one size: equal chunks, the last smaller;
        a list: those sizes; none: chunks of 1, squeezed away when keepdims is 0)."""
        a = self.attrs({"axis", "keepdims"})
        x = self.get(self.node.input[0])
        shape = np.shape(x) if not isinstance(x, Runtime) else x.shape
        axis = int(a.get("axis", 0))
        if not -len(shape) <= axis < len(shape):
            self.fail(f"axis {axis} out of range for {list(shape)}")
        axis %= len(shape)
        dim, sp = shape[axis], self.opt_input(1)
        squeeze = sp is None and not int(a.get("keepdims", 1))
        if sp is None:
            sizes = [1] * dim
        else:
            split = np.asarray(self.const(sp, "split")).astype(np.int64)
            if split.ndim == 0:
                if split <= 0:
                    self.fail(f"split size {int(split)} must be positive")
                sizes = [min(int(split), dim - b) for b in range(0, dim, int(split))]
            else:
                sizes = [int(v) for v in split]
                if any(v < 0 for v in sizes) or sum(sizes) != dim:
                    self.fail(f"split {sizes} does not add up to dimension {dim}")
        items, b, out = [], 0, self.node.output[0]
        for k, size in enumerate(sizes):
            r = [(0, n, 1) for n in shape]
            r[axis] = (b, b + size, 1)
            b += size
            keep = tuple(n for d, n in enumerate(shape) if d != axis or not squeeze)
            if isinstance(x, Runtime):
                y = self.slice_rt(x, r, f"{out}/{k}")
                items.append(self.reshape_to(y, keep, f"{out}/{k}/squeezed") if squeeze else y)
            else:
                part = np.asarray(x)[tuple(slice(*t) for t in r)]
                items.append(part.reshape(keep))
        self.values[out] = Sequence(items)

    def op_Split(self):
        a = self.attrs({"axis", "split", "num_outputs"})
        if self.try_fold():
            return
        x = self.runtime(self.node.input[0])
        axis = int(a.get("axis", 0)) % len(x.shape)
        ins = [None, np.asarray(self.const(self.opt_input(1), "split")) if self.opt_input(1) else None]
        try:
            bounds = fold.split_bounds(a, ins, self.opset, x.shape[axis], len(self.node.output))
        except fold.FoldError as e:
            self.fail(str(e))
        for name, (b, e) in zip(self.node.output, bounds):
            if name:
                r = [(0, n, 1) for n in x.shape]
                r[axis] = (b, e, 1)
                y = self.slice_rt(x, r, name)
                self.set_out(name, y if y is not x else self.emit(name, "dropout", [x], x.shape))

    def op_Expand(self):
        self.attrs(set())
        if self.try_fold():
            return
        x = self.runtime(self.node.input[0])
        spec = fold.ints(self.const(self.node.input[1], "shape"))
        shape = _broadcast(x.shape, spec)
        if shape is None:
            self.fail(f"shape {list(x.shape)} does not expand to {spec}")
        out = self.node.output[0]
        if shape == x.shape:
            self.set_out(out, x)
            return
        # x · ones: exact for every value (−0, inf and NaN included), broadcast by dlrun's mul
        xs = (1,) * (len(shape) - len(x.shape)) + x.shape
        ones = self.new_constant(out + "/ones", np.ones([o if d == 1 else 1 for d, o in zip(xs, shape)], np.float32))
        self.emit(out, "mul", [x, ones], shape)

    MAX_TILE_COPIES = 64

    def op_Tile(self):
        self.attrs(set())
        if self.try_fold():
            return
        x = self.runtime(self.node.input[0])
        reps = fold.ints(self.const(self.node.input[1], "repeats"))
        out = self.node.output[0]
        if len(reps) != len(x.shape) or min(reps) < 1:
            self.fail(f"repeats {reps} do not fit the input {list(x.shape)}", Unsupported)
        if int(np.prod(reps)) > self.MAX_TILE_COPIES:
            self.fail(f"tiles {int(np.prod(reps))} copies (at most {self.MAX_TILE_COPIES} are made of concats)", Unsupported)
        y = x
        for axis, r in enumerate(reps):
            if r > 1:
                shape = list(y.shape)
                shape[axis] *= r
                y = Runtime(self.layer(f"{out}/tile{axis}", "concat", [y] * r, axis=axis), tuple(shape))
        self.set_out(out, y if y is not x else self.emit(out, "dropout", [x], x.shape))

    # ---- reductions and normalisation ----

    def reduce(self, dl, x, axes, keepdims, out):
        """dlrun reduction of runtime x over axes; a 0-D result is kept as [1] (keepdims, reshape)."""
        rank = len(x.shape)
        kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        shape = kept if keepdims else tuple(d for i, d in enumerate(x.shape) if i not in axes)
        if not shape:
            y = Runtime(self.layer(out + "/keep", dl, [x], axes=axes, keepdims=True), kept)
            return self.reshape_to(y, (), out)
        return Runtime(self.layer(out, dl, [x], axes=axes, keepdims=bool(keepdims)), shape) if rank else x

    def _reduce(self, dl):
        a = self.attrs({"axes", "keepdims", "noop_with_empty_axes"})
        if self.try_fold():
            return
        x = self.runtime(self.node.input[0])
        ins = [None, np.asarray(self.const(self.opt_input(1), "axes")) if self.opt_input(1) else None]
        try:
            axes = fold.reduce_axes(a, ins, self.opset, len(x.shape), fold.REDUCE_AXES_INPUT.get(self.node.op_type, 18))
        except fold.FoldError as e:
            self.fail(str(e))
        out = self.node.output[0]
        if not axes:  # noop_with_empty_axes
            self.set_out(out, x)
            return
        keep = int(a.get("keepdims", 1))
        if dl == "log_sum_exp":
            y = self.log_sum_exp(x, axes, keep, out)
        elif dl == "l1":
            y = self.reduce("reduce_sum", self.rt(out + "/abs", "abs", [x]), axes, keep, out)
        elif dl == "log_sum":
            y = self.reduce("reduce_sum", x, axes, keep, out + "/sum")
            y = Runtime(self.layer(out, "log", [y]), y.shape)
        elif dl == "l2" or dl == "sum_square":
            x = Runtime(self.layer(out + "/square", "mul", [x, x]), x.shape)
            y = self.reduce("reduce_sum", x, axes, keep, out if dl == "sum_square" else out + "/sum")
            if dl == "l2":
                y = Runtime(self.layer(out, "sqrt", [y]), y.shape)
        else:
            y = self.reduce(dl, x, axes, keep, out)
        self.set_out(out, y)

    def op_ReduceMean(self):
        self._reduce("reduce_mean")

    def op_ReduceSum(self):
        self._reduce("reduce_sum")

    def op_ReduceMax(self):
        self._reduce("reduce_max")

    def op_ReduceMin(self):
        self._reduce("reduce_min")

    def op_ReduceL2(self):
        self._reduce("l2")

    def op_ReduceSumSquare(self):
        self._reduce("sum_square")

    def op_ReduceL1(self):
        self._reduce("l1")

    def op_ReduceLogSum(self):
        self._reduce("log_sum")

    def op_ReduceLogSumExp(self):
        self._reduce("log_sum_exp")

    def log_sum_exp(self, x, axes, keep, out):
        """log Σ exp(x) as m + log Σ exp(x − m), m the maximum clipped to the finite floats: equal to
        m itself when finite (no overflow for large x), and when the maximum is ±inf the clipped m
        still gives ONNX's ±inf (x − m is −inf or +inf there, never inf − inf)."""
        big = float(np.finfo(np.float32).max)
        m = self.reduce("reduce_max", x, axes, True, out + "/max")
        m = self.rt(out + "/max_finite", "clip", [m], min=-big, max=big)
        e = self.rt(out + "/exp", "exp", [self.rt(out + "/shifted", "sub", [x, m], x.shape)])
        s = self.reduce("reduce_sum", e, axes, True, out + "/sum")
        l = self.rt(out + "/log", "log", [s])
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
            tuple(d for i, d in enumerate(x.shape) if i not in axes)
        y = self.rt(out if shape == m.shape else out + "/kept", "add", [l, m])
        return self.reshape_to(y, shape, out)

    def op_LayerNormalization(self):
        a = self.attrs({"axis", "epsilon", "stash_type"})
        x = self.runtime(self.node.input[0])
        rank = len(x.shape)
        axis = int(a.get("axis", -1))
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank:
            self.fail(f"axis {a.get('axis')} out of range for {list(x.shape)}")
        ns = x.shape[axis:]
        p = {}
        for key, i in (("weight", 1), ("bias", 2)):
            name = self.opt_input(i)
            v = np.asarray(self.const(name, ["scale", "B"][i - 1]), dtype=np.float32) if name else np.full(ns, 0.0 if i == 2 else 1.0)
            if _broadcast(v.shape, ns) != tuple(ns):
                self.fail(f"{['scale', 'B'][i - 1]} {list(v.shape)} does not broadcast to {list(ns)}")
            p[key] = np.broadcast_to(v.reshape(v.shape[max(0, v.ndim - len(ns)):]), ns).astype(np.float32)
        eps = float(a.get("epsilon", 1e-5))
        self.emit(self.node.output[0], "layer_norm", [x], x.shape, p,
                  {"weight": self.half(self.opt_input(1)), "bias": self.half(self.opt_input(2))}, axis=axis, eps=eps)
        outs = list(self.node.output) + ["", ""]
        if outs[1] or outs[2]:
            self.layer_norm_stats(x, axis, eps, outs[1], outs[2])

    def _group_norm(self, groups, scale, bias, eps):
        x = self.runtime(self.node.input[0])
        if len(x.shape) < 3:
            self.fail(f"needs [N, C, D1, ...], got {list(x.shape)}")
        c = x.shape[1]
        if groups < 1 or c % groups:
            self.fail(f"{groups} groups do not divide {c} channels")
        p = {"weight": scale, "bias": bias}
        for key, v in p.items():
            if v.size != c:
                self.fail(f"{key} has {v.size} values for {c} channels")
            p[key] = v.reshape(c).astype(np.float32)
        if not eps > 0:
            self.fail(f"epsilon {eps} must be positive")
        halves = {"weight": self.half(self.node.input[1]), "bias": self.half(self.node.input[2])}
        self.emit(self.node.output[0], "group_norm", [x], x.shape, p, halves, groups=int(groups), eps=float(eps))

    def op_InstanceNormalization(self):
        a = self.attrs({"epsilon"})
        x = self.get(self.node.input[0])
        c = x.shape[1] if isinstance(x, Runtime) and len(x.shape) > 1 else 0
        scale = np.asarray(self.const(self.node.input[1], "scale"), dtype=np.float32)
        bias = np.asarray(self.const(self.node.input[2], "B"), dtype=np.float32)
        self._group_norm(c, scale, bias, float(a.get("epsilon", 1e-5)))

    def op_GroupNormalization(self):
        """Opset 18 gives scale and bias per group (opset 21: per channel); per group, each is
        repeated over the group's channels."""
        a = self.attrs({"epsilon", "num_groups", "stash_type"})
        x = self.get(self.node.input[0])
        groups = int(a["num_groups"]) if "num_groups" in a else 0
        c = x.shape[1] if isinstance(x, Runtime) and len(x.shape) > 1 else 0
        scale = np.asarray(self.const(self.node.input[1], "scale"), dtype=np.float32).reshape(-1)
        bias = np.asarray(self.const(self.node.input[2], "bias"), dtype=np.float32).reshape(-1)
        if groups and c % groups == 0 and scale.size == groups != c:
            scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
        self._group_norm(groups, scale, bias, float(a.get("epsilon", 1e-5)))

    def layer_norm_stats(self, x, axis, eps, mean_out, inv_std_out):
        """LayerNormalization's optional Mean and InvStdDev outputs, [..., 1, 1] shaped, spelled
        with dlrun ops: mean(x) and 1 / sqrt(mean((x − mean)²) + eps)."""
        axes = list(range(axis, len(x.shape)))
        base = mean_out or inv_std_out
        m = self.reduce("reduce_mean", x, axes, True, mean_out or base + "/mean")
        if mean_out:
            self.set_out(mean_out, m)
        if inv_std_out:
            d = Runtime(self.layer(inv_std_out + "/centred", "sub", [x, m]), x.shape)
            sq = Runtime(self.layer(inv_std_out + "/square", "mul", [d, d]), x.shape)
            var = self.reduce("reduce_mean", sq, axes, True, inv_std_out + "/var")
            e = self.new_constant(inv_std_out + "/eps", np.array([eps], np.float32))
            ve = Runtime(self.layer(inv_std_out + "/plus_eps", "add", [var, e]), var.shape)
            sd = Runtime(self.layer(inv_std_out + "/std", "sqrt", [ve]), var.shape)
            self.emit(inv_std_out, "reciprocal", [sd], var.shape)

    # ---- resize ----

    RESIZE_COORDS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
    NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

    def op_Upsample(self):
        self._resize(legacy=True)

    def op_Resize(self):
        self._resize(legacy=self.opset < 11)

    def _resize(self, legacy):
        a = self.attrs({"mode", "scales", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                        "exclude_outside", "extrapolation_value", "antialias", "axes", "keep_aspect_ratio_policy"})
        x = self.runtime(self.node.input[0])
        rank, out = len(x.shape), self.node.output[0]
        mode = a.get("mode", "nearest")
        if mode not in ("nearest", "linear", "bilinear"):
            self.fail(f"mode '{mode}' is not supported (nearest and linear are)", Unsupported)
        mode = "linear" if mode == "bilinear" else mode
        if legacy:  # Upsample and Resize-10: x_in = x_out / scale, nearest rounds down
            coord, nearest = "asymmetric", "floor"
            scales = a.get("scales") if "scales" in a else self.const(self.node.input[1], "scales")
            sizes = None
        else:
            coord = a.get("coordinate_transformation_mode", "half_pixel")
            nearest = a.get("nearest_mode", "round_prefer_floor")
            for k, ok in (("antialias", 0), ("exclude_outside", 0)):
                if int(a.get(k, ok)) != ok and (k == "antialias" or mode == "cubic"):
                    self.fail(f"{k}={a[k]} is not supported", Unsupported)
            if "axes" in a or a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
                self.fail("the axes and keep_aspect_ratio_policy attributes are not supported", Unsupported)
            sizes = self.const(self.opt_input(3), "sizes") if self.opt_input(3) else None
            scales = self.const(self.opt_input(2), "scales") if self.opt_input(2) else None
            if sizes is not None and np.size(sizes) == 0:
                sizes = None
        if coord not in self.RESIZE_COORDS:
            self.fail(f"coordinate_transformation_mode '{coord}' is not supported", Unsupported)
        if mode == "nearest" and nearest not in self.NEAREST_MODES:
            self.fail(f"nearest_mode '{nearest}' is not supported", Unsupported)
        osize = self.resize_sizes(x.shape, scales, sizes)
        if tuple(osize) == x.shape:
            self.set_out(out, x)
            return
        if any(o != i for o, i in zip(osize[:-2], x.shape[:-2])):
            self.fail(f"resizes {list(x.shape)} to {osize}: only the last two dimensions may change", Unsupported)
        one_axis = rank == 1 or rank == 3 and osize[1] == x.shape[1]
        v, vo = self.as_4d(x.shape, one_axis), self.as_4d(tuple(osize), one_axis)
        x4 = self.reshape_to(x, v, out + "/as4d")
        kw = {"size": list(vo[2:]), "mode": mode, "coordinate": coord}
        if mode == "nearest":
            kw["nearest"] = nearest
        y = Runtime(self.layer(out if vo == tuple(osize) else out + "/4d", "resize", [x4], **kw), vo)
        self.set_out(out, self.reshape_to(y, tuple(osize), out))

    @staticmethod
    def as_4d(shape, one_axis):
        """The [N, C, H, W] view resize works on: leading dimensions merged into C; with one
        resized axis (rank 1, or rank 3 with C kept) H is 1."""
        if len(shape) >= 4:
            return (shape[0], int(np.prod(shape[1:-2])), shape[-2], shape[-1])
        if one_axis:
            return (1,) * (3 - len(shape)) + tuple(shape[:-1]) + (1, shape[-1])
        return (1,) * (4 - len(shape)) + tuple(shape)

    def resize_sizes(self, shape, scales, sizes):
        """The output shape of a Resize: its sizes, or floor(size · scale) where the scale is
        exactly output / input (what dlrun's resize uses), else refused."""
        if sizes is not None:
            out = fold.ints(sizes)
            if len(out) != len(shape):
                self.fail(f"sizes {out} do not fit the input {list(shape)}")
            return out
        if scales is None:
            self.fail("neither scales nor sizes is given")
        sc = [float(s) for s in np.asarray(scales, dtype=np.float32).reshape(-1)]
        if len(sc) != len(shape):
            self.fail(f"scales {sc} do not fit the input {list(shape)}")
        out = [int(np.floor(d * np.float32(s))) for d, s in zip(shape, sc)]
        for d, s, o in zip(shape, sc, out):
            if o < 1:
                self.fail(f"scale {s} makes an empty output", Unsupported)
            if np.float32(s) != np.float32(o / d):
                self.fail(f"scale {s} is not output / input size ({o}/{d}); dlrun's resize uses the latter",
                          Unsupported)
        return out


# ONNX elementwise ops without attributes and the dlrun op of each.
UNARY_OPS = {"Sqrt": "sqrt", "Exp": "exp", "Log": "log", "Tanh": "tanh", "Erf": "erf", "Neg": "neg", "Abs": "abs",
             "Reciprocal": "reciprocal", "Softplus": "softplus"}


def _unary_handler(dl):
    def handler(self):
        self.attrs(set())
        self._unary(dl)
    return handler


for _onnx_op, _dl_op in UNARY_OPS.items():
    setattr(Converter, "op_" + _onnx_op, _unary_handler(_dl_op))


# ---- writing ----

def _yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_yaml_value(i) for i in v) + "]"
    if isinstance(v, float):
        return repr(v) if np.isfinite(v) else ("-.inf" if v < 0 else ".inf")
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid YAML flow scalar
    return str(v)


def to_yaml(conv, outputs, model_name, weights_file):
    lines = ["# converted from ONNX by tools/onnx2dlrun", f"model: {_yaml_value(model_name)}"]
    if conv.tensors:
        lines.append(f"weights: {_yaml_value(weights_file)}")
    lines.append("inputs:")
    for name, shape, dtype in conv.inputs:
        dt = ", dtype: int64" if dtype == "int64" else ""
        lines.append(f"  - {{name: {_yaml_value(name)}, shape: {_yaml_value(list(shape))}{dt}}}")
    if conv.constants:
        lines.append("constants:")
        for name, shape in conv.constants:
            lines.append(f"  - {{name: {_yaml_value(name)}, shape: {_yaml_value(list(shape))}}}")
    lines.append("layers:")
    for l in conv.layers:
        parts = [f"name: {_yaml_value(l['name'])}", f"op: {l['op']}", f"inputs: {_yaml_value(l['inputs'])}"]
        parts += [f"{k}: {_yaml_value(v)}" for k, v in l.items() if k not in ("name", "op", "inputs")]
        lines.append("  - {" + ", ".join(parts) + "}")
    lines.append(f"outputs: {_yaml_value(outputs)}")
    return "\n".join(lines) + "\n"


def convert_file(onnx_path, yaml_path, feeds=None, dims=None):
    """Converts onnx_path; writes yaml_path and its .safetensors beside it. Returns a dict with the
    dlrun input names (in order), their dtypes ("float32" or "int64") and output names. Raises
    ConvertError."""
    try:
        model = onnx.load(onnx_path)
    except OSError as e:
        raise ConvertError(f"cannot read: {e.strerror or e}")
    except Exception as e:  # protobuf's DecodeError and friends
        raise ConvertError(f"not an ONNX model ({type(e).__name__}: {str(e).strip() or 'cannot parse'})")
    conv = Converter(model, feeds, dims)
    outputs = conv.convert()
    if not conv.inputs:
        raise ConvertError("the graph has no runtime inputs (everything folds to constants)")
    base = yaml_path[:-5] if yaml_path.endswith(".yaml") else yaml_path
    st_path = base + ".safetensors"
    write_safetensors(st_path, conv.tensors, conv.stored)
    name = model.graph.name or "onnx-model"
    with open(yaml_path, "w") as f:
        f.write(to_yaml(conv, outputs, name, st_path.rsplit("/", 1)[-1]))
    return {"inputs": [n for n, _, _ in conv.inputs], "input_dtypes": [d for _, _, d in conv.inputs],
            "outputs": outputs}
