#!/usr/bin/env python3
"""gpu_torch_bench.py — PyTorch/cuDNN reference timings for tools/gpu-check, in the same run:
each VGG-16 conv layer and the whole VGG-16 and ResNet-18 at batch 1 and 32, f32 (TF32 off) and
TF32, with cudnn.benchmark on, timed with CUDA events after warm-up (median of 20); and the
GPU's measured matrix peak (a large f32/TF32/f16 matmul) for the distance-to-peak figures."""
import statistics

import torch
import torchvision

assert torch.cuda.is_available(), "no CUDA device"
torch.backends.cudnn.benchmark = True
dev = torch.device("cuda")


def timed(fn, runs=20, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


print("matrix peak (8192^3 matmul):")
for name, dt, tf32 in [("f32", torch.float32, False), ("tf32", torch.float32, True), ("f16", torch.float16, False)]:
    set_tf32(tf32)
    a = torch.randn(8192, 8192, device=dev, dtype=dt)
    b = torch.randn(8192, 8192, device=dev, dtype=dt)
    ms = timed(lambda: a @ b, runs=10)
    print(f"  {name}: {2 * 8192**3 / ms / 1e9:.1f} TFLOP/s")

layers = [(3, 64, 224), (64, 64, 224), (64, 128, 112), (128, 128, 112), (128, 256, 56), (256, 256, 56),
          (256, 512, 28), (512, 512, 28), (512, 512, 14)]
for batch in (1, 32):
    print(f"VGG-16 conv layers, batch {batch} (cuDNN via torch, 3x3 pad 1, bias, relu):")
    for c, k, h in layers:
        x = torch.randn(batch, c, h, h, device=dev)
        conv = torch.nn.Conv2d(c, k, 3, padding=1).to(dev).eval()
        flops = 2 * batch * k * h * h * c * 9
        row = []
        for mode in (False, True):
            set_tf32(mode)
            with torch.no_grad():
                ms = timed(lambda: torch.relu(conv(x)))
            row.append(f"{'tf32' if mode else 'f32'} {ms:.3f} ms {flops / ms / 1e9:.1f} TFLOP/s")
        print(f"  conv {c}->{k} {h}x{h}: " + "; ".join(row))
for name in ("vgg16", "resnet18"):
    model = getattr(torchvision.models, name)().to(dev).eval()
    for batch in (1, 32):
        x = torch.randn(batch, 3, 224, 224, device=dev)
        row = []
        for mode in (False, True):
            set_tf32(mode)
            with torch.no_grad():
                ms = timed(lambda: model(x), runs=10)
            row.append(f"{'tf32' if mode else 'f32'} {ms:.2f} ms")
        print(f"{name} batch {batch}: " + "; ".join(row))
