"""Session: results equal the CLI's, inputs/outputs described, clear errors for wrong inputs."""
import gc
import os
import weakref

import numpy as np
import pytest

import dlrun


def test_results_equal_the_cli(models, cli, rng, tmp_path):
    model = os.path.join(models, "resnet18.yaml")
    sess = dlrun.Session(model, backend="cpu")
    (inp,), (out,) = sess.inputs, sess.outputs
    assert inp.dtype == "float32" and len(inp.shape) == 4
    x = rng.uniform(-1, 1, size=inp.shape).astype(np.float32)
    y = sess.run({inp.name: x})
    assert list(y) == [out.name] and y[out.name].shape == out.shape and y[out.name].dtype == np.float32
    np.save(tmp_path / "x.npy", x)
    cli(model, "--backend", "cpu", "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy")
    ref = np.load(tmp_path / "y.npy")
    # same library, same backend, same seeded weights: the same numbers
    np.testing.assert_array_equal(y[out.name], ref)
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0


def test_default_placement_and_batch(models, rng):
    sess = dlrun.Session(os.path.join(models, "lenet.yaml"), batch=3)
    inp = sess.inputs[0]
    assert inp.shape[0] == 3
    x = rng.uniform(-1, 1, size=inp.shape).astype(np.float32)
    y1 = sess.run(x)[sess.outputs[0].name]  # one input: the array itself
    ref = dlrun.Session(os.path.join(models, "lenet.yaml"), backend="cpu", batch=3).run({inp.name: x})
    np.testing.assert_allclose(y1, ref[sess.outputs[0].name], rtol=1e-4, atol=1e-6)
    # each image on its own gives the same rows (no state between items or runs)
    one = dlrun.Session(os.path.join(models, "lenet.yaml"), backend="cpu")
    for i in range(3):
        np.testing.assert_allclose(one.run(x[i:i + 1])[one.outputs[0].name][0], y1[i], rtol=1e-4, atol=1e-6)


def test_micro_batch(models, rng):
    path = os.path.join(models, "lenet.yaml")
    whole = dlrun.Session(path, backend="cpu", batch=4, micro_batch=4)
    parts = dlrun.Session(path, backend="cpu", batch=4, micro_batch=2)
    assert whole.batching == "4 at once" and parts.batching == "4 in 2 parts of 2 (asked)"
    assert parts.inputs[0].shape[0] == 4 and parts.outputs[0].shape[0] == 4  # the whole batch
    x = rng.uniform(-1, 1, size=whole.inputs[0].shape).astype(np.float32)
    out = whole.outputs[0].name
    np.testing.assert_allclose(parts.run(x)[out], whole.run(x)[out], rtol=1e-5, atol=1e-6)
    with pytest.raises(dlrun.InvalidArgument, match="must divide the batch"):
        dlrun.Session(path, backend="cpu", batch=4, micro_batch=3)
    with pytest.raises(dlrun.InvalidArgument, match="micro_batch"):
        dlrun.Session(path, micro_batch="half")
    # parts side by side, each on one of the 2 threads: the same outputs
    side = dlrun.Session(path, backend="cpu", batch=4, micro_batch=1, parts_at_once=2, threads=2)
    assert side.batching == "4 in 4 parts of 1, 2 at a time on 1 thread each (asked)"
    np.testing.assert_allclose(side.run(x)[out], whole.run(x)[out], rtol=1e-5, atol=1e-6)
    with pytest.raises(dlrun.InvalidArgument, match="at most the threads"):
        dlrun.Session(path, backend="cpu", batch=4, micro_batch=1, parts_at_once=3, threads=2)
    with pytest.raises(dlrun.InvalidArgument, match="parts_at_once"):
        dlrun.Session(path, parts_at_once=0)


def test_outputs_are_copies(models, rng):
    sess = dlrun.Session(os.path.join(models, "lenet.yaml"), backend="cpu")
    name, out = sess.inputs[0].name, sess.outputs[0].name
    a = rng.uniform(-1, 1, size=sess.inputs[0].shape).astype(np.float32)
    ya = sess.run({name: a})[out]
    keep = ya.copy()
    sess.run({name: -a})
    np.testing.assert_array_equal(ya, keep)  # the next run did not write into the first result


def test_wrong_inputs_raise_clear_errors(models, rng):
    sess = dlrun.Session(os.path.join(models, "lenet.yaml"))
    inp = sess.inputs[0]
    x = rng.uniform(-1, 1, size=inp.shape).astype(np.float32)
    with pytest.raises(dlrun.InvalidArgument, match=r"unknown input 'nope'.*" + inp.name):
        sess.run({"nope": x})
    with pytest.raises(dlrun.InvalidArgument, match=rf"missing input '{inp.name}'"):
        sess.run({})
    with pytest.raises(dlrun.InvalidArgument, match=r"must have shape \[1, 1, 28, 28\], got \[1, 1, 28, 27\]"):
        sess.run({inp.name: x[..., :27]})
    with pytest.raises(dlrun.InvalidArgument, match=r"batch=2"):
        sess.run({inp.name: np.concatenate([x, x])})
    with pytest.raises(dlrun.InvalidArgument, match=r"must be float32, got float64"):
        sess.run({inp.name: x.astype(np.float64)})
    with pytest.raises(dlrun.InvalidArgument, match=r"NumPy array or a DLPack tensor"):
        sess.run({inp.name: x.tolist()})
    with pytest.raises(dlrun.InvalidArgument, match=r"unknown output 'nope'"):
        sess.run({inp.name: x}, outputs=["nope"])
    # the errors are ValueErrors too, with the status and the one-line reason
    with pytest.raises(ValueError) as e:
        sess.run({"nope": x})
    assert e.value.status == "invalid" and "\n" not in e.value.reason
    # a non-contiguous array is accepted (one copy) and gives the same result
    wide = np.zeros(inp.shape[:-1] + (56,), np.float32)
    wide[..., ::2] = x
    np.testing.assert_array_equal(sess.run({inp.name: wide[..., ::2]})[sess.outputs[0].name],
                                  sess.run({inp.name: x})[sess.outputs[0].name])


def test_bad_models_and_options(tmp_path, models):
    with pytest.raises(dlrun.Error) as e:
        dlrun.Session(tmp_path / "missing.yaml")
    assert "missing.yaml" in e.value.reason
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nlayers: [1, 2\n")
    with pytest.raises(dlrun.InvalidArgument) as e:
        dlrun.Session(bad)
    assert "bad.yaml" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(dlrun.InvalidArgument, match="precision"):
        dlrun.Session(os.path.join(models, "lenet.yaml"), precision="f8")
    with pytest.raises(dlrun.InvalidArgument, match="batch"):
        dlrun.Session(os.path.join(models, "lenet.yaml"), batch=0)
    with pytest.raises(dlrun.Error) as e:
        dlrun.Session(os.path.join(models, "lenet.yaml"), backend="nosuchbackend")
    assert "nosuchbackend" in e.value.reason
    with pytest.raises(dlrun.OutOfMemory):
        dlrun.Session(os.path.join(models, "vgg.yaml"), max_memory=1 << 20)
    s = dlrun.Session(os.path.join(models, "lenet.yaml"))
    s.close()
    with pytest.raises(dlrun.InvalidArgument, match="closed"):
        s.run(np.zeros(s.inputs[0].shape, np.float32))


def test_int64_inputs(tmp_path, rng):
    model = tmp_path / "embed.yaml"
    model.write_text("model: embed\ninputs:\n  - {name: ids, shape: [2, 5], dtype: int64}\n"
                     "constants:\n  - {name: table, shape: [7, 4]}\n"
                     "layers:\n  - {name: emb, op: gather, inputs: [table, ids]}\n")
    sess = dlrun.Session(model)
    (inp,) = sess.inputs
    assert inp.dtype == "int64"
    ids = rng.integers(0, 7, size=inp.shape).astype(np.int64)
    y = sess.run({"ids": ids})[sess.outputs[0].name]
    assert y.shape == (2, 5, 4)
    # rows of the (seeded) table: equal ids give equal rows, and the table has 7 distinct rows
    flat_ids, rows = ids.reshape(-1), y.reshape(-1, 4)
    for i in range(len(flat_ids)):
        for j in range(len(flat_ids)):
            assert np.array_equal(rows[i], rows[j]) == (flat_ids[i] == flat_ids[j])
    with pytest.raises(dlrun.Error, match="out of range|outside"):
        sess.run({"ids": np.full(inp.shape, 7, np.int64)})
    with pytest.raises(dlrun.InvalidArgument, match="must be int64"):
        sess.run({"ids": ids.astype(np.float32)})


def test_profile_placement_memory(models, rng):
    sess = dlrun.Session(os.path.join(models, "lenet.yaml"), backend="cpu", profile=True)
    x = rng.uniform(-1, 1, size=sess.inputs[0].shape).astype(np.float32)
    for _ in range(3):
        sess.run(x)
    rows = sess.profile()
    ops = [r for r in rows if r["kind"] == "op"]
    assert ops and all(r["backend"] == "cpu" and r["runs"] == 3 and r["total_ms"] >= 0 for r in ops)
    conv = next(r for r in ops if r["op"] == "conv2d")
    assert conv["flops"] > 0 and len(conv["shape"]) == 4
    sess.reset_profile()
    assert all(r["runs"] == 0 for r in sess.profile())
    place = sess.placement()
    assert place and all(p["backend"] in ("cpu", "fused") or p["backend"].endswith("(fused)") or p["backend"] == "cpu"
                         for p in place)
    mem = sess.memory()
    assert mem[0]["domain"] == "host" and 0 < mem[0]["peak_bytes"] <= mem[0]["naive_bytes"]
    t = sess.last_run_times()
    assert t["compute_ms"] >= 0 and t["inputs_ms"] >= 0
    assert sess.last_run_handovers() == {"by_event": 0, "by_sync": 0}  # one backend on the host: none


def test_placement_summary_says_what_was_timed_cold(models, monkeypatch):
    # LeNet's 241 KiB of weights against a "cache" of 64 KiB: its 4 ops with 2 KiB of weights or
    # more are timed with their weights out of cache; against 1 GiB, none
    for llc, cold in ((65536, 4), (1 << 30, 0)):
        monkeypatch.setenv("DLRUN_CACHE_BYTES", str(llc))
        s = dlrun.Session(os.path.join(models, "lenet.yaml"), backend="cpu").placement_summary()
        assert s["cold_ops"] == cold and s["cache_bytes"] == llc, s
        assert s["weight_bytes"] == 246824 and s["timed"] + s["cached"] > 0 and s["cache"], s


def test_backends_listed():
    names = {b["name"]: b for b in dlrun.backends()}
    assert names["cpu"]["loaded"] and names["cpu"]["device"] == "cpu"
    assert names["cpu"]["queue_family"] is None  # it hands nothing over: it runs on the calling thread
    for b in names.values():  # a plugin that did not load says why (e.g. "no CUDA device")
        assert b["loaded"] or b["reason"]


def test_profile_names_an_elided_concat(tmp_path, rng):
    # at batch 1 the concat's inputs are written into it: its step is "elided" and never runs
    (tmp_path / "join.yaml").write_text(
        "model: join\ninputs:\n  - {name: x, shape: [1, 64]}\nlayers:\n"
        "  - {name: r, op: relu}\n  - {name: q, op: relu, inputs: [x]}\n  - {name: j, op: concat, inputs: [r, q]}\n")
    sess = dlrun.Session(str(tmp_path / "join.yaml"), backend="cpu")
    x = rng.uniform(-1, 1, size=(1, 64)).astype(np.float32)
    (y,) = sess.run(x).values()
    np.testing.assert_array_equal(y, np.concatenate([np.maximum(x, 0)] * 2, axis=1))
    j = next(r for r in sess.profile() if r["layer"] == "j")
    assert j["kind"] == "elided" and j["runs"] == 0


DEPTHWISE = """model: dw
inputs:
  - {name: x, shape: [2, 8, 19, 17]}
layers:
  - {name: c0, op: conv2d, filters: 16, kernel: 3, padding: 1}
  - {name: r0, op: relu}
  - {name: d1, op: conv2d, filters: 16, kernel: 3, stride: 2, padding: 1, groups: 16}
  - {name: c2, op: conv2d, filters: 12, kernel: 1}
  - {name: g, op: global_avgpool}
  - {name: f, op: flatten}
"""


def test_layout_modes(tmp_path, rng):
    model = tmp_path / "dw.yaml"
    model.write_text(DEPTHWISE)
    x = rng.uniform(-1, 1, size=(2, 8, 19, 17)).astype(np.float32)
    got = {}
    for layout in ("auto", "nchw", "nhwc"):
        s = dlrun.Session(model, backend="cpu", layout=layout)
        got[layout] = s.run(x)[s.outputs[0].name]
        if layout == "auto":  # the plan measured cheaper, and what the other cost
            assert s.layout_used.startswith(("each backend's own (auto: ", "nhwc at every conv on the host (auto: "))
            assert " ms measured, against " in s.layout_used
        else:
            assert s.layout_used == {"nchw": "nchw", "nhwc": "nhwc at every conv"}[layout]
    assert np.abs(got["nchw"]).max() > 0
    for layout in ("auto", "nhwc"):  # the same sums in another order: equal to rounding
        np.testing.assert_allclose(got[layout], got["nchw"], rtol=1e-5, atol=1e-6)
    with pytest.raises(dlrun.InvalidArgument, match="layout"):
        dlrun.Session(model, layout="nchwc")


def test_input_buffer_is_the_sessions_memory(models, rng):
    path = os.path.join(models, "lenet.yaml")
    sess = dlrun.Session(path, backend="cpu", batch=2)
    inp, out = sess.inputs[0], sess.outputs[0].name
    b = sess.input_buffer()
    assert b.shape == inp.shape and b.dtype == np.float32 and b.flags.writeable
    assert sess.input_buffer(inp.name).ctypes.data == b.ctypes.data  # the same memory every call
    x = rng.uniform(-1, 1, size=inp.shape).astype(np.float32)
    b[...] = x
    np.testing.assert_array_equal(sess.run(b)[out], sess.run(x.copy())[out])
    with pytest.raises(dlrun.InvalidArgument, match="unknown input 'nope'"):
        sess.input_buffer("nope")
    # closed while the array lives: the session's calls refuse, the array's memory stays valid
    sess.close()
    with pytest.raises(dlrun.InvalidArgument, match="closed"):
        sess.run(x)
    with pytest.raises(dlrun.InvalidArgument, match="closed"):
        sess.input_buffer()
    b[...] = 0.5
    assert float(b.sum()) == 0.5 * b.size
    # the array holds the session (whose __del__ frees the memory) until it goes
    alive = weakref.ref(sess)
    del sess
    gc.collect()
    assert alive() is not None
    del b
    gc.collect()
    assert alive() is None
