#!/usr/bin/python3
"""conformance_classify.py — tools/onnx-conformance tells a backend that refuses an op ("backend
cannot run op", not a failure) from a wrong or missing result, a crash or any other error (a
failure). Checks its classify_run() on dlrun exit statuses and messages, that the refusal it
matches is still the wording in core/src/placement.c and core/cli/main.c, and, given a dlrun and
the test plugins `example` (runs relu only) and `relu_nan` (a relu that writes NaN), the whole
tool on Relu and Sigmoid tests. No GPU needed. Run by ctest (onnx_conformance_classify); needs
python3-onnx, python3-numpy and libonnx-testdata for the last part (tools/setup).

usage: tests/onnx/conformance_classify.py [DLRUN EXAMPLE_PLUGIN.so RELU_NAN_PLUGIN.so]
"""
import importlib.machinery
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "tools", "onnx-conformance")
failures = []


def load_tool():
    loader = importlib.machinery.SourceFileLoader("onnx_conformance", TOOL)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def expect(what, got, want_status, want_in=""):
    status, reason = got
    if status != want_status or want_in not in reason:
        failures.append(f"{what}: got ({status!r}, {reason!r}), expected {want_status!r} with {want_in!r}")


def classifier(tool):
    c = tool.classify_run
    refusal = "dlrun: backend 'cudnn' cannot run leaky_relu 'lrelu1': cuDNN has no leaky relu activation\n"
    expect("exit 0", c(0, "", "cudnn"), "ran")
    expect("exit 0 with warnings", c(0, "dlrun: warning: something\n", "cudnn"), "ran")
    expect("refusal", c(1, refusal, "cudnn"), "backend", "backend 'cudnn' cannot run leaky_relu 'lrelu1': cuDNN")
    expect("refusal after other lines", c(1, "a warning\n\n" + refusal + "\n", "cudnn"), "backend", "leaky_relu")
    expect("cuda refuses matmul", c(1, "dlrun: backend 'cuda' cannot run matmul 'mm': matmul: no kernel in the cuda "
                                       "plugin yet\n", "cuda"), "backend", "matmul")
    expect("refusal naming a layer with quotes and colons",
           c(1, "dlrun: backend 'cudnn' cannot run add 'a: 'b'': broadcasting add: not in the cudnn plugin\n",
             "cudnn"), "backend", "broadcasting add")
    expect("refusal, exit status 2", c(2, refusal, "cudnn"), "fail", "exit status 2")
    expect("refusal by another backend", c(1, refusal, "cuda"), "fail", "cannot run leaky_relu")
    expect("refusal not on the last line", c(1, refusal + "dlrun: something else\n", "cudnn"), "fail", "something else")
    expect("refusal by the CPU reference", c(1, "dlrun: backend 'cpu' cannot run conv2d 'c': no\n", "cpu"), "fail",
           "CPU reference")
    expect("refusal quoted in another error",
           c(1, "dlrun: model.yaml: backend 'cudnn' cannot run conv2d 'c': x\n", "cudnn"), "fail", "model.yaml")
    expect("pinned layer, --no-fallback",
           c(1, "dlrun: conv2d 'c' is pinned to backend 'cudnn', but no (--no-fallback)\n", "cudnn"), "fail", "pinned")
    expect("kernel failure", c(1, "dlrun: conv2d 'c' failed on cudnn: cuDNN found no convolution algorithm\n", "cudnn"),
           "fail", "failed on cudnn")
    expect("unknown backend", c(2, "dlrun: unknown backend 'cudnn' (loaded: cpu)\n", "cudnn"), "fail", "unknown")
    expect("exit 1, nothing said", c(1, "", "cudnn"), "fail", "no message")
    expect("crash", c(-11, "", "cudnn"), "fail", "SIGSEGV")
    expect("abort with a message", c(-6, "ops.c:12: k: Assertion failed\n", "cuda"), "fail", "SIGABRT")


def wording(tool):
    """The refusal the tool matches is the one dlrun prints: placement.c's format, main.c's prefix."""
    with open(os.path.join(ROOT, "core", "src", "placement.c")) as f:
        placement = f.read()
    with open(os.path.join(ROOT, "core", "cli", "main.c")) as f:
        main = f.read()
    fmt = "backend '%s' cannot run %s '%s': %s"
    if f'"{fmt}"' not in placement or "DL_E_UNSUPPORTED" not in placement:
        failures.append(f"core/src/placement.c no longer says \"{fmt}\": update REFUSAL in tools/onnx-conformance")
    if 'fprintf(stderr, "dlrun: %s\\n", err->msg);' not in main or not re.search(r"EXIT_RUNTIME = 1\b", main):
        failures.append("core/cli/main.c no longer prints 'dlrun: MESSAGE' with exit status 1 (EXIT_RUNTIME): "
                        "update tools/onnx-conformance")
    line = "dlrun: " + fmt.replace("%s", "cudnn", 1).replace("%s", "clip", 1).replace("%s", "c1", 1).replace(
        "%s", "cuDNN clips only as clipped relu (min 0)", 1)
    expect("placement.c's wording", tool.classify_run(1, line + "\n", "cudnn"), "backend", "cannot run clip 'c1'")


def run_tool(dlrun, plugin_dir, backend, k):
    env = dict(os.environ, DLRUN_PLUGIN_PATH=plugin_dir)
    p = subprocess.run([sys.executable, TOOL, "--dlrun", dlrun, "--backend", backend, "-k", k, "--jobs", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    return p.returncode, p.stdout + p.stderr


def whole_tool(dlrun, example, relu_nan):
    if not load_tool().default_data_dir():
        failures.append("no ONNX test data (apt-get install libonnx-testdata)")
        return
    with tempfile.TemporaryDirectory(prefix="dlrun-conf-") as d:
        for so in (example, relu_nan):  # only these two: the folder of test plugins holds broken ones too
            os.symlink(os.path.abspath(so), os.path.join(d, os.path.basename(so)))
        rc, out = run_tool(dlrun, d, "example", "node/test_sigmoid")
        if rc != 0 or "| Sigmoid | 0 | 0 | 0 | 0 | 0 | 2 |" not in out or \
                "0 fail, 0 unsupported dtype, 0 unsupported variant, 0 training mode (dlrun runs inference), 2 backend cannot run op" not in out \
                or "- node/test_sigmoid [example]: backend 'example' cannot run sigmoid" not in out:
            failures.append(f"example on Sigmoid: exit {rc}, expected 0 and 2 'backend cannot run op':\n{out}")
        rc, out = run_tool(dlrun, d, "example", "node/test_relu")
        if rc != 0 or "| Relu | 1 | 0 | 0 | 0 | 0 | 0 |" not in out:
            failures.append(f"example on Relu: exit {rc}, expected 0 and a pass:\n{out}")
        rc, out = run_tool(dlrun, d, "relu_nan", "node/test_relu")
        if rc != 1 or "| Relu | 0 | 1 | 0 | 0 | 0 | 0 |" not in out or "nan, expected" not in out:
            failures.append(f"relu_nan on Relu: exit {rc}, expected 1 and a failure naming the NaN:\n{out}")


def main():
    if len(sys.argv) not in (1, 4):
        sys.exit(__doc__.split("usage: ")[1])
    tool = load_tool()
    classifier(tool)
    wording(tool)
    if len(sys.argv) == 4:
        whole_tool(*sys.argv[1:])
    for f in failures:
        print("FAIL", f)
    print(f"conformance_classify: {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
