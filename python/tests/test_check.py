"""dlrun.check, dlrun.test_ops and dlrun.convert return structured results."""
import os

import numpy as np
import pytest

import dlrun


def test_check_model(models):
    r = dlrun.check(os.path.join(models, "lenet.yaml"), backend="cpu", seed=7)
    assert r.ok and r.failed == 0 and r.passed == len([x for x in r.rows if x.result == "pass"]) > 0
    assert r.seed == 7
    e2e = [x for x in r.rows if x.op == "model"]
    # op by op, then as dlrun runs it (lenet's relus fused)
    assert [x.layer for x in e2e] == ["(end to end)", "(end to end, fused)"]
    assert all(x.result == "pass" and x.backend == "cpu" for x in e2e)
    conv = next(x for x in r.rows if x.op == "conv2d")
    assert conv.shape.startswith("[1, ") and conv.nmse <= conv.threshold and conv.reference.startswith("cpu")


def test_check_unknown_backend(models):
    with pytest.raises(dlrun.Error) as e:
        dlrun.check(os.path.join(models, "lenet.yaml"), backend="nosuchbackend")
    assert "nosuchbackend" in e.value.reason


def test_test_ops_one_op():
    r = dlrun.test_ops(backend="cpu", op="softmax", seed=3)
    assert r.ok and r.rows and all(x.op == "softmax" and x.result == "pass" for x in r.rows)
    assert r.passed == len(r.rows)
    p = dlrun.test_ops(backend="cpu", op="relu", perf=True, iterations=2, seed=3)
    assert all(x.ms > 0 for x in p.rows if x.result == "pass")
    with pytest.raises(dlrun.Error):
        dlrun.test_ops(backend="cpu", op="nosuchop")


def test_convert_onnx_and_run(tmp_path, rng):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 5, 3, padding=1)
            self.fc = torch.nn.Linear(5, 4)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).mean([2, 3]))

    torch.manual_seed(0)
    net = Net().eval()
    x = rng.uniform(-1, 1, size=(2, 3, 9, 7)).astype(np.float32)
    torch.onnx.export(net, torch.from_numpy(x), str(tmp_path / "net.onnx"), input_names=["x"], output_names=["y"],
                      opset_version=13)
    yaml = dlrun.convert(tmp_path / "net.onnx")
    assert yaml == str(tmp_path / "net.yaml") and os.path.exists(tmp_path / "net.safetensors")
    sess = dlrun.Session(yaml)
    assert [i.name for i in sess.inputs] == ["x"]
    y = sess.run({"x": x})[sess.outputs[0].name]
    with torch.no_grad():
        ref = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx model")
    with pytest.raises(dlrun.InvalidArgument, match="bad.onnx"):
        dlrun.convert(bad)


def test_check_with_a_layout(models):
    r = dlrun.check(os.path.join(models, "lenet.yaml"), backend="cpu", seed=5, layout="nhwc")
    assert r.ok and r.failed == 0
    convs = [x for x in r.rows if x.op == "conv2d"]
    assert convs and all(x.storage == "f32 nhwc" and x.reference == "cpu f32" for x in convs)
    r = dlrun.check(os.path.join(models, "lenet.yaml"), backend="cpu", seed=5, layout="nchw")
    assert r.ok and all(x.storage in (None, "f32") for x in r.rows)
    with pytest.raises(dlrun.InvalidArgument, match="layout"):
        dlrun.check(os.path.join(models, "lenet.yaml"), backend="cpu", layout="nhwc8c")
