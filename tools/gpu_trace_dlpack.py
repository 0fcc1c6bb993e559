#!/usr/bin/env python3
"""gpu_trace_dlpack.py — the GPU parts of issue 19, checked on a GPU machine by tools/gpu-check:

  trace   DLRUN BACKEND OUT.json: `dlrun resnet18 --backend BACKEND --trace` writes a trace whose
          op events on the GPU backend's track are timed by device events ("clock": "device"),
          each with a positive duration, inside its run's span, not overlapping on the track
  dlpack  BACKEND: the Python binding (python/dlrun, on the libdlrun $DLRUN_LIBRARY names) runs
          ResNet-18 on BACKEND from a PyTorch CUDA tensor (handed over as a device pointer and
          copied on the GPU) and from the same values in host memory: the outputs must agree to
          1e-6 relative; and the CUDA tensor is not modified

usage: tools/gpu_trace_dlpack.py trace DLRUN BACKEND OUT.json | dlpack BACKEND
"""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def check_trace(dlrun, backend, out):
    subprocess.run([dlrun, os.path.join(ROOT, "models", "resnet18.yaml"), "--backend", backend, "--trace", out,
                    "--warmup", "2", "--iterations", "5"], check=True)
    doc = json.load(open(out))
    ev = doc["traceEvents"]
    tids = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    ops = [e for e in ev if e["ph"] == "X" and tids.get(e["tid"]) == backend]
    runs = [e for e in ev if e["ph"] == "X" and e["name"] == "run"]
    assert ops and runs, f"no op events on a '{backend}' track ({sorted(set(tids.values()))})"
    host = [e for e in ops if e["args"].get("clock") != "device"]
    assert not host, f"{len(host)} of {len(ops)} {backend} events not on the device clock: {host[0]}"
    assert all(e["dur"] > 0 for e in ops), "an op with no device time"
    for r in runs:
        inside = [e for e in ops if e["args"].get("run") == r["args"].get("run")]
        assert inside, f"run {r['args'].get('run')} has no {backend} events"
        assert all(r["ts"] - 1 <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1 for e in inside), \
            "a device event outside its run's span"
        inside.sort(key=lambda e: e["ts"])
        assert all(a["ts"] + a["dur"] <= b["ts"] + 0.5 for a, b in zip(inside, inside[1:])), "overlapping events"
    dev_ms = sum(e["dur"] for e in ops) / 1e3 / len(runs)
    run_ms = sum(r["dur"] for r in runs) / 1e3 / len(runs)
    print(f"trace: {len(ops)} {backend} op events on the device clock over {len(runs)} runs; "
          f"device time {dev_ms:.3f} ms of {run_ms:.3f} ms per run")


def check_dlpack(backend):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import numpy as np
    import torch
    import dlrun
    sess = dlrun.Session(os.path.join(ROOT, "models", "resnet18.yaml"), backend=backend)
    inp, out = sess.inputs[0], sess.outputs[0].name
    x = np.random.default_rng(3).uniform(-1, 1, size=inp.shape).astype(np.float32)
    y_host = sess.run({inp.name: x})[out]
    xt = torch.from_numpy(x).cuda()
    keep = xt.clone()
    y_dev = sess.run({inp.name: xt})[out]
    rel = float(np.abs(y_dev - y_host).max() / max(np.abs(y_host).max(), 1e-30))
    assert rel <= 1e-6, f"CUDA-tensor input differs from the host input: max rel {rel:.3g}"
    assert torch.equal(xt, keep), "the CUDA tensor was modified"
    t = sess.last_run_times()
    print(f"dlpack: {backend} from a CUDA tensor agrees with the host input (max rel {rel:.2g}); "
          f"last run: inputs {t['inputs_ms']:.3f} ms, compute {t['compute_ms']:.3f} ms")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "trace":
        check_trace(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "dlpack":
        check_dlpack(sys.argv[2])
    else:
        sys.exit(__doc__)
