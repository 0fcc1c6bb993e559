"""DLPack: tensors of other libraries in without a copy, outputs out to them without a copy."""
import ctypes
import os

import numpy as np
import pytest

import dlrun
from dlrun import tensor as dltensor

torch = pytest.importorskip("torch")


def test_torch_cpu_tensor_in_without_copy(models, rng):
    sess = dlrun.Session(os.path.join(models, "lenet.yaml"), backend="cpu")
    inp, out = sess.inputs[0], sess.outputs[0].name
    x = rng.uniform(-1, 1, size=inp.shape).astype(np.float32)
    t = torch.from_numpy(x.copy())
    view = dltensor.InputView(inp.name, t, inp.shape, inp.dtype)
    assert view.tensor.data == t.data_ptr()  # the library reads the tensor's own memory
    np.testing.assert_array_equal(sess.run({inp.name: t})[out], sess.run({inp.name: x})[out])
    # a strided tensor is made dense once, with the same result
    wide = torch.zeros(inp.shape[:-1] + (inp.shape[-1] * 2,))
    wide[..., ::2] = t
    np.testing.assert_array_equal(sess.run({inp.name: wide[..., ::2]})[out], sess.run({inp.name: x})[out])
    with pytest.raises(dlrun.InvalidArgument, match="must be float32, got float64"):
        sess.run({inp.name: t.double()})


def test_outputs_go_to_torch_without_copy(models, rng):
    sess = dlrun.Session(os.path.join(models, "lenet.yaml"), backend="cpu")
    x = rng.uniform(-1, 1, size=sess.inputs[0].shape).astype(np.float32)
    y = sess.run(x)[sess.outputs[0].name]
    ty = torch.from_dlpack(y)
    assert ty.data_ptr() == y.ctypes.data and ty.shape == y.shape
    np.testing.assert_array_equal(ty.numpy(), y)


def test_from_dlpack_views(rng):
    a = rng.uniform(size=(3, 4)).astype(np.float32)
    t = dlrun.from_dlpack(torch.from_numpy(a))
    assert t.shape == (3, 4) and t.dtype == "float32" and t.device == ("cpu", 0) and t.contiguous
    assert t.data_ptr == a.ctypes.data
    v = t.numpy()
    assert v.ctypes.data == a.ctypes.data
    back = torch.from_dlpack(t)  # and on to another library, still the same memory
    assert back.data_ptr() == a.ctypes.data
    assert dlrun.from_dlpack(a).dtype == "float32"
    assert dlrun.from_dlpack(torch.zeros(2, 3, dtype=torch.int64)).dtype == "int64"
    assert not dlrun.from_dlpack(torch.zeros(4, 5).t()).contiguous
    with pytest.raises(dlrun.InvalidArgument, match="__dlpack__"):
        dlrun.from_dlpack([1, 2, 3])


class _FakeGpuTensor:
    """A DLPack producer claiming CUDA memory (for the path that hands device pointers over)."""

    def __init__(self, shape):
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._mt = dltensor._capi.ManagedTensor()
        dl = self._mt.dl_tensor
        dl.data, dl.device, dl.ndim = 0x1000, dltensor._capi.Device(2, 0), len(shape)
        dl.dtype = dltensor._capi.DType(2, 32, 1)
        dl.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        self._new = new

    def __dlpack__(self, stream=None):
        return self._new(ctypes.addressof(self._mt), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)


def test_gpu_tensor_is_handed_over_as_a_device_pointer(models):
    sess = dlrun.Session(os.path.join(models, "lenet.yaml"), backend="cpu")
    inp = sess.inputs[0]
    g = dlrun.from_dlpack(_FakeGpuTensor(inp.shape))
    assert g.device == ("cuda", 0)
    with pytest.raises(dlrun.InvalidArgument, match="numpy"):
        g.numpy()
    view = dltensor.InputView(inp.name, g, inp.shape, inp.dtype)
    assert view.tensor.device.device_type == 2 and view.tensor.data == 0x1000
    # no op of this session runs on a GPU: a clear error, nothing read from the pointer
    with pytest.raises(dlrun.InvalidArgument, match=inp.name):
        sess.run({inp.name: g})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensor_stays_on_the_gpu(models, rng):
    names = {b["name"] for b in dlrun.backends() if b["loaded"]}
    if "cuda" not in names:
        pytest.skip("the cuda backend is not loaded")
    sess = dlrun.Session(os.path.join(models, "resnet18.yaml"), backend="cuda")
    x = rng.uniform(-1, 1, size=sess.inputs[0].shape).astype(np.float32)
    y_host = sess.run(x)[sess.outputs[0].name]
    y_dev = sess.run(torch.from_numpy(x).cuda())[sess.outputs[0].name]
    np.testing.assert_allclose(y_dev, y_host, rtol=1e-5, atol=1e-6)
