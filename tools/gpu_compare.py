#!/usr/bin/env python3
"""gpu_compare.py — a model run with dlrun's default placement (every loaded backend, each op where
it was measured fastest: on a GPU machine cuda, cudnn and cpu mixed) against the same model run on
the CPU reference alone: the output's NMSE must be within the end-to-end f32 threshold of
docs/check.md (1e-8), or tf32's (1e-6) with --precision tf32, and the top-1 class of every row
must agree. The dlrun command line fills its input into the session's input buffer
(dl_session_input_buffer: page-locked memory from a CUDA plugin that uploads it), so the upload
from there is checked too. Prints the placement. Used by tools/gpu-check.

usage: tools/gpu_compare.py DLRUN MODEL.yaml [--precision f32|tf32] [--batch N]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dlrun")
    ap.add_argument("model")
    ap.add_argument("--precision", default="f32", choices=["f32", "tf32"])
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args()
    bound = {"f32": 1e-8, "tf32": 1e-6}[a.precision]
    with tempfile.TemporaryDirectory(prefix="dlrun-cmp-") as d:
        ref, got = os.path.join(d, "ref.npy"), os.path.join(d, "got.npy")
        common = [a.model, "--batch", str(a.batch), "--seed", "3"]
        subprocess.run([a.dlrun, *common, "--backend", "cpu", "--output", ref], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([a.dlrun, *common, "--precision", a.precision, "--placement", "--output", got], check=True)
        r, g = np.load(ref).astype(np.float64), np.load(got).astype(np.float64)
    if r.shape != g.shape:
        sys.exit(f"shape {g.shape} != reference {r.shape}")
    nmse = float(((r - g) ** 2).sum() / max((r**2).sum(), 1e-300))
    top = (r.reshape(r.shape[0], -1).argmax(1) == g.reshape(g.shape[0], -1).argmax(1)).all()
    ok = np.isfinite(g).all() and nmse <= bound and top
    print(f"placed vs cpu: NMSE {nmse:.2e} (bound {bound:.0e}), top-1 {'same' if top else 'DIFFERENT'}: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
