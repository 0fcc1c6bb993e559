#!/usr/bin/python3
"""resnet18_roundtrip.py — torchvision's ResNet-18 (seeded random weights, batchnorm statistics
randomised) exported to ONNX by PyTorch, converted by tools/onnx2dlrun and run by dlrun on the
CPU backend, must match PyTorch's own output: relative L2 error below 1e-4 and the same top-1
class for every image. Batch 2, so the batch dimension is exercised. Run by ctest
(onnx_resnet18_roundtrip); needs python3-torch, python3-torchvision, python3-onnx (tools/setup).

usage: tests/onnx/resnet18_roundtrip.py DLRUN [--opset N]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from torch_reference import build  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dlrun")
    ap.add_argument("--opset", type=int, default=13)
    a = ap.parse_args()
    model = build("resnet18", seed=5)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        want = model(x).numpy().astype(np.float64)
    with tempfile.TemporaryDirectory(prefix="dlrun-rt-") as d:
        onnx_path, yaml = os.path.join(d, "resnet18.onnx"), os.path.join(d, "resnet18.yaml")
        torch.onnx.export(model, x, onnx_path, opset_version=a.opset, input_names=["image"], output_names=["logits"])
        subprocess.run([os.path.join(ROOT, "tools", "onnx2dlrun"), onnx_path, "-o", yaml], check=True)
        np.save(os.path.join(d, "x.npy"), x.numpy())
        got_path = os.path.join(d, "got.npy")
        subprocess.run([a.dlrun, yaml, "--backend", "cpu", "--input", "image=" + os.path.join(d, "x.npy"),
                        "--output", "logits=" + got_path], check=True)
        got = np.load(got_path).astype(np.float64)
    if got.shape != want.shape:
        sys.exit(f"FAIL: dlrun's output is {got.shape}, PyTorch's {want.shape}")
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    same_top1 = (got.argmax(1) == want.argmax(1)).all()
    print(f"ResNet-18 via ONNX, batch 2, opset {a.opset}: relative L2 error {rel:.3g}, max abs error "
          f"{np.abs(got - want).max():.3g}, top-1 {'equal' if same_top1 else 'DIFFERENT'}")
    if not (rel < 1e-4 and same_top1):
        sys.exit("FAIL: dlrun's output does not match PyTorch's")


if __name__ == "__main__":
    main()
