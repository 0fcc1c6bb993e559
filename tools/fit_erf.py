#!/usr/bin/python3
"""fit_erf.py — how the coefficients of cpu_erf_fast (plugins/cpu/activate.h) were made.

erf(x) ~ x P(s) / Q(s), s = x^2, P and Q of degree 5 (Q's constant 1), fitted on [0, 3.92] (erf
is 1 in float beyond) by least squares on the linearised error x P - erf Q, reweighted each round
by the previous error (Lawson's method, which tends to the minimax fit). Prints the largest error
in double and in float32 arithmetic (Horner, as the C code evaluates it), and the coefficients
rounded to float, highest degree first. Needs NumPy only: /usr/bin/python3 tools/fit_erf.py"""
import math

import numpy as np

X = 3.92
xs = np.linspace(0, X, 20000)
f = np.array([math.erf(v) for v in xs])
s = xs ** 2
n = 6  # coefficients of P and of Q
P0 = 2 / math.sqrt(math.pi)  # erf's slope at 0, fixed: tiny arguments keep their relative accuracy

w, q = np.ones_like(xs), np.ones_like(xs)
for _ in range(60):
    a = np.hstack([np.stack([xs * s ** i for i in range(1, n)], 1), -np.stack([f * s ** i for i in range(1, n)], 1)])
    scale = w / np.abs(q)
    coef = np.linalg.lstsq(a * scale[:, None], (f - P0 * xs) * scale, rcond=None)[0]
    P, Q = np.concatenate([[P0], coef[:n - 1]]), np.concatenate([[1.0], coef[n - 1:]])
    q = np.polyval(Q[::-1], s)
    err = xs * np.polyval(P[::-1], s) / q - f
    w = w * np.sqrt(np.abs(err)) + 1e-30
    w /= w.sum()
print(f"largest error in double: {np.abs(err).max():.3g}")

P32, Q32 = P.astype(np.float32), Q.astype(np.float32)
x = np.arange(0, 4.5, 1e-4, dtype=np.float32)
c = np.minimum(x, np.float32(X))
s32 = c * c
p, q = np.full_like(s32, P32[-1]), np.full_like(s32, Q32[-1])
for i in range(n - 2, -1, -1):
    p, q = p * s32 + P32[i], q * s32 + Q32[i]
r = np.minimum(c * p / q, np.float32(1))
ref = np.array([math.erf(float(v)) for v in x])
print(f"largest error in float: {np.abs(r - ref).max():.3g}")
print("P:", ", ".join(f"{v:.8e}f" for v in P32[::-1]))
print("Q:", ", ".join(f"{v:.8e}f" for v in Q32[::-1]))
