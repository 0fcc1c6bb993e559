"""dlrun — Python bindings of dlrun, a deep-learning runtime with pluggable backends.

    import dlrun
    sess = dlrun.Session(dlrun.model_path("fashion_mnist"))
    print(sess.classify(dlrun.model_path("samples/ankle_boot.png"))[0])   # ('Ankle boot', 0.99.., 9)

    y = sess.run({"x": x})                  # {output name: NumPy array}
    dlrun.check("model.yaml", backend="cuda")   # every op against the CPU reference
    dlrun.convert("model.onnx")             # -> model.yaml + model.safetensors

A ctypes binding of libdlrun's C API (docs/python.md): every run releases the GIL.
"""
import os

from . import _capi
from .check import CheckResult, CheckRow, check, convert, test_ops
from .errors import Error, InvalidArgument, IOFailure, NoDevice, OutOfMemory, RuntimeFailure, Unsupported
from .session import Model, Session, TensorInfo, backends
from .tensor import Tensor, from_dlpack

__version__ = _capi.text(_capi.lib.dl_version())
library_path = _capi.library_path

__all__ = ["Session", "Model", "TensorInfo", "Tensor", "from_dlpack", "backends", "check", "test_ops", "convert",
           "CheckResult", "CheckRow", "model_path", "Error", "InvalidArgument", "Unsupported", "OutOfMemory",
           "RuntimeFailure", "NoDevice", "IOFailure", "__version__"]


def models_dir():
    """The folder of the models shipped with dlrun (the package's copy, else the checkout's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "_native", "models"), os.path.join(here, "..", "..", "models")):
        if os.path.isdir(d):
            return os.path.normpath(d)
    return None


def model_path(name):
    """The path of a shipped model or file: model_path("resnet18") -> .../models/resnet18.yaml;
    model_path("samples/ankle_boot.png") for any other file under models/."""
    d = models_dir()
    if d is None:
        raise InvalidArgument("no shipped models found (install with pip, or run from the checkout)")
    for cand in (name, name + ".yaml"):
        p = os.path.join(d, cand)
        if os.path.isfile(p):
            return p
    names = sorted(f[:-5] for f in os.listdir(d) if f.endswith(".yaml"))
    raise InvalidArgument(f"no shipped model or file '{name}' in {d} (models: {', '.join(names)})")
