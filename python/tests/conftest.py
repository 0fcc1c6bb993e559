"""conftest — fixtures of the Python package's tests: the checkout's models, the CLI to compare
with (the one bundled in the installed package, or $DLRUN_CLI), a seeded random generator; and a
timing cache of the tests' own (XDG_CACHE_HOME in a temporary folder, removed at exit), so that
timings measured under pytest never reach the user's ~/.cache/dlrun."""
import atexit
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import dlrun

_CACHE = tempfile.mkdtemp(prefix="dlrun-pytest-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE  # before any session is made; the CLI's runs inherit it
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture
def models():
    return os.path.join(ROOT, "models")


@pytest.fixture
def cli():
    exe = os.environ.get("DLRUN_CLI") or os.path.join(os.path.dirname(dlrun.__file__), "_native", "bin", "dlrun")
    if not os.path.exists(exe):
        pytest.skip(f"no dlrun CLI at {exe} (set DLRUN_CLI)")

    def run(*args, check=True):
        r = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=600)
        if check and r.returncode != 0:
            raise AssertionError(f"dlrun {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
        return r
    return run


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
