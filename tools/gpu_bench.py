#!/usr/bin/env python3
"""gpu_bench.py — dlrun against PyTorch on one GPU, in the same run, for tools/gpu-check's bench
stage. Prints markdown tables:

1. the GPU's measured matrix peak (an 8192^3 matmul in f32, TF32 and f16 through PyTorch);
2. VGG-16 and ResNet-18 at batch 1 and 32, f32 (TF32 off) and TF32: PyTorch eager (cuDNN,
   cudnn.benchmark on, input already on the GPU, CUDA events around model(x), median of 20 after
   warm-up) beside dlrun's compute time (dlrun --json: phases_ms.compute, the median of 20 runs
   after 5 warm-ups: from the first op queued until the GPU is done, the input already uploaded)
   on the cuda plugin, the cudnn plugin and with default placement; dlrun's upload and download
   times beside. Each configuration runs PyTorch, then dlrun, then PyTorch again (interleaved:
   the PyTorch figure is the better of its two medians);
3. every VGG-16 conv layer (3x3, pad 1, bias, relu fused) at batch 1 and 32: PyTorch's conv+relu,
   and dlrun's cuda and cudnn plugins (dlrun --profile: each op timed on the device by CUDA events
   before and after it, docs/gpu.md), time, TFLOP/s and share of peak;
4. (--only fc6) VGG-16's fc6 at batch 1 against the device-to-device copy bandwidth.

A plugin named cuda-mma is the cuda plugin with its tensor-core GEMM on (DLRUN_CUDA_MMA=1, the
default since 2026-11-30), cuda-simt with it off (DLRUN_CUDA_MMA=0), cuda-nhwc with its channels-
last convs and pools on (DLRUN_CUDA_NHWC=1: at tf32, f16 and bf16 the session then runs VGG-16
and ResNet-18 channels-last from their first conv; docs/gpu.md), cuda-wgmma with the sm_90
warpgroup tile timed beside the others as well (DLRUN_CUDA_WGMMA=1, on top of cuda-nhwc); --precisions
picks the precisions (f32, tf32, f16, bf16: PyTorch runs f16 and bf16 with its model and input
in that dtype).

usage: tools/gpu_bench.py DLRUN [--plugins cuda,cudnn] [--precisions f32,tf32] [--quick]
"""
import argparse
import json
import os
import statistics
import subprocess

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


def torch_dtype(prec):
    return {"f16": torch.float16, "bf16": torch.bfloat16}.get(prec, torch.float32)


def backend_args(p):
    """dlrun's arguments and environment for a plugin name of --plugins (None: default placement)"""
    env = dict(os.environ)
    if p in ("cuda-mma", "cuda-simt"):
        env["DLRUN_CUDA_MMA"] = "1" if p == "cuda-mma" else "0"
        p = "cuda"
    elif p in ("cuda-nhwc", "cuda-wgmma"):
        env["DLRUN_CUDA_NHWC"] = "1"
        if p == "cuda-wgmma":
            env["DLRUN_CUDA_WGMMA"] = "1"
        p = "cuda"
    return (["--backend", p] if p else []), env


def dlrun_json(dlrun, args, env=None):
    r = subprocess.run([dlrun, *args, "--json"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
    return json.loads(r.stdout), None


def placed_summary(j):
    """Where a placed run put its ops: steps per backend, and the hand-overs between the GPU
    plugins in run order (each one an event the other's stream waits for, ABI 1.14, or a host
    wait where that cannot be; docs/placement.md), as the last run counted them."""
    steps = [o["backend"] for o in j.get("ops", []) if "backend" in o and "fused_into" not in o]
    count = {b: steps.count(b) for b in dict.fromkeys(steps)}
    gpu = [b for b in steps if b in ("cuda", "cudnn")]
    switches = sum(1 for a, b in zip(gpu, gpu[1:]) if a != b)
    h = j.get("handovers", {})
    return (", ".join(f"{b} {n}" for b, n in count.items()) + f"; {switches} hand-overs between cuda and cudnn"
            + f" (last run: {h.get('by_event', '?')} by event, {h.get('by_sync', '?')} by synchronize)")


def peaks():
    out = {}
    for name, dt, tf32 in [("f32", torch.float32, False), ("tf32", torch.float32, True), ("f16", torch.float16, False)]:
        set_tf32(tf32)
        a = torch.randn(8192, 8192, device=dev, dtype=dt)
        b = torch.randn(8192, 8192, device=dev, dtype=dt)
        out[name] = 2 * 8192**3 / timed(lambda: a @ b, runs=10) / 1e9
    return out


def models(dlrun, plugins, batches, precs):
    print("| model | batch | precision | PyTorch ms | " + " | ".join(f"dlrun {p} ms" for p in plugins) +
          " | dlrun placed ms | " + " | ".join(f"{p} / PyTorch" for p in plugins) + " | upload, download ms |")
    print("|---" * (5 + 2 * len(plugins) + 1) + "|")
    where = []  # the placed runs' choices, printed after the table
    for name, yaml in (("vgg16", "models/vgg.yaml"), ("resnet18", "models/resnet18.yaml")):
        model32 = getattr(torchvision.models, name)().to(dev).eval()
        for batch in batches:
            x32 = torch.randn(batch, 3, 224, 224, device=dev)
            for prec in precs:
                set_tf32(prec == "tf32")
                model, x = model32.to(torch_dtype(prec)), x32.to(torch_dtype(prec))
                with torch.no_grad():
                    t1 = timed(lambda: model(x))
                ours, io = {}, ""
                for p in [*plugins, None]:
                    args = [yaml, "--batch", str(batch), "--precision", prec, "--warmup", "5", "--iterations", "20"]
                    be, env = backend_args(p)
                    j, e = dlrun_json(dlrun, args + be, env)
                    ours[p] = j["phases_ms"]["compute"] if j else None
                    if j and p is None:
                        where.append(f"- placed {name} b{batch} {prec}: {placed_summary(j)}")
                    if j and p == plugins[-1]:
                        io = f"{j['phases_ms']['inputs']:.2f}, {j['phases_ms']['outputs']:.3f}"
                    if e:
                        print(f"<!-- dlrun {p or 'placed'} {name} b{batch} {prec}: {e} -->")
                with torch.no_grad():
                    t2 = timed(lambda: model(x))
                pt = min(t1, t2)
                cell = lambda v: f"{v:.3f}" if v is not None else "error"
                ratio = lambda v: f"{v / pt:.2f}" if v is not None else "-"
                print(f"| {name} | {batch} | {prec} | {pt:.3f} | " + " | ".join(cell(ours[p]) for p in plugins) +
                      f" | {cell(ours[None])} | " + " | ".join(ratio(ours[p]) for p in plugins) + f" | {io} |")
        del model, model32
        torch.cuda.empty_cache()
    if where:
        print("\nWhere the placed runs put their ops (steps per backend):\n")
        print("\n".join(where))


LAYERS = [(3, 64, 224), (64, 64, 224), (64, 128, 112), (128, 128, 112), (128, 256, 56), (256, 256, 56),
          (256, 256, 56), (256, 512, 28), (512, 512, 28), (512, 512, 28), (512, 512, 14), (512, 512, 14),
          (512, 512, 14)]


def conv_layers(dlrun, plugins, batches, peak, precs):
    for prec in precs:
        pk_name = prec if prec in peak else "f16"  # bf16's matrix peak is f16's on these GPUs
        pk = peak[pk_name]
        print(f"\n**VGG-16 conv layers, {prec}** (share of the measured {pk_name} matmul peak, {pk:.0f} TFLOP/s)\n")
        print("| batch | layer | GFLOP | PyTorch ms | " + " | ".join(f"{p} ms" for p in plugins) + " | PyTorch TFLOP/s | " +
              " | ".join(f"{p} TFLOP/s (peak %)" for p in plugins) + " |")
        print("|---" * (4 + 2 * len(plugins) + 1) + "|")
        set_tf32(prec == "tf32")
        for batch in batches:
            prof = {}
            for p in plugins:
                be, env = backend_args(p)
                j, e = dlrun_json(dlrun, ["models/vgg.yaml", *be, "--precision", prec, "--batch", str(batch),
                                          "--warmup", "3", "--iterations", "10", "--profile"], env)
                prof[p] = [o["time_ms"] for o in j["ops"] if o["op"] == "conv2d"] if j else []
                if e:
                    print(f"<!-- dlrun {p} vgg b{batch} {prec}: {e} -->")
            for i, (c, k, h) in enumerate(LAYERS):
                x = torch.randn(batch, c, h, h, device=dev, dtype=torch_dtype(prec))
                conv = torch.nn.Conv2d(c, k, 3, padding=1).to(dev, torch_dtype(prec)).eval()
                flops = 2 * batch * k * h * h * c * 9
                with torch.no_grad():
                    pt = timed(lambda: torch.relu(conv(x)))
                ms = {p: prof[p][i] if i < len(prof[p]) else None for p in plugins}
                tf = lambda t: flops / t / 1e9 if t else 0
                print(f"| {batch} | conv{i + 1} {c}->{k} {h}x{h} | {flops / 1e9:.2f} | {pt:.3f} | " +
                      " | ".join(f"{ms[p]:.3f}" if ms[p] else "-" for p in plugins) + f" | {tf(pt):.1f} | " +
                      " | ".join(f"{tf(ms[p]):.1f} ({100 * tf(ms[p]) / pk:.0f}%)" for p in plugins) + " |")


def fc6(dlrun, plugins, precs):
    """VGG-16's fc6 (25088 -> 4096) at batch 1, a read of its weights: each plugin's time (dlrun
    --profile) as a share of the device-to-device copy bandwidth PyTorch measures (1 GiB copied)"""
    src = torch.empty(1 << 28, device=dev)  # 1 GiB of f32
    dst = torch.empty_like(src)
    copy_ms = timed(lambda: dst.copy_(src), runs=10)
    bw = 2 * src.numel() * 4 / copy_ms / 1e6  # GB/s, read + write
    del src, dst
    torch.cuda.empty_cache()
    print(f"\n**VGG-16 fc6 at batch 1** (device-to-device copy: {bw:.0f} GB/s, read + write)\n")
    print("| precision | plugin | fc6 ms | weight GB/s | share of copy bandwidth |")
    print("|---|---|---|---|---|")
    for prec in precs:
        wbytes = 4096 * 25088 * (2 if prec in ("f16", "bf16") else 4)
        for p in plugins:
            be, env = backend_args(p)
            j, e = dlrun_json(dlrun, ["models/vgg.yaml", *be, "--precision", prec, "--batch", "1", "--warmup", "3",
                                      "--iterations", "20", "--profile"], env)
            lin = [o["time_ms"] for o in j["ops"] if o["op"] == "linear"] if j else []
            if e or not lin:
                print(f"<!-- dlrun {p} fc6 {prec}: {e or 'no linear op in the profile'} -->")
                continue
            gbs = wbytes / lin[0] / 1e6
            print(f"| {prec} | {p} | {lin[0]:.3f} | {gbs:.0f} | {100 * gbs / bw:.0f}% |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dlrun")
    ap.add_argument("--plugins", default="cuda,cudnn")
    ap.add_argument("--quick", action="store_true", help="batch 32 only")
    ap.add_argument("--only", choices=["models", "layers", "fc6"], help="one of the tables")
    ap.add_argument("--precisions", default="f32,tf32", help="of f32, tf32, f16, bf16")
    a = ap.parse_args()
    plugins = a.plugins.split(",")
    precs = a.precisions.split(",")
    batches = (32,) if a.quick else (1, 32)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}\n")
    pk = peaks()
    print("matrix peak (8192^3 matmul, PyTorch): " + ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in pk.items()) + "\n")
    if a.only == "fc6":
        return fc6(a.dlrun, plugins, precs)
    if a.only != "layers":
        models(a.dlrun, plugins, batches, precs)
    if a.only != "models":
        conv_layers(a.dlrun, plugins, batches, pk, precs)


if __name__ == "__main__":
    main()
