"""Images in (the shipped Fashion-MNIST model names the class of each shipped sample) and the
Chrome trace a Session writes."""
import json
import os

import numpy as np
import pytest

import dlrun

SAMPLES = {"tshirt_top": "T-shirt/top", "trouser": "Trouser", "pullover": "Pullover", "dress": "Dress",
           "coat": "Coat", "sandal": "Sandal", "shirt": "Shirt", "sneaker": "Sneaker", "bag": "Bag",
           "ankle_boot": "Ankle boot"}


def test_shipped_model_names_each_sample(models):
    sess = dlrun.Session(os.path.join(models, "fashion_mnist.yaml"))
    assert len(sess.labels) == 10 and sess.labels[9] == "Ankle boot"
    for stem, label in SAMPLES.items():
        top = sess.classify(os.path.join(models, "samples", stem + ".png"))
        assert top[0][0] == label, f"{stem}.png: {top}"
        assert len(top) == 5 and abs(sum(p for _, p, _ in top) - 1) < 0.5 and top[0][1] >= top[1][1]


def test_load_image_matches_the_cli(models, cli, tmp_path):
    model = os.path.join(models, "fashion_mnist.yaml")
    img = os.path.join(models, "samples", "ankle_boot.png")
    sess = dlrun.Session(model, backend="cpu")
    x = sess.load_image(img)
    assert x.shape == sess.inputs[0].shape and x.dtype == np.float32 and np.isfinite(x).all() and x.std() > 0
    y = sess.run(x)[sess.outputs[0].name]
    cli(model, "--backend", "cpu", "--image", img, "--output", tmp_path / "y.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), y)


def test_classify_a_batch(models):
    paths = [os.path.join(models, "samples", s + ".png") for s in ("bag", "sneaker", "dress")]
    sess = dlrun.Session(os.path.join(models, "fashion_mnist.yaml"), batch=3)
    tops = sess.classify(paths, top=1)
    assert [t[0][0] for t in tops] == ["Bag", "Sneaker", "Dress"]
    with pytest.raises(dlrun.InvalidArgument, match="batch=2"):
        sess.classify(paths[:2])


def test_bad_image_is_a_clear_error(models, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    sess = dlrun.Session(os.path.join(models, "fashion_mnist.yaml"))
    with pytest.raises(dlrun.Error) as e:
        sess.load_image(bad)
    assert "bad.png" in e.value.reason and "\n" not in e.value.reason
    with pytest.raises(dlrun.Error):
        sess.load_image(tmp_path / "missing.png")


def test_trace_written_by_a_session(models, tmp_path, rng):
    sess = dlrun.Session(os.path.join(models, "lenet.yaml"), backend="cpu", trace=True)
    x = rng.uniform(-1, 1, size=sess.inputs[0].shape).astype(np.float32)
    for _ in range(2):
        sess.run(x)
    path = tmp_path / "t.json"
    sess.write_trace(path)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["ts"] >= 0 and e["dur"] >= 0 and isinstance(e["name"], str) for e in spans)
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert all((e["pid"], e["tid"]) in named for e in spans)
    convs = [e for e in spans if e.get("args", {}).get("op") == "conv2d"]
    assert len(convs) == 2 * len([r for r in sess.profile() if r["op"] == "conv2d" and r["kind"] == "op"])
    assert all(e["args"]["backend"] == "cpu" for e in convs)
    plain = dlrun.Session(os.path.join(models, "lenet.yaml"))
    with pytest.raises(dlrun.InvalidArgument, match="trace=True"):
        plain.write_trace(tmp_path / "u.json")
    with pytest.raises(dlrun.IOFailure):
        sess.write_trace(tmp_path / "no" / "such" / "dir.json")
