"""dlrun_build — the PEP 517 build backend of the Python package (pyproject.toml points here).

`pip install .` in the checkout calls build_wheel: it configures and builds the C library, its
plugins and the CLI with the project's own CMake (Release), installs them into a staging folder
and packs a wheel holding

    dlrun/            the ctypes binding (python/dlrun)
    dlrun/onnx/       the ONNX importer (tools/onnx), for dlrun.convert
    dlrun/_native/    lib/libdlrun.so.N, lib/dlrun/*.so (plugins), bin/dlrun, include/, models/

It needs nothing from PyPI (no setuptools, no scikit-build-core), so it works offline on Debian.
Settings, as environment variables or `pip install . -C KEY=VALUE`:
    build-dir (DLRUN_BUILD_DIR)       CMake build folder (default build-python); an existing build
                                      folder is reused, so CI's release build is not built twice
    cmake-args (DLRUN_CMAKE_ARGS)     extra CMake arguments, e.g. "-DDLRUN_CUDA=OFF"
    jobs (DLRUN_BUILD_JOBS)           parallel build jobs (default: all cores)
"""
import base64
import hashlib
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NAME = "dlrun"
SUMMARY = "Python bindings of dlrun, a deep-learning runtime with pluggable backends"
REQUIRES = ["numpy"]
ONNX_FILES = ["convert.py", "fold.py", "safetensors_write.py"]


def _version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(dlrun VERSION ([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("dlrun_build: no 'project(dlrun VERSION x.y.z)' in CMakeLists.txt")
    return m.group(1)


def _setting(config_settings, key, env, default=None):
    if config_settings and config_settings.get(key):
        return config_settings[key]
    return os.environ.get(env) or default


def _log(msg):
    print(f"dlrun_build: {msg}", file=sys.stderr, flush=True)


def _run(cmd):
    _log(" ".join(shlex.quote(c) for c in cmd))
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def _build_native(config_settings, stage):
    """Builds with CMake and installs into `stage`; returns nothing, raises on failure."""
    build = _setting(config_settings, "build-dir", "DLRUN_BUILD_DIR", "build-python")
    build = build if os.path.isabs(build) else os.path.join(ROOT, build)
    jobs = _setting(config_settings, "jobs", "DLRUN_BUILD_JOBS", str(os.cpu_count() or 1))
    extra = shlex.split(_setting(config_settings, "cmake-args", "DLRUN_CMAKE_ARGS", ""))
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")) or extra:
        _run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", *extra])
    _run(["cmake", "--build", build, "-j", jobs, "--target", "libdlrun", "dlrun_cli", "dlrun_plugins"])
    _run(["cmake", "--install", build, "--prefix", stage])


def _native_files(stage):
    """(path in the wheel, file on disk) for what the wheel carries from the CMake install."""
    out = []
    libdir = None
    for cand in ("lib", "lib64", os.path.join("lib", sysconfig.get_config_var("MULTIARCH") or "-")):
        if os.path.exists(os.path.join(stage, cand, "dlrun")):
            libdir = cand
    if libdir is None:
        raise RuntimeError(f"dlrun_build: no plugin folder (lib/dlrun) in the CMake install at {stage}")
    lib = os.path.join(stage, libdir)
    # the library under its soname only (wheels hold no symlinks); the CLI links to that name
    sonames = [f for f in os.listdir(lib) if re.fullmatch(r"libdlrun\.so\.[0-9]+", f)]
    if len(sonames) != 1:
        raise RuntimeError(f"dlrun_build: expected one libdlrun.so.N in {lib}, found {sonames}")
    out.append((f"dlrun/_native/lib/{sonames[0]}", os.path.realpath(os.path.join(lib, sonames[0]))))
    for f in sorted(os.listdir(os.path.join(lib, "dlrun"))):
        out.append((f"dlrun/_native/lib/dlrun/{f}", os.path.join(lib, "dlrun", f)))
    out.append(("dlrun/_native/bin/dlrun", os.path.join(stage, "bin", "dlrun")))
    for sub, dst in (("include/dlrun", "dlrun/_native/include/dlrun"), ("share/dlrun/models", "dlrun/_native/models")):
        top = os.path.join(stage, sub)
        for dirpath, _, files in os.walk(top):
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(dirpath, f), top)
                out.append((f"{dst}/{rel}", os.path.join(dirpath, f)))
    return out


def _python_files():
    out = []
    pkg = os.path.join(ROOT, "python", "dlrun")
    for dirpath, dirs, files in os.walk(pkg):
        dirs[:] = [d for d in dirs if d != "__pycache__" and d != "_native"]
        for f in sorted(files):
            if f.endswith(".py"):
                full = os.path.join(dirpath, f)
                out.append(("dlrun/" + os.path.relpath(full, pkg), full))
    for f in ONNX_FILES:
        out.append((f"dlrun/onnx/{f}", os.path.join(ROOT, "tools", "onnx", f)))
    return out


def _generated_files():
    return {"dlrun/onnx/__init__.py": b'"""dlrun.onnx: the ONNX importer (tools/onnx), for dlrun.convert."""\n'}


def _metadata(version):
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version}", f"Summary: {SUMMARY}",
             "Requires-Python: >=3.9"] + [f"Requires-Dist: {r}" for r in REQUIRES]
    return "\n".join(lines) + "\n"


def _tag():
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"py3-none-{plat}"


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _dist_info_files(version):
    di = f"{NAME}-{version}.dist-info"
    return di, {
        f"{di}/METADATA": _metadata(version).encode(),
        f"{di}/WHEEL": f"Wheel-Version: 1.0\nGenerator: dlrun_build\nRoot-Is-Purelib: false\nTag: {_tag()}\n".encode(),
        f"{di}/entry_points.txt": b"[console_scripts]\ndlrun = dlrun._cli:main\n",
    }


def _write_wheel(wheel_directory, version, files, extra):
    name = f"{NAME}-{version}-{_tag()}.whl"
    path = os.path.join(wheel_directory, name)
    di, meta = _dist_info_files(version)
    meta.update(extra)
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, src in files:
            with open(src, "rb") as f:
                data = f.read()
            info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | (0o755 if os.access(src, os.X_OK) else 0o644)) << 16  # pip wants S_IFREG
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            record.append(_record_line(arc, data))
        for arc, data in meta.items():
            z.writestr(zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0)), data)
            record.append(_record_line(arc, data))
        record.append(f"{di}/RECORD,,")
        z.writestr(zipfile.ZipInfo(f"{di}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return name


# ---- PEP 517 hooks ----------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    di, meta = _dist_info_files(_version())
    for arc, data in meta.items():
        os.makedirs(os.path.join(metadata_directory, os.path.dirname(arc)), exist_ok=True)
        with open(os.path.join(metadata_directory, arc), "wb") as f:
            f.write(data)
    return di


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    with tempfile.TemporaryDirectory(prefix="dlrun-stage-") as stage:
        _build_native(config_settings, stage)
        return _write_wheel(wheel_directory, version, _python_files() + _native_files(stage), _generated_files())


def build_sdist(sdist_directory, config_settings=None):
    """The tracked files of the checkout (git ls-files), as NAME-VERSION.tar.gz."""
    version = _version()
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True, capture_output=True).stdout
    base = f"{NAME}-{version}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in files.decode().split("\0"):
            if rel and os.path.exists(os.path.join(ROOT, rel)):
                t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}", recursive=False)
        meta = _metadata(version).encode()
        with tempfile.NamedTemporaryFile() as f:
            f.write(meta)
            f.flush()
            t.add(f.name, arcname=f"{base}/PKG-INFO")
    return name


if __name__ == "__main__":  # python3 python/build_backend/dlrun_build.py OUTDIR: a wheel without pip
    print(build_wheel(sys.argv[1] if len(sys.argv) > 1 else "."))
    shutil.rmtree(os.path.join(ROOT, "python", "dlrun", "__pycache__"), ignore_errors=True)
