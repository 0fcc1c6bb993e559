"""_cli — the `dlrun` command a pip install puts on PATH: runs the CLI built into the package."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native", "bin", "dlrun")
    if not os.path.exists(exe):
        sys.exit("dlrun: this installation has no bundled CLI (_native/bin/dlrun); build it with CMake")
    os.execv(exe, [exe] + sys.argv[1:])
