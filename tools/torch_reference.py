#!/usr/bin/python3
"""torch_reference.py — makes a reference case from torchvision for dlrun to match.

Builds torchvision's MODEL (vgg16 or resnet18) with seeded random weights (batchnorm statistics
randomised too, so they matter), saves its state dict as OUT/MODEL.safetensors (written here, no
safetensors package needed), a seeded input as OUT/input.npy and PyTorch's output as
OUT/expected.npy. Used by tests/test_torch_parity.c and tools/bench.

usage: tools/torch_reference.py MODEL OUTDIR [--batch N] [--seed N]
"""
import argparse
import os
import sys

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx"))
from safetensors_write import write_safetensors  # noqa: E402


def build(name, seed):
    torch.manual_seed(seed)
    model = getattr(torchvision.models, name)()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["vgg16", "resnet18"])
    ap.add_argument("outdir")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    model = build(a.model, a.seed)
    write_safetensors(os.path.join(a.outdir, a.model + ".safetensors"),
                      {k: v.detach().numpy() for k, v in model.state_dict().items()})
    g = torch.Generator().manual_seed(a.seed + 1)
    x = torch.randn(a.batch, 3, 224, 224, generator=g)
    with torch.no_grad():
        y = model(x)
    np.save(os.path.join(a.outdir, "input.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(a.outdir, "expected.npy"), y.numpy().astype(np.float32))
    return 0


if __name__ == "__main__":
    sys.exit(main())
