"""_capi — finds libdlrun and declares its C API (core/include/dlrun/dlrun.h) for ctypes.

The structs below mirror dlrun.h member for member; libdlrun reads a caller's options struct only
up to the struct_size the caller gives, so this binding keeps working with a newer library.
ctypes releases the GIL for the whole of every call into libdlrun, so sessions run in parallel
from Python threads.

Where the library is looked for, first found wins:
  1. $DLRUN_LIBRARY (a path to libdlrun.so);
  2. _native/lib/ inside this package (what `pip install .` puts there);
  3. pkg-config's libdir for `dlrun` (an installed dlrun: cmake --install);
  4. the dynamic loader's search path (ctypes.util.find_library).
"""
import ctypes
import ctypes.util
import glob
import os
import subprocess

c_char_p, c_int, c_int32, c_uint32, c_int64, c_uint64, c_double, c_void_p = (
    ctypes.c_char_p, ctypes.c_int, ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64,
    ctypes.c_double, ctypes.c_void_p)
POINTER, Structure = ctypes.POINTER, ctypes.Structure

# dl_status
OK, E_INVALID, E_UNSUPPORTED, E_NOMEM, E_RUNTIME, E_NODEVICE, E_IO = range(7)
# DLPack device and dtype codes
DEVICE_CPU, DEVICE_CUDA, DEVICE_CUDA_HOST = 1, 2, 3
DTYPE_INT, DTYPE_UINT, DTYPE_FLOAT, DTYPE_BFLOAT = 0, 1, 2, 4
PRECISIONS = {"f32": 0, "tf32": 1, "f16": 2, "bf16": 3}
LAYOUTS = {"auto": 0, "nchw": 1, "nhwc": 2}  # dl_layout_mode
STEP_KINDS = {0: "op", 1: "copy", 2: "fused", 3: "elided"}
CHECK_RESULTS = {0: "pass", 1: "fail", 2: "unsupported"}

ERROR_LEN = 512


class Error(Structure):
    _fields_ = [("msg", ctypes.c_char * ERROR_LEN)]


class Device(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DType(Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class Tensor(Structure):  # dl_tensor == DLPack's DLTensor
    _fields_ = [("data", c_void_p), ("device", Device), ("ndim", c_int32), ("dtype", DType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class ManagedTensor(Structure):  # DLPack's DLManagedTensor
    _fields_ = [("dl_tensor", Tensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class ContextOptions(Structure):
    _fields_ = [("struct_size", c_uint32), ("n_threads", c_int32), ("device_index", c_int32),
                ("plugin_path", c_char_p), ("no_default_path", c_int32)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_int, c_char_p, c_char_p)


class SessionOptions(Structure):
    _fields_ = [("struct_size", c_uint32), ("batch", c_int64), ("seed", c_uint64), ("weights_path", c_char_p),
                ("backend", c_char_p), ("precision", c_int32), ("no_fuse", c_int32), ("max_memory", c_int64),
                ("prefer_backend", c_char_p), ("keep_activations", c_int32), ("retune", c_int32),
                ("no_fallback", c_int32), ("progress", PROGRESS_FN), ("progress_user", c_void_p),
                ("reserve_inputs", c_int32), ("trace", c_int32), ("layout", c_int32), ("micro_batch", c_int64),
                ("parts_at_once", c_int32)]


class PluginInfo(Structure):
    _fields_ = [("name", c_char_p), ("path", c_char_p), ("loaded", c_int32), ("description", c_char_p),
                ("reason", c_char_p), ("device", Device), ("queue_family", c_char_p)]


class StepInfo(Structure):
    _fields_ = [("kind", c_int32), ("layer", c_char_p), ("op", c_char_p), ("backend", c_char_p), ("ndim", c_int32),
                ("shape", POINTER(c_int64)), ("flops", c_double), ("bytes", c_double), ("last_ms", c_double),
                ("total_ms", c_double), ("runs", c_int64)]


class PlacementCandidate(Structure):
    _fields_ = [("backend", c_char_p), ("ms", c_double), ("cached", c_int32), ("why", c_char_p)]


class PlacementInfo(Structure):
    _fields_ = [("layer", c_char_p), ("op", c_char_p), ("chosen", c_char_p), ("n_candidates", c_int32),
                ("candidates", POINTER(PlacementCandidate)), ("storage", c_char_p)]


class MemoryInfo(Structure):
    _fields_ = [("domain", c_char_p), ("peak_bytes", c_uint64), ("naive_bytes", c_uint64),
                ("lower_bound_bytes", c_uint64), ("weight_bytes", c_uint64)]


class RunTimes(Structure):
    _fields_ = [("inputs_ms", c_double), ("compute_ms", c_double), ("outputs_ms", c_double)]


class CheckRow(Structure):
    _fields_ = [("layer", c_char_p), ("op", c_char_p), ("backend", c_char_p), ("shape", c_char_p), ("result", c_int32),
                ("max_abs", c_double), ("max_rel", c_double), ("nmse", c_double), ("threshold", c_double),
                ("detail", c_char_p), ("ms", c_double), ("gflops", c_double), ("gbps", c_double),
                ("storage", c_char_p), ("reference", c_char_p)]


CHECK_FN = ctypes.CFUNCTYPE(None, c_void_p, POINTER(CheckRow))


class CheckOptions(Structure):
    _fields_ = [("struct_size", c_uint32), ("backends", POINTER(c_char_p)), ("n_backends", c_int32),
                ("precision", c_int32), ("seed", c_uint64), ("op", c_char_p), ("perf", c_int32),
                ("iterations", c_int32), ("layout", c_int32)]


class CheckSummary(Structure):
    _fields_ = [("passed", c_int32), ("failed", c_int32), ("unsupported", c_int32)]


_P = c_void_p  # opaque handles: dl_context*, dl_model*, dl_session*

# name: (restype, argtypes); optional ones may be missing from an older library
_API = {
    "dl_version": (c_char_p, []),
    "dl_status_name": (c_char_p, [c_int]),
    "dl_context_create": (c_int, [POINTER(ContextOptions), POINTER(_P), POINTER(Error)]),
    "dl_context_free": (None, [_P]),
    "dl_context_plugin_count": (c_int, [_P]),
    "dl_context_plugin": (POINTER(PluginInfo), [_P, c_int]),
    "dl_model_load": (c_int, [c_char_p, POINTER(_P), POINTER(Error)]),
    "dl_model_free": (None, [_P]),
    "dl_model_name": (c_char_p, [_P]),
    "dl_session_options_init": (None, [c_void_p]),
    "dl_session_create": (c_int, [_P, _P, c_void_p, POINTER(_P), POINTER(Error)]),
    "dl_session_free": (None, [_P]),
    "dl_session_input_count": (c_int, [_P]),
    "dl_session_input": (POINTER(Tensor), [_P, c_int]),
    "dl_session_input_name": (c_char_p, [_P, c_int]),
    "dl_session_input_bound": (c_int64, [_P, c_int]),
    "dl_session_input_buffer": (c_void_p, [_P, c_int]),
    "dl_session_run": (c_int, [_P, POINTER(Tensor), c_int, POINTER(Error)]),
    "dl_session_output_count": (c_int, [_P]),
    "dl_session_output": (POINTER(Tensor), [_P, c_int]),
    "dl_session_output_name": (c_char_p, [_P, c_int]),
    "dl_session_layout": (c_char_p, [_P]),
    "dl_session_batching": (c_char_p, [_P]),
    "dl_session_step_count": (c_int, [_P]),
    "dl_session_step": (None, [_P, c_int, POINTER(StepInfo)]),
    "dl_session_reset_profile": (None, [_P]),
    "dl_session_set_profiling": (None, [_P, c_int]),
    "dl_session_last_run_times": (None, [_P, POINTER(RunTimes)]),
    "dl_session_last_run_handovers": (None, [_P, POINTER(c_int), POINTER(c_int)]),
    "dl_session_placement_count": (c_int, [_P]),
    "dl_session_placement": (None, [_P, c_int, POINTER(PlacementInfo)]),
    "dl_session_placement_stats": (None, [_P, POINTER(c_int), POINTER(c_int), POINTER(c_char_p)]),
    "dl_session_placement_cold": (None, [_P, POINTER(c_int), POINTER(c_uint64), POINTER(c_uint64)]),
    "dl_session_memory_count": (c_int, [_P]),
    "dl_session_memory": (None, [_P, c_int, POINTER(MemoryInfo)]),
    "dl_check_model": (c_int, [_P, _P, POINTER(CheckOptions), CHECK_FN, c_void_p, POINTER(CheckSummary),
                               POINTER(Error)]),
    "dl_test_ops": (c_int, [_P, POINTER(CheckOptions), CHECK_FN, c_void_p, POINTER(CheckSummary), POINTER(Error)]),
    "dl_session_write_trace": (c_int, [_P, c_char_p, POINTER(Error)]),
    "dl_model_label_count": (c_int, [_P]),
    "dl_model_label": (c_char_p, [_P, c_int]),
    "dl_image_load": (c_int, [_P, c_int, c_char_p, POINTER(POINTER(ctypes.c_float)), POINTER(c_int64),
                              POINTER(c_int), POINTER(Error)]),
    "dl_free": (None, [c_void_p]),
}


def _pkg_config_libdir():
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", "dlrun"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _candidates():
    env = os.environ.get("DLRUN_LIBRARY")
    if env:
        yield env, "$DLRUN_LIBRARY"
        return
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native", "lib")
    for p in sorted(glob.glob(os.path.join(here, "libdlrun.so*"))):
        yield p, "the package's _native/lib"
    libdir = _pkg_config_libdir()
    if libdir:
        yield os.path.join(libdir, "libdlrun.so"), "pkg-config dlrun"
    found = ctypes.util.find_library("dlrun")
    if found:
        yield found, "the loader's search path"


def _load():
    tried = []
    for path, where in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({where}): {e}")
    detail = "; ".join(tried) if tried else "none found"
    raise ImportError("dlrun: cannot load libdlrun (set DLRUN_LIBRARY to libdlrun.so, or `pip install .` in the "
                      f"dlrun checkout): {detail}")


lib, library_path = _load()
missing = []
for _name, (_res, _args) in _API.items():
    try:
        _f = getattr(lib, _name)
    except AttributeError:
        missing.append(_name)
        continue
    _f.restype, _f.argtypes = _res, _args


def has(name):
    """True when the loaded library has this function (optional parts of the API)."""
    return name not in missing


def text(b):
    return b.decode("utf-8", "replace") if b is not None else None
