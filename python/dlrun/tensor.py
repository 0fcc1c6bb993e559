"""tensor — arrays in and out of libdlrun: NumPy arrays, DLPack (both ways), dl_tensor structs.

A session's inputs may be NumPy arrays or any object with `__dlpack__` (a PyTorch tensor, a JAX
or CuPy array, a dlrun.Tensor). A CPU tensor whose memory is dense row-major is handed to the
library where it lies, with no copy on the Python side; a GPU tensor is handed over as a device
pointer (libdlrun takes it where the op that reads the input runs on that GPU). Outputs are NumPy
arrays, which themselves export DLPack (`torch.from_dlpack(y)` takes them without a copy).
"""
import ctypes

import numpy as np

from . import _capi
from .errors import InvalidArgument

_NP_OF = {(_capi.DTYPE_FLOAT, 32): np.dtype(np.float32), (_capi.DTYPE_FLOAT, 64): np.dtype(np.float64),
          (_capi.DTYPE_FLOAT, 16): np.dtype(np.float16), (_capi.DTYPE_INT, 64): np.dtype(np.int64),
          (_capi.DTYPE_INT, 32): np.dtype(np.int32), (_capi.DTYPE_INT, 8): np.dtype(np.int8),
          (_capi.DTYPE_UINT, 8): np.dtype(np.uint8), (_capi.DTYPE_UINT, 1): np.dtype(np.bool_)}
_DEVICE_NAMES = {_capi.DEVICE_CPU: "cpu", _capi.DEVICE_CUDA: "cuda", _capi.DEVICE_CUDA_HOST: "cuda_host"}

_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype, _capsule_get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


def dtype_name(dt):
    """'float32', 'int64', 'bfloat16', ... for a dl_dtype."""
    if dt.code == _capi.DTYPE_BFLOAT and dt.bits == 16:
        return "bfloat16"
    np_dt = _NP_OF.get((dt.code, dt.bits))
    return np_dt.name if np_dt is not None and dt.lanes == 1 else f"dtype(code={dt.code}, bits={dt.bits})"


def shape_of(t):
    return tuple(t.shape[i] for i in range(t.ndim))


def _row_major_strides(shape):
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


class Tensor:
    """A DLPack view of another library's tensor (dlrun.from_dlpack): no copy is made. It holds
    the producer's object, so the memory lives as long as this view; `__dlpack__` hands the same
    memory on; numpy() gives a NumPy view of a CPU tensor."""

    def __init__(self, obj):
        if not hasattr(obj, "__dlpack__"):
            raise InvalidArgument(f"from_dlpack wants an object with __dlpack__, not {type(obj).__name__}")
        self._obj = obj
        cap = obj.__dlpack__()
        if not _capsule_valid(cap, b"dltensor"):
            raise InvalidArgument("from_dlpack: __dlpack__ did not return an unused 'dltensor' capsule")
        self._capsule = cap  # not consumed: the producer's capsule destructor frees it
        mt = _capi.ManagedTensor.from_address(_capsule_get(cap, b"dltensor"))
        dl = mt.dl_tensor
        self.shape = shape_of(dl)
        self.device = (_DEVICE_NAMES.get(dl.device.device_type, f"device_type {dl.device.device_type}"),
                       dl.device.device_id)
        self.dtype = dtype_name(dl.dtype)
        self._dl = dl
        self._mt = mt
        strides = None if not dl.strides else tuple(dl.strides[i] for i in range(dl.ndim))
        # dense row-major: no strides, or strides equal to the row-major ones (size-1 dims free)
        self.contiguous = strides is None or all(
            s == r or n == 1 for s, r, n in zip(strides, _row_major_strides(self.shape), self.shape))

    @property
    def data_ptr(self):
        return (self._dl.data or 0) + self._dl.byte_offset

    def __dlpack__(self, stream=None):
        return self._obj.__dlpack__() if stream is None else self._obj.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return (self._dl.device.device_type, self._dl.device.device_id)

    def numpy(self):
        """A NumPy view of a CPU tensor (no copy)."""
        if self._dl.device.device_type != _capi.DEVICE_CPU:
            raise InvalidArgument(f"tensor is on {self.device[0]}:{self.device[1]}; numpy() needs a CPU tensor")
        return np.from_dlpack(self._obj)

    def __repr__(self):
        return f"dlrun.Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device[0]}:{self.device[1]})"


def from_dlpack(obj):
    """A dlrun.Tensor viewing obj's memory (any object with __dlpack__), without a copy."""
    return obj if isinstance(obj, Tensor) else Tensor(obj)


def _synchronize_producer(obj):
    """libdlrun copies a device input on its own stream: the producer's pending work must be done.
    PyTorch tensors are synchronized here; other producers' users synchronize before run()."""
    if type(obj).__module__.startswith("torch"):
        import torch
        torch.cuda.current_stream(obj.device).synchronize()


class InputView:
    """One input made ready for dl_session_run: a dl_tensor pointing at memory kept alive here."""

    def __init__(self, name, value, want_shape, want_dtype):
        self.keep = value
        if isinstance(value, np.ndarray):
            self._from_numpy(name, value, want_shape, want_dtype)
        elif hasattr(value, "__dlpack__"):
            self._from_dlpack(name, from_dlpack(value), want_shape, want_dtype)
        else:
            raise InvalidArgument(f"input '{name}' must be a NumPy array or a DLPack tensor, not {type(value).__name__}")

    @staticmethod
    def _check(name, shape, dtype, want_shape, want_dtype):
        if dtype != want_dtype:
            raise InvalidArgument(f"input '{name}' must be {want_dtype}, got {dtype} (convert it, e.g. "
                                  f"x.astype(numpy.{want_dtype}))")
        if tuple(shape) != tuple(want_shape):
            hint = ""
            if len(shape) == len(want_shape) and tuple(shape[1:]) == tuple(want_shape[1:]):
                hint = f" (the session was made for batch {want_shape[0]}: Session(..., batch={shape[0]}))"
            raise InvalidArgument(f"input '{name}' must have shape {list(want_shape)}, got {list(shape)}{hint}")

    def _set(self, ptr, shape, dtype_code, bits, device_type=_capi.DEVICE_CPU, device_id=0):
        self.shape_buf = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        t = _capi.Tensor()
        t.data = ptr
        t.device = _capi.Device(device_type, device_id)
        t.ndim = len(shape)
        t.dtype = _capi.DType(dtype_code, bits, 1)
        t.shape = ctypes.cast(self.shape_buf, ctypes.POINTER(ctypes.c_int64))
        t.strides = None
        t.byte_offset = 0
        self.tensor = t

    def _from_numpy(self, name, a, want_shape, want_dtype):
        self._check(name, a.shape, a.dtype.name, want_shape, want_dtype)
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)  # the one copy a strided array needs
            self.keep = a
        code = _capi.DTYPE_INT if a.dtype.kind == "i" else _capi.DTYPE_FLOAT
        self._set(a.ctypes.data, a.shape, code, a.dtype.itemsize * 8)

    def _from_dlpack(self, name, t, want_shape, want_dtype):
        self.keep = t
        self._check(name, t.shape, t.dtype, want_shape, want_dtype)
        if not t.contiguous:
            if t._dl.device.device_type != _capi.DEVICE_CPU:
                raise InvalidArgument(f"input '{name}' on {t.device[0]} must be dense row-major (call .contiguous())")
            a = np.ascontiguousarray(t.numpy())
            self.keep = a
            self._from_numpy(name, a, want_shape, want_dtype)
            return
        dl = t._dl
        if dl.device.device_type != _capi.DEVICE_CPU:
            _synchronize_producer(t._obj)
        self._set(t.data_ptr, t.shape, dl.dtype.code, dl.dtype.bits, dl.device.device_type, dl.device.device_id)


def output_view(t):
    """A NumPy view of a session output's buffer (no copy: run() copies it out after each run,
    since the next run reuses the buffer)."""
    shape = shape_of(t)
    np_dt = _NP_OF.get((t.dtype.code, t.dtype.bits))
    if np_dt is None or t.device.device_type != _capi.DEVICE_CPU or not t.data:
        raise InvalidArgument(f"output of dtype {dtype_name(t.dtype)} on device {t.device.device_type} "
                              "cannot become a NumPy array")
    n = int(np.prod(shape, dtype=np.int64))
    buf = (ctypes.c_char * (n * np_dt.itemsize)).from_address(t.data + t.byte_offset)
    return np.frombuffer(buf, dtype=np_dt, count=n).reshape(shape)
