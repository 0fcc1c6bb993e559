#!/usr/bin/python3
"""zoo_subset.py — a small, fast subset of tools/zoo in CI: PyTorch models with seeded random
weights exported to ONNX (opset 13), converted by tools/onnx/convert.py, run by dlrun on the CPU
backend; each must match PyTorch's eval() output (relative L2 error below 1e-4, the same top-1
everywhere). The subset covers the new ops: squeezenet (concat, ceil-mode pools),
mobilenet_v3_small (hard_swish, hard_sigmoid, squeeze-excite mul), shufflenet_v2_x0_5
(transpose, slice, reduce_mean), efficientnet_b0 (silu fused from x·sigmoid(x), sigmoid gating),
each at 96x96, a 2-layer transformer encoder (nn.TransformerEncoder: Gather of q/k/v as slices,
LayerNorm and GELU fused from their spelled-out ONNX forms, batched matmul, softmax) and a
2-layer GPT-style decoder (Split as slices, an additive causal mask, pre-LayerNorm), and both again
with their token and position embeddings (int64 token ids into gather). About 15 s
on 2 cores. Run by ctest (onnx_zoo_subset).

A model whose converted form needs a dlrun op listed in PENDING_OPS, and that dlrun rejects as
unknown, is reported as skipped (exit status 77 when any was, which ctest shows as skipped);
every other failure or disagreement fails the test. PENDING_OPS is empty: every op this subset
needs is in dlrun, so the test fails hard on anything.

usage: tests/onnx/zoo_subset.py DLRUN
"""
import os
import sys
import tempfile
import time

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "onnx"))
import zoo_models  # noqa: E402

# (model, family, input size)
SUBSET = [("squeezenet1_1", "classification", 96), ("mobilenet_v3_small", "classification", 96),
          ("shufflenet_v2_x0_5", "classification", 96), ("efficientnet_b0", "classification", 96),
          ("tiny-encoder", "transformer", 0), ("tiny-decoder", "transformer", 0),
          ("tiny-encoder-ids", "transformer", 0), ("tiny-decoder-ids", "transformer", 0)]
PENDING_OPS = set()  # dlrun ops not yet in the binary: a model needing one is skipped, not failed
REL_L2_LIMIT = 1e-4
SKIP = 77


def main():
    dlrun = sys.argv[1]
    torch.set_num_threads(2)
    failures, skipped = [], []
    with tempfile.TemporaryDirectory(prefix="dlrun-zoo-") as d:
        for name, family, size in SUBSET:
            t0 = time.time()
            r = zoo_models.run_model(name, family, size, d, dlrun, opset=13, backend="cpu", timeout=300)
            took = time.time() - t0
            if r.stage == "run" and "unknown op" in r.error and any(f"'{op}'" in r.error for op in PENDING_OPS):
                skipped.append(f"{name}: {r.error}")
                print(f"skip  {name}: {r.error}")
            elif not r.ok:
                failures.append(f"{name}: {r.stage} failed: {r.error}")
            elif not (r.rel_l2 < REL_L2_LIMIT and r.top1 == 1.0):
                failures.append(f"{name}: relative L2 error {r.rel_l2:.3g}, top-1 agreement {r.top1:.3f}")
            else:
                print(f"ok    {name} ({size or 'seq'}): relative L2 error {r.rel_l2:.3g}, top-1 same, "
                      f"{took:.1f} s; ops {', '.join(r.ops)}")
    for f in failures:
        print("FAIL  " + f)
    if failures:
        sys.exit(1)
    if skipped:
        sys.exit(SKIP)


if __name__ == "__main__":
    main()
