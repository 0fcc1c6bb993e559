#!/usr/bin/python3
"""tests/fashion_mnist_accuracy.py — the shipped models/fashion_mnist.yaml gives real answers.

Runs the 10,000 Fashion-MNIST test images through PyTorch (the training's architecture with the
shipped weights, read from the safetensors file) and through the dlrun CLI (one .npy, batch
10000), and checks:
  - both accuracies are at least MIN_ACCURACY (the trained model reaches 0.9123; docs/images.md),
  - the two agree on the predicted class of every image but at most 0.1% of them,
  - the largest |logit difference| is below MAX_LOGIT_DIFF;
then that `dlrun --image` on each shipped sample (models/samples/*.png, the true class in the
name) prints that class's name as its top-1, and that its logits match PyTorch's on the same
image prepared by hand as the model's preprocess: says (pixels / 255, (x - mean) / std).
Exit 77 (skipped) when /usr/bin/python3 has no torch or the dataset is not installed.

usage: tests/fashion_mnist_accuracy.py DLRUN [--data DIR]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

SKIP = 77
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL = os.path.join(ROOT, "models", "fashion_mnist.yaml")
MIN_ACCURACY = 0.90
MAX_DISAGREE = 0.001
MAX_LOGIT_DIFF = 1e-3

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"fashion_mnist_accuracy: skipped ({e}; Debian: apt-get install python3-torch)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.join(ROOT, "tools"))
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402

# the training script's reader, architecture and preprocessing, so the three cannot drift apart
_loader = importlib.machinery.SourceFileLoader("train_fashion_mnist", os.path.join(ROOT, "tools", "train-fashion-mnist"))
_spec = importlib.util.spec_from_loader("train_fashion_mnist", _loader)
train = importlib.util.module_from_spec(_spec)
_loader.exec_module(train)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(t["shape"]).copy())
    return out


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dlrun")
    ap.add_argument("--data", default=train.DATA)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.data, "t10k-images-idx3-ubyte.gz")):
        print(f"fashion_mnist_accuracy: skipped (no Fashion-MNIST in {args.data}; Debian: apt-get install "
              "dataset-fashion-mnist)")
        return SKIP
    torch.set_num_threads(2)
    net = train.Net()
    net.load_state_dict(read_safetensors(os.path.join(ROOT, "models", "fashion_mnist.safetensors")))
    net.eval()
    images, labels = train.load(args.data, "t10k")
    x = train.preprocess(images)

    with torch.no_grad():
        ref = net(torch.from_numpy(x)).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "x.npy"), x)
        run([args.dlrun, MODEL, "--batch", str(len(x)), "--input", os.path.join(tmp, "x.npy"), "--output",
             os.path.join(tmp, "y.npy")])
        got = np.load(os.path.join(tmp, "y.npy"))
    assert got.shape == ref.shape, (got.shape, ref.shape)
    acc_torch = float((ref.argmax(1) == labels).mean())
    acc_dlrun = float((got.argmax(1) == labels).mean())
    disagree = int((ref.argmax(1) != got.argmax(1)).sum())
    diff = float(np.abs(ref - got).max())
    print(f"test accuracy: PyTorch {acc_torch:.4f}, dlrun {acc_dlrun:.4f}; predictions differ on {disagree} of "
          f"{len(x)} images; max |logit difference| {diff:.2e}")
    failures = []
    if min(acc_torch, acc_dlrun) < MIN_ACCURACY:
        failures.append(f"accuracy below {MIN_ACCURACY}")
    if disagree > MAX_DISAGREE * len(x):
        failures.append(f"{disagree} predictions differ (at most {MAX_DISAGREE * len(x):.0f})")
    if not diff < MAX_LOGIT_DIFF:
        failures.append(f"logits differ by {diff:.2e} (at most {MAX_LOGIT_DIFF})")

    samples = os.path.join(ROOT, "models", "samples")
    names = {c.lower().replace("/", "_").replace(" ", "_").replace("-", "") + ".png": c for c in train.CLASSES}
    files = sorted(f for f in os.listdir(samples) if f.endswith(".png"))
    if sorted(files) != sorted(names):
        failures.append(f"models/samples holds {files}, not one image per class")
    from PIL import Image
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            path = os.path.join(samples, f)
            out = run([args.dlrun, MODEL, "--image", path, "--output", os.path.join(tmp, "y.npy")])
            lines = out.splitlines()
            top = next((lines[i + 1] for i, line in enumerate(lines) if line.startswith("top-5 (")), "")
            want = f"  1. "
            ok = top.startswith(want) and top.endswith(f"  {names[f]} ({train.CLASSES.index(names[f])})")
            pixels = np.asarray(Image.open(path).convert("L"))[None]
            with torch.no_grad():
                expect = net(torch.from_numpy(train.preprocess(pixels))).numpy()
            d = float(np.abs(np.load(os.path.join(tmp, "y.npy")) - expect).max())
            print(f"{f}: {top.strip()}  (logits within {d:.1e} of PyTorch's)")
            if not ok:
                failures.append(f"{f}: top-1 is not {names[f]}: {top!r}")
            if not d < MAX_LOGIT_DIFF:
                failures.append(f"{f}: logits differ from PyTorch's by {d:.2e}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
