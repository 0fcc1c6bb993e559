"""Threads: run releases the GIL, and sessions run in parallel threads with correct results."""
import os
import threading
import time

import numpy as np

import dlrun


def test_run_releases_the_gil(models, rng):
    # One thread runs a model taking tens of milliseconds per run; this thread keeps executing
    # Python meanwhile. Were the GIL held during the C call, this thread would stall for the
    # whole run: its longest pause would be about one run long. With the GIL released its pauses
    # are scheduler slices (the machine may have fewer cores than runnable threads).
    # (batch 8: one image of ResNet-18 on one thread takes about 16 ms on an AVX-512 machine)
    sess = dlrun.Session(os.path.join(models, "resnet18.yaml"), backend="cpu", threads=1, batch=8,
                         micro_batch=8)  # at once: parts would be shorter runs
    x = rng.uniform(-1, 1, size=sess.inputs[0].shape).astype(np.float32)
    sess.run(x)
    t0 = time.perf_counter()
    sess.run(x)
    one_run = time.perf_counter() - t0
    assert one_run > 0.02, f"the model runs too fast ({one_run * 1e3:.1f} ms) to tell"
    done, durations = threading.Event(), []

    def worker():
        for _ in range(3):
            t = time.perf_counter()
            sess.run(x)
            durations.append(time.perf_counter() - t)
        done.set()

    th = threading.Thread(target=worker)
    last, max_gap, beats = time.perf_counter(), 0.0, 0
    th.start()
    while not done.is_set():
        now = time.perf_counter()
        max_gap, last, beats = max(max_gap, now - last), now, beats + 1
    th.join()
    assert max_gap < 0.5 * min(durations), (f"this thread stalled {max_gap * 1e3:.1f} ms while a run took "
                                           f"{min(durations) * 1e3:.1f} ms: the GIL was held")
    assert beats > 1000


def test_two_sessions_in_two_threads(models, rng):
    model = os.path.join(models, "resnet18.yaml")
    sessions = [dlrun.Session(model, backend="cpu", threads=1) for _ in range(2)]
    name, out = sessions[0].inputs[0].name, sessions[0].outputs[0].name
    xs = [rng.uniform(-1, 1, size=sessions[0].inputs[0].shape).astype(np.float32) for _ in range(2)]
    serial = [sessions[0].run({name: x})[out] for x in xs]
    results, errors = [[] for _ in range(2)], []
    start = threading.Barrier(2)

    def worker(k):
        try:
            start.wait()
            for _ in range(4):
                results[k].append(sessions[k].run({name: xs[k]})[out])
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(2):
        assert len(results[k]) == 4
        for y in results[k]:
            np.testing.assert_array_equal(y, serial[k])


def test_one_session_shared_by_threads_is_serialized(models, rng):
    sess = dlrun.Session(os.path.join(models, "lenet.yaml"), backend="cpu")
    name, out = sess.inputs[0].name, sess.outputs[0].name
    xs = [rng.uniform(-1, 1, size=sess.inputs[0].shape).astype(np.float32) for _ in range(4)]
    want = [sess.run({name: x})[out] for x in xs]
    got, errors = {}, []

    def worker(k):
        try:
            for _ in range(20):
                y = sess.run({name: xs[k]})[out]
                if not np.array_equal(y, want[k]):
                    got[k] = y
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not got
