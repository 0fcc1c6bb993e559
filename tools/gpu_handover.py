#!/usr/bin/env python3
"""gpu_handover.py — the GPU passed between the cuda and cudnn plugins by events (ABI 1.14).

Writes a copy of a model whose conv and linear layers are pinned to cuda and cudnn in turn, so
that every such layer hands the GPU from one plugin's stream to the other's, then:
  1. runs it at batch 2 against the CPU reference: the output's NMSE within the f32 end-to-end
     bound of docs/check.md (1e-8) and the same top-1, with every hand-over by an event (the
     run's `handovers` in --json: by_event > 0, by_sync 0);
  2. the same with DLRUN_HANDOVER=sync (the host synchronizes the first plugin instead): every
     hand-over by synchronize, the output within the same bound;
  3. times both at --batch and --precision (the median of phases_ms.compute over --iterations
     runs after 5 warm-ups, interleaved: events, sync, events, sync), and prints them.
Exit 0 when 1 and 2 pass; the times are a report. Used by tools/gpu-check (stage correct);
tests/CMakeLists.txt runs it on the fake backends of the placement tests (--pin, --ops), so the
step itself is known to work before a GPU round.

usage: tools/gpu_handover.py DLRUN MODEL.yaml [--batch 32] [--precision tf32] [--iterations 20]
                             [--pin cuda,cudnn] [--ops conv2d,linear]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np


def pinned_copy(src, dst, pin=("cuda", "cudnn"), ops=("conv2d", "linear")):
    n = 0
    out = []
    for line in open(src):
        if re.search(r"op: (%s)\b" % "|".join(ops), line) and line.rstrip().endswith("}"):
            line = line.rstrip()[:-1] + f", backend: {pin[n % 2]}}}\n"
            n += 1
        out.append(line)
    open(dst, "w").write("".join(out))
    return n


def run(dlrun, args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([dlrun, *args, "--json"], env=e, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"dlrun {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dlrun")
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--precision", default="tf32")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--pin", default="cuda,cudnn", help="the two backends the layers alternate between")
    ap.add_argument("--ops", default="conv2d,linear", help="the op kinds pinned")
    a = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="dlrun-handover-") as d:
        model = os.path.join(d, "pinned.yaml")
        pin = a.pin.split(",")
        n = pinned_copy(a.model, model, pin, a.ops.split(","))
        print(f"{n} layers ({a.ops}) pinned to {pin[0]} and {pin[1]} in turn")
        ref = os.path.join(d, "ref.npy")
        subprocess.run([a.dlrun, a.model, "--batch", "2", "--seed", "3", "--backend", "cpu", "--output", ref],
                       check=True, stdout=subprocess.DEVNULL)
        r = np.load(ref).astype(np.float64)
        for mode, env in (("events", {}), ("sync", {"DLRUN_HANDOVER": "sync"})):
            got = os.path.join(d, f"got-{mode}.npy")
            j = run(a.dlrun, [model, "--batch", "2", "--seed", "3", "--output", got], env)
            g = np.load(got).astype(np.float64)
            h = j.get("handovers", {})
            nmse = float(((r - g) ** 2).sum() / max((r**2).sum(), 1e-300))
            top = (r.reshape(r.shape[0], -1).argmax(1) == g.reshape(g.shape[0], -1).argmax(1)).all()
            want = (h.get("by_event", 0) > 0 and h.get("by_sync", 1) == 0) if mode == "events" else \
                (h.get("by_event", 1) == 0 and h.get("by_sync", 0) > 0)
            good = bool(np.isfinite(g).all() and nmse <= 1e-8 and top and want)
            ok &= good
            print(f"{mode}: hand-overs {h}, NMSE {nmse:.2e} against the CPU (bound 1e-08), "
                  f"top-1 {'same' if top else 'DIFFERENT'}: {'PASS' if good else 'FAIL'}")
        times = {"events": [], "sync": []}
        common = [model, "--batch", str(a.batch), "--precision", a.precision, "--warmup", "5",
                  "--iterations", str(a.iterations)]
        for _ in range(2):
            for mode, env in (("events", {}), ("sync", {"DLRUN_HANDOVER": "sync"})):
                times[mode].append(run(a.dlrun, common, env)["phases_ms"]["compute"])
        ev, sy = min(times["events"]), min(times["sync"])
        print(f"compute at batch {a.batch}, {a.precision} (median of {a.iterations} runs, better of 2 interleaved "
              f"processes): by events {ev:.3f} ms, by synchronize {sy:.3f} ms, ratio {ev / sy:.3f}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
