#!/usr/bin/env python3
"""ncu_summary.py — one line per profiled kernel from Nsight Compute's CSV (`ncu --csv --page
details` with the SpeedOfLight, Occupancy and LaunchStats sections): its name, grid, duration, how
busy the SMs and memory were as a share of their peak, the occupancy reached, the registers per
thread, and which of them limits it. It is what tools/gpu-check's `profile` stage writes beside
each VGG-16 layer (issue 14: "for each layer, one line on what limits it").

The rule for "limited by": the busier of compute (SM) and memory throughput, when it reaches 60 %
of its peak; below 40 % for both, the kernel waits on latency (neither unit is kept busy: too few
warps, or too much time between a load and its use); between, "balanced".

usage: tools/ncu_summary.py NCU.csv [--top N]   (standard input with -)
"""
import argparse
import csv
import re
import sys

# the metrics shown, by the names Nsight Compute's sections give them
WANTED = {
    "Duration": "duration",
    "Compute (SM) Throughput": "sm",
    "Memory Throughput": "mem",
    "DRAM Throughput": "dram",
    "L2 Cache Throughput": "l2",
    "Achieved Occupancy": "occ",
    "Registers Per Thread": "regs",
}


def number(text):
    """a CSV cell as a float ("1,234.5" included), or None"""
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def short(name):
    """a kernel's name and its template's own arguments (theirs left out), without namespaces,
    parameters or return type: wg_tiles<bf16, 256, Conv>"""
    name = name.replace("(anonymous namespace)::", "")
    head = name.split("(")[0].split()
    name = " ".join(head[1:]) if len(head) > 1 and head[0] == "void" else " ".join(head)
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        if depth <= 1:
            out.append(ch)
        if ch == ">":
            depth -= 1
    name = "".join(out).replace("__nv_bfloat16", "bf16").replace("__half", "f16")
    return re.sub(r"^(\w+::)+", "", name)


def read(stream):
    """kernels in launch order: {id, name, grid, block, metric: (value, unit)}"""
    kernels = {}
    rows = csv.reader(line for line in stream if line.startswith('"'))
    header = next(rows, None)
    if not header:
        return []
    col = {h: i for i, h in enumerate(header)}
    need = ["ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"]
    if any(h not in col for h in need):
        raise SystemExit("ncu_summary: not ncu's --page details CSV (columns: %s)" % ", ".join(header))
    for r in rows:
        if len(r) < len(header):
            continue
        k = kernels.setdefault(r[col["ID"]], {"id": r[col["ID"]], "name": r[col["Kernel Name"]],
                                             "grid": r[col["Grid Size"]] if "Grid Size" in col else "",
                                             "block": r[col["Block Size"]] if "Block Size" in col else ""})
        key = WANTED.get(r[col["Metric Name"]])
        if key:
            k[key] = (number(r[col["Metric Value"]]), r[col["Metric Unit"]])
    return sorted(kernels.values(), key=lambda k: int(k["id"]) if k["id"].isdigit() else 0)


def microseconds(value_unit):
    value, unit = value_unit
    if value is None:
        return None
    return value * {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
                    "second": 1e6, "s": 1e6}.get(unit, 1.0)


def limiter(sm, mem):
    if sm is None or mem is None:
        return "?"
    top = max(sm, mem)
    what = "compute (SM)" if sm >= mem else "memory"
    if top >= 60:
        return "%s, %.0f %% of peak" % (what, top)
    if top < 40:
        return "latency (SM %.0f %%, memory %.0f %%)" % (sm, mem)
    return "balanced (SM %.0f %%, memory %.0f %%)" % (sm, mem)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=0, help="only the N longest kernels (0: all, in launch order)")
    a = ap.parse_args()
    with (sys.stdin if a.csv == "-" else open(a.csv, newline="")) as f:
        kernels = read(f)
    if not kernels:
        print("ncu_summary: no kernel in %s" % a.csv)
        return 1
    if a.top:
        kernels = sorted(kernels, key=lambda k: -(microseconds(k.get("duration", (None, ""))) or 0))[:a.top]
    print("| # | kernel | grid x block | us | SM % | memory % | DRAM % | L2 % | occupancy % | regs | limited by |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for k in kernels:
        def cell(key, fmt="%.0f"):
            v = k.get(key, (None, ""))[0]
            return fmt % v if v is not None else ""
        us = microseconds(k.get("duration", (None, "")))
        print("| %s | %s | %s x %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            k["id"], short(k["name"]), k["grid"], k["block"], "%.1f" % us if us is not None else "",
            cell("sm"), cell("mem"), cell("dram"), cell("l2"), cell("occ"), cell("regs"),
            limiter(k.get("sm", (None,))[0], k.get("mem", (None,))[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
