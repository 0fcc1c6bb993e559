"""check — dlrun.check and dlrun.test_ops: backends cross-checked against the CPU reference.

Both return a CheckResult: the rows (one per op and backend, plus the end-to-end row of a model)
and the pass / fail / unsupported counts, as `dlrun check` and `dlrun test-ops` print them
(docs/check.md has the thresholds).
"""
import ctypes
import dataclasses
import os
import random

from . import _capi
from .errors import InvalidArgument, raise_for
from .session import Model, _context

lib = _capi.lib


@dataclasses.dataclass
class CheckRow:
    layer: str
    op: str
    backend: str
    shape: str
    result: str  # "pass", "fail" or "unsupported"
    max_abs: float
    max_rel: float
    nmse: float
    threshold: float
    detail: str
    ms: float
    gflops: float
    gbps: float
    storage: str
    reference: str


@dataclasses.dataclass
class CheckResult:
    rows: list
    passed: int
    failed: int
    unsupported: int
    seed: int

    @property
    def ok(self):
        """True when nothing failed (unsupported ops are not failures)."""
        return self.failed == 0

    def failures(self):
        return [r for r in self.rows if r.result == "fail"]


def _options(backend, precision, seed, op=None, perf=False, iterations=0, layout="auto"):
    if precision not in _capi.PRECISIONS:
        raise InvalidArgument(f"precision must be one of {', '.join(_capi.PRECISIONS)}, not {precision!r}")
    if layout not in _capi.LAYOUTS:
        raise InvalidArgument(f"layout must be one of {', '.join(_capi.LAYOUTS)}, not {layout!r}")
    names = [] if backend is None else [backend] if isinstance(backend, str) else list(backend)
    keep = [n.encode() for n in names]
    arr = (ctypes.c_char_p * max(len(keep), 1))(*keep)
    seed = random.getrandbits(63) if seed is None else int(seed)
    o = _capi.CheckOptions(ctypes.sizeof(_capi.CheckOptions), arr if keep else None, len(keep),
                           _capi.PRECISIONS[precision], seed, op.encode() if op else None, 1 if perf else 0,
                           int(iterations), _capi.LAYOUTS[layout])
    return o, (keep, arr), seed


def _collect():
    rows = []

    def cb(_user, r):
        r = r.contents
        t = _capi.text
        rows.append(CheckRow(t(r.layer), t(r.op), t(r.backend), t(r.shape), _capi.CHECK_RESULTS.get(r.result, "?"),
                             r.max_abs, r.max_rel, r.nmse, r.threshold, t(r.detail) or "", r.ms, r.gflops, r.gbps,
                             t(r.storage), t(r.reference)))

    return rows, _capi.CHECK_FN(cb)


def check(model, backend=None, precision="f32", seed=None, threads=None, device=0, layout="auto"):
    """Runs the model on the CPU reference, then each op on each backend checked with exactly the
    inputs the reference saw, and the whole model on that backend. backend: a name, a list, or
    None (every loaded backend but cpu); layout: asked of the checked backends ("auto", "nchw",
    "nhwc"; the reference is row-major). Returns a CheckResult."""
    m = model if isinstance(model, Model) else Model(model)
    o, keep, seed = _options(backend, precision, seed, layout=layout)
    rows, fn = _collect()
    summ, err = _capi.CheckSummary(), _capi.Error()
    raise_for(lib.dl_check_model(_context(threads, device), m._handle, ctypes.byref(o), fn, None, ctypes.byref(summ),
                                 ctypes.byref(err)), err)
    del keep
    return CheckResult(rows, summ.passed, summ.failed, summ.unsupported, seed)


def test_ops(backend=None, op=None, precision="f32", perf=False, iterations=10, seed=None, threads=None, device=0,
             layout="auto"):
    """The built-in op cases on each backend against the CPU reference (op: only this op kind);
    perf=True also times each case; layout as for check ("auto": each backend's own). Returns a
    CheckResult."""
    o, keep, seed = _options(backend, precision, seed, op, perf, iterations, layout)
    rows, fn = _collect()
    summ, err = _capi.CheckSummary(), _capi.Error()
    raise_for(lib.dl_test_ops(_context(threads, device), ctypes.byref(o), fn, None, ctypes.byref(summ),
                              ctypes.byref(err)), err)
    del keep
    return CheckResult(rows, summ.passed, summ.failed, summ.unsupported, seed)


def _importer():
    """The ONNX importer: the wheel's copy (dlrun.onnx), or tools/onnx of the checkout this
    package is run from (PYTHONPATH=python)."""
    try:
        from .onnx import convert as conv
        return conv
    except ModuleNotFoundError as e:
        if e.name not in ("dlrun.onnx", "dlrun.onnx.convert"):
            raise
    tools = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "onnx")
    if not os.path.exists(os.path.join(tools, "convert.py")):
        raise ImportError("no ONNX importer in this installation (dlrun.onnx or the checkout's tools/onnx)")
    import sys
    if tools not in sys.path:
        sys.path.insert(0, os.path.normpath(tools))
    import convert as conv
    return conv


def convert(onnx_path, output=None, dims=None):
    """Converts an ONNX model with dlrun's importer (tools/onnx2dlrun; needs the `onnx` package):
    writes OUTPUT.yaml (default: beside the .onnx) and its weights as OUTPUT.safetensors. dims
    gives sizes of symbolic input dimensions ({"batch_size": 1}). Returns the .yaml's path."""
    try:
        conv = _importer()
    except ImportError as e:
        raise InvalidArgument(f"dlrun.convert needs the onnx package ({e})") from None
    onnx_path = os.fspath(onnx_path)
    if output is None:
        output = (onnx_path[:-5] if onnx_path.endswith(".onnx") else onnx_path) + ".yaml"
    try:
        conv.convert_file(onnx_path, os.fspath(output), dims=dims)
    except conv.ConvertError as e:
        raise InvalidArgument(f"{onnx_path}: {e}") from None
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"{onnx_path}: {e}") from None
    return os.fspath(output)
