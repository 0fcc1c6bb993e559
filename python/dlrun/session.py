"""session — dlrun.Session: a model bound to weights and backends, run on NumPy or DLPack arrays.

    sess = dlrun.Session("models/resnet18.yaml")
    y = sess.run({"x": x})["logits"]        # dict of NumPy arrays, like onnxruntime's run

The conventions are ONNX Runtime's InferenceSession where they fit (inputs/outputs with name,
shape and dtype; run takes a dict), and the library's own everywhere else (profile, placement,
trace). A session is one thread's at a time (a lock serializes calls on one session); any number
of sessions, of the same or different models, run in parallel threads: the GIL is released for
the whole of every run.
"""
import collections
import ctypes
import os
import threading
import weakref

import numpy as np

from . import _capi
from .errors import InvalidArgument, OutOfMemory, raise_for
from .tensor import InputView, dtype_name, output_view, shape_of

lib = _capi.lib
TensorInfo = collections.namedtuple("TensorInfo", "name shape dtype")

_contexts = {}
_contexts_lock = threading.Lock()


def _context(threads=0, device=0):
    """The shared plugin registry for these settings (plugins are loaded once per process)."""
    key = (int(threads or 0), int(device or 0))
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            opt = _capi.ContextOptions(ctypes.sizeof(_capi.ContextOptions), key[0], key[1], None, 0)
            handle, err = ctypes.c_void_p(), _capi.Error()
            raise_for(lib.dl_context_create(ctypes.byref(opt), ctypes.byref(handle), ctypes.byref(err)), err)
            ctx = _contexts[key] = handle
        return ctx


def backends(threads=0, device=0):
    """The plugins found: a list of dicts (name, path, loaded, description or reason, device, and
    queue_family: backends with the same one hand a device over by events, or None)."""
    ctx = _context(threads, device)
    out = []
    for i in range(lib.dl_context_plugin_count(ctx)):
        p = lib.dl_context_plugin(ctx, i).contents
        out.append({"name": _capi.text(p.name), "path": _capi.text(p.path), "loaded": bool(p.loaded),
                    "description": _capi.text(p.description), "reason": _capi.text(p.reason),
                    "device": {1: "cpu", 2: "cuda"}.get(p.device.device_type, str(p.device.device_type)),
                    "queue_family": _capi.text(p.queue_family)})
    return out


def _path(p):
    return os.fsencode(os.fspath(p))


class Model:
    """A parsed model file (YAML, shapes inferred). Sessions made from it share it."""

    def __init__(self, path):
        self.path = os.fspath(path)
        handle, err = ctypes.c_void_p(), _capi.Error()
        raise_for(lib.dl_model_load(_path(path), ctypes.byref(handle), ctypes.byref(err)), err)
        self._handle = handle

    @property
    def name(self):
        return _capi.text(lib.dl_model_name(self._handle))

    @property
    def labels(self):
        """Class names from the model file's `labels:` ([] when it has none)."""
        if not _capi.has("dl_model_label_count"):
            return []
        return [_capi.text(lib.dl_model_label(self._handle, i)) for i in range(lib.dl_model_label_count(self._handle))]

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h:
            lib.dl_model_free(h)
            self._handle = None


class Session:
    """Session(model, backend=None, precision="f32", batch=None, weights=None, ...)

    model      path of a model file (YAML), or a dlrun.Model
    backend    run every op on this backend ("cpu", "onednn", "cuda", "cudnn"); None: each op where
               it is measured fastest (the CLI's default placement)
    precision  "f32" (exact), "tf32", "f16" or "bf16"
    layout     of 4-D activations: "auto" (of NHWC at every conv on the CPU backends and each
               backend's own, the plan placement measures faster), "nchw" or "nhwc"
               (docs/layout.md); layout_used says what it became
    batch      batch size (None: the model file's)
    micro_batch "auto" (the batch at once, or in parts of it where that measures faster and gives
               the same outputs; docs/micro-batch.md) or the images a part takes (dividing the
               batch); batching says what it became
    parts_at_once "auto" (under micro_batch "auto", parts of 1 run a thread each are measured too;
               with micro_batch n, one part at a time) or how many parts run at the same time, each
               on its share of the threads (1: one at a time; at most the threads)
    weights    a .safetensors file (None: the model's `weights:`, else seeded initialisation)
    seed       seed of the initialisation when there is no weights file
    threads    CPU threads (None: all cores); device: GPU ordinal
    fuse       False: no activation fused into its producer, no batchnorm folded
    profile    True: time every step (synchronizing GPU backends after each op), for profile()
    trace      True: record a Chrome trace of creation and every run, for write_trace()
    max_memory bytes any one memory domain may use
    """

    def __init__(self, model, backend=None, precision="f32", batch=None, weights=None, seed=1, threads=None,
                 device=0, fuse=True, profile=False, trace=False, max_memory=None, layout="auto",
                 micro_batch="auto", parts_at_once="auto"):
        if precision not in _capi.PRECISIONS:
            raise InvalidArgument(f"precision must be one of {', '.join(_capi.PRECISIONS)}, not {precision!r}")
        if layout not in _capi.LAYOUTS:
            raise InvalidArgument(f"layout must be one of {', '.join(_capi.LAYOUTS)}, not {layout!r}")
        if micro_batch != "auto" and (not isinstance(micro_batch, (int, np.integer)) or isinstance(micro_batch, bool)
                                      or micro_batch < 1):
            raise InvalidArgument(f"micro_batch must be \"auto\" or a positive integer, not {micro_batch!r}")
        if parts_at_once != "auto" and (not isinstance(parts_at_once, (int, np.integer))
                                        or isinstance(parts_at_once, bool) or parts_at_once < 1):
            raise InvalidArgument(f"parts_at_once must be \"auto\" or a positive integer, not {parts_at_once!r}")
        if batch is not None and (not isinstance(batch, (int, np.integer)) or batch < 1):
            raise InvalidArgument(f"batch must be a positive integer, not {batch!r}")
        if trace and not _capi.has("dl_session_write_trace"):
            raise InvalidArgument(f"this libdlrun ({_capi.library_path}) cannot record traces")
        self.model = model if isinstance(model, Model) else Model(model)
        self._lock = threading.Lock()
        self._handle = None
        self._deferred = None  # close()d while input_buffer arrays live: freed by __del__ after them
        self._buffers = []  # weak references to the memory objects under input_buffer's arrays
        buf = ctypes.create_string_buffer(max(1024, ctypes.sizeof(_capi.SessionOptions)))
        lib.dl_session_options_init(buf)  # the library's defaults, its struct_size
        o = _capi.SessionOptions.from_buffer(buf)
        self._keep = []
        o.batch = int(batch or 0)
        o.seed = int(seed)
        if weights is not None:
            self._keep.append(_path(weights))
            o.weights_path = self._keep[-1]
        if backend is not None:
            self._keep.append(str(backend).encode())
            o.backend = self._keep[-1]
        o.precision = _capi.PRECISIONS[precision]
        o.no_fuse = 0 if fuse else 1
        o.layout = _capi.LAYOUTS[layout]
        o.micro_batch = 0 if micro_batch == "auto" else int(micro_batch)
        o.parts_at_once = 0 if parts_at_once == "auto" else int(parts_at_once)
        o.max_memory = int(max_memory or 0)
        if trace:
            o.trace = 1
        handle, err = ctypes.c_void_p(), _capi.Error()
        ctx = _context(threads, device)
        raise_for(lib.dl_session_create(ctx, self.model._handle, buf, ctypes.byref(handle), ctypes.byref(err)), err)
        self._handle = handle
        self.backend, self.precision, self.trace = backend, precision, bool(trace)
        self.layout_used = _capi.text(lib.dl_session_layout(handle)) if _capi.has("dl_session_layout") else None
        self.batching = _capi.text(lib.dl_session_batching(handle)) if _capi.has("dl_session_batching") else None
        if profile:
            lib.dl_session_set_profiling(handle, 1)
        h = handle
        self.inputs = []
        for i in range(lib.dl_session_input_count(h)):
            t = lib.dl_session_input(h, i).contents
            self.inputs.append(TensorInfo(_capi.text(lib.dl_session_input_name(h, i)), shape_of(t), dtype_name(t.dtype)))
        self.outputs = []
        for i in range(lib.dl_session_output_count(h)):
            t = lib.dl_session_output(h, i).contents
            self.outputs.append(TensorInfo(_capi.text(lib.dl_session_output_name(h, i)), shape_of(t),
                                           dtype_name(t.dtype)))
        # what run() needs each time, prepared once: the input descriptors (the session's own
        # shape arrays), each input's NumPy dtype, and views of the output buffers (their address is
        # fixed for the session's life; their contents are valid until the next run)
        n_in = len(self.inputs)
        self._in_structs = (_capi.Tensor * max(n_in, 1))(*[lib.dl_session_input(h, i).contents for i in range(n_in)])
        self._in_np = [np.dtype(i.dtype) for i in self.inputs]
        self._out_views = [output_view(lib.dl_session_output(h, i).contents) for i in range(len(self.outputs))]
        self._out_index = {o.name: i for i, o in enumerate(self.outputs)}

    # ---- running ----------------------------------------------------------------------------

    def _views(self, feeds):
        if feeds is None or not isinstance(feeds, dict):
            if len(self.inputs) == 1 and feeds is not None:
                feeds = {self.inputs[0].name: feeds}
            else:
                names = ", ".join(i.name for i in self.inputs)
                raise InvalidArgument(f"run wants a dict of inputs by name ({names})")
        known = {i.name for i in self.inputs}
        for k in feeds:
            if k not in known:
                raise InvalidArgument(f"unknown input '{k}'; the model's inputs: "
                                      + ", ".join(f"{i.name} {list(i.shape)} {i.dtype}" for i in self.inputs))
        views = []
        for info in self.inputs:
            if info.name not in feeds:
                raise InvalidArgument(f"missing input '{info.name}' ({list(info.shape)} {info.dtype})")
            views.append(InputView(info.name, feeds[info.name], info.shape, info.dtype))
        return views

    def run(self, feeds, outputs=None):
        """Runs the model. feeds: {input name: array} (or the array itself when the model has one
        input); arrays are NumPy arrays or DLPack tensors of the input's exact shape and dtype.
        Returns {output name: NumPy array}, only the named outputs when `outputs` is given."""
        arr, keep = self._fast_inputs(feeds)
        if arr is None:  # DLPack tensors, strided arrays, or an error to explain
            views = self._views(feeds)
            arr, keep = (_capi.Tensor * max(len(views), 1))(*[v.tensor for v in views]), views
        want = self.outputs if outputs is None else outputs
        idx = []
        for o in want:
            name = o.name if isinstance(o, TensorInfo) else o
            if name not in self._out_index:
                raise InvalidArgument(f"unknown output '{name}'; the model's outputs: "
                                      + ", ".join(o.name for o in self.outputs))
            idx.append((name, self._out_index[name]))
        err = _capi.Error()
        with self._lock:
            h = self._live()
            raise_for(lib.dl_session_run(h, arr, len(self.inputs), ctypes.byref(err)), err)  # GIL released
            result = {name: self._out_views[i].copy() for name, i in idx}
        del keep
        return result

    def _fast_inputs(self, feeds):
        """The common case in a few checks: dense NumPy arrays of the right shape and dtype, put
        into the prepared descriptors; (None, None) for anything else (_views explains errors)."""
        if isinstance(feeds, np.ndarray) and len(self.inputs) == 1:
            feeds = {self.inputs[0].name: feeds}
        if not isinstance(feeds, dict) or len(feeds) != len(self.inputs):
            return None, None
        arr = (_capi.Tensor * max(len(self.inputs), 1))()
        ctypes.memmove(arr, self._in_structs, ctypes.sizeof(arr))
        for k, info in enumerate(self.inputs):
            a = feeds.get(info.name)
            if (not isinstance(a, np.ndarray) or a.dtype != self._in_np[k] or a.shape != info.shape
                    or not a.flags.c_contiguous):
                return None, None
            arr[k].data = a.ctypes.data
        return arr, feeds

    def input_buffer(self, name=None):
        """A NumPy array over the session's own memory for an input (by name; the only input by
        default), to fill in place and pass to run(): where a CUDA plugin uploads that input it is
        page-locked memory, which the GPU's DMA reads where it is, with no staging copy (plain host
        memory elsewhere). Every call gives an array over the same memory. The array keeps the
        session's memory alive: after close() it stays valid, and the session is freed once the
        last such array is gone."""
        with self._lock:
            h = self._live()
            names = [i.name for i in self.inputs]
            if name is None and len(names) == 1:
                name = names[0]
            if name not in names:
                raise InvalidArgument(f"unknown input '{name}'; the model's inputs: " + ", ".join(names))
            i = names.index(name)
            info = self.inputs[i]
            p = lib.dl_session_input_buffer(h, i)
            if not p:
                raise OutOfMemory(f"no memory for input '{name}''s buffer")
            dt = np.dtype(info.dtype)
            n = int(np.prod(info.shape, dtype=np.int64))

            class Memory(ctypes.c_char * (n * dt.itemsize)):
                pass  # a ctypes array that can hold the session (below) and be weakly referenced

            mem = Memory.from_address(p)
            mem.session = self  # the session, and so its memory, lives as long as the array
            self._buffers = [r for r in self._buffers if r() is not None] + [weakref.ref(mem)]
            return np.frombuffer(mem, dtype=dt, count=n).reshape(info.shape)

    # ---- what happened ----------------------------------------------------------------------

    def profile(self):
        """One dict per step of the last runs: kind ("op", "copy", "fused", or "elided": a concat
        its inputs were written into, or a transpose that is a view of a layout), layer, op, backend, shape, flops, bytes, last_ms, total_ms,
        runs, mean_ms and gflops (from mean_ms)."""
        h = self._live()
        rows = []
        for i in range(lib.dl_session_step_count(h)):
            s = _capi.StepInfo()
            lib.dl_session_step(h, i, ctypes.byref(s))
            mean = s.total_ms / s.runs if s.runs else 0.0
            rows.append({"kind": _capi.STEP_KINDS.get(s.kind, str(s.kind)), "layer": _capi.text(s.layer),
                         "op": _capi.text(s.op), "backend": _capi.text(s.backend),
                         "shape": tuple(s.shape[j] for j in range(s.ndim)), "flops": s.flops, "bytes": s.bytes,
                         "last_ms": s.last_ms, "total_ms": s.total_ms, "runs": s.runs, "mean_ms": mean,
                         "gflops": s.flops / (mean * 1e6) if mean > 0 and s.flops > 0 else 0.0})
        return rows

    def reset_profile(self):
        lib.dl_session_reset_profile(self._live())

    def last_run_times(self):
        """The last run in three phases (ms): inputs in, compute, outputs out."""
        t = _capi.RunTimes()
        lib.dl_session_last_run_times(self._live(), ctypes.byref(t))
        return {"inputs_ms": t.inputs_ms, "compute_ms": t.compute_ms, "outputs_ms": t.outputs_ms}

    def last_run_handovers(self):
        """The last run's hand-overs between backends sharing a device (the cuda and cudnn plugins
        on one GPU): by an event the next one's queue waited for, and by the host synchronizing."""
        ev, sy = ctypes.c_int(0), ctypes.c_int(0)
        lib.dl_session_last_run_handovers(self._live(), ctypes.byref(ev), ctypes.byref(sy))
        return {"by_event": ev.value, "by_sync": sy.value}

    def placement(self):
        """Per op: the backend chosen, each candidate's measured time (None: not supported, with why)."""
        h = self._live()
        rows = []
        for i in range(lib.dl_session_placement_count(h)):
            p = _capi.PlacementInfo()
            lib.dl_session_placement(h, i, ctypes.byref(p))
            cands = []
            for j in range(p.n_candidates):
                c = p.candidates[j]
                cands.append({"backend": _capi.text(c.backend), "ms": c.ms if c.ms >= 0 else None,
                              "cached": bool(c.cached), "why": _capi.text(c.why)})
            rows.append({"layer": _capi.text(p.layer), "op": _capi.text(p.op), "backend": _capi.text(p.chosen),
                         "storage": _capi.text(p.storage), "candidates": cands})
        return rows

    def placement_summary(self):
        """How placement measured: op timings taken now (timed) and from the timing cache (cached),
        the cache file, and the ops timed with their weights out of cache (cold_ops: where the
        model's weights, weight_bytes, exceed the last-level cache, cache_bytes; docs/placement.md)."""
        h = self._live()
        timed, cached, path = ctypes.c_int(), ctypes.c_int(), ctypes.c_char_p()
        lib.dl_session_placement_stats(h, ctypes.byref(timed), ctypes.byref(cached), ctypes.byref(path))
        out = {"timed": timed.value, "cached": cached.value, "cache": _capi.text(path.value)}
        if _capi.has("dl_session_placement_cold"):
            cold, llc, weights = ctypes.c_int(), ctypes.c_uint64(), ctypes.c_uint64()
            lib.dl_session_placement_cold(h, ctypes.byref(cold), ctypes.byref(llc), ctypes.byref(weights))
            out.update(cold_ops=cold.value, cache_bytes=llc.value, weight_bytes=weights.value)
        return out

    def memory(self):
        """Per memory domain: the planned arena (peak), no-reuse total, lower bound and weights (bytes)."""
        h = self._live()
        rows = []
        for i in range(lib.dl_session_memory_count(h)):
            m = _capi.MemoryInfo()
            lib.dl_session_memory(h, i, ctypes.byref(m))
            rows.append({"domain": _capi.text(m.domain), "peak_bytes": m.peak_bytes, "naive_bytes": m.naive_bytes,
                         "lower_bound_bytes": m.lower_bound_bytes, "weight_bytes": m.weight_bytes})
        return rows

    def write_trace(self, path):
        """Writes the Chrome trace (Perfetto, chrome://tracing) of creation and the runs so far;
        the session must have been made with trace=True."""
        if not self.trace:
            raise InvalidArgument("write_trace: make the session with Session(..., trace=True)")
        err = _capi.Error()
        with self._lock:
            raise_for(lib.dl_session_write_trace(self._live(), _path(path), ctypes.byref(err)), err)

    # ---- images and classes ------------------------------------------------------------------

    @property
    def labels(self):
        return self.model.labels

    def load_image(self, path, input=0):
        """An image file (PNG, JPEG, BMP, ...) as the model's input `input` expects it: decoded,
        resized, cropped and normalized as its `preprocess:` says; a [1, C, H, W] float32 array."""
        if not _capi.has("dl_image_load"):
            raise InvalidArgument(f"this libdlrun ({_capi.library_path}) cannot read images")
        idx = input if isinstance(input, int) else [i.name for i in self.inputs].index(input)
        data, shape, ndim, err = ctypes.POINTER(ctypes.c_float)(), (ctypes.c_int64 * 8)(), ctypes.c_int(), _capi.Error()
        raise_for(lib.dl_image_load(self.model._handle, idx, _path(path), ctypes.byref(data), shape,
                                    ctypes.byref(ndim), ctypes.byref(err)), err)
        try:
            dims = tuple(shape[i] for i in range(ndim.value))
            n = int(np.prod(dims, dtype=np.int64))
            return np.ctypeslib.as_array(data, shape=(n,)).reshape(dims).copy()
        finally:
            lib.dl_free(data)

    def classify(self, images, top=5):
        """Top classes of one image or several (paths or [N, C, H, W] arrays): for each image a list
        of (label, probability, index), best first. Softmax is applied unless the model's output
        already holds probabilities. One image: its list; several: a list of lists."""
        single = isinstance(images, (str, os.PathLike)) or (isinstance(images, np.ndarray) and images.ndim == 4
                                                             and images.shape[0] == 1)
        paths = [images] if isinstance(images, (str, os.PathLike)) else images
        if isinstance(paths, np.ndarray):
            x = paths.astype(np.float32, copy=False)
        else:
            x = np.concatenate([self.load_image(p) for p in paths])
        batch = self.inputs[0].shape[0]
        if x.shape[0] != batch:
            raise InvalidArgument(f"classify: {x.shape[0]} image(s) for a session of batch {batch}: "
                                  f"Session(..., batch={x.shape[0]})")
        y = self.run({self.inputs[0].name: x})[self.outputs[0].name].reshape(x.shape[0], -1).astype(np.float64)
        labels = self.labels
        out = []
        for row in y:
            is_prob = bool(np.all((row >= 0) & (row <= 1)) and abs(row.sum() - 1.0) <= 1e-3)
            p = row if is_prob else np.exp(row - row.max()) / np.exp(row - row.max()).sum()
            best = np.argsort(-p, kind="stable")[:top]
            out.append([(labels[k] if k < len(labels) else str(k), float(p[k]), int(k)) for k in best])
        return out[0] if single else out

    # ---- lifetime ---------------------------------------------------------------------------

    def _live(self):
        if not self._handle:
            raise InvalidArgument("the session is closed")
        return self._handle

    def close(self):
        with self._lock:
            if self._handle:
                if any(r() is not None for r in self._buffers):  # input_buffer's arrays use its memory:
                    # __del__ frees it once they are gone (each holds the session)
                    self._deferred = self._handle
                else:
                    lib.dl_session_free(self._handle)
                self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        for attr in ("_handle", "_deferred"):
            if getattr(self, attr, None):
                lib.dl_session_free(getattr(self, attr))
                setattr(self, attr, None)

    def __repr__(self):
        ins = ", ".join(f"{i.name} {list(i.shape)} {i.dtype}" for i in self.inputs)
        return f"dlrun.Session({self.model.path!r}, inputs: {ins})"
