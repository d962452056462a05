#!/usr/bin/env python3
"""fit_tanh.py - prints the coefficients of cl/common.cl's tanh8 and the error of that function.

tanh8 is x P(x^2) / Q(x^2) on x clamped to [-CLAMP, CLAMP], with P and Q of degree DEG and
Q(0) = 1. The coefficients come from a rational least-squares fit of the absolute error on a
dense grid of [0, CLAMP]: each round solves the linearised problem x P - tanh(x) (Q - 1) = tanh(x)
weighted by 1 / Q of the round before (so that it fits the true error), and raises the weights where
the error is large (Lawson's rule), which pushes the fit toward equal ripples. The script then
evaluates the function as the kernel does (fp32, Estrin's scheme with fused multiply-adds, the
coefficients rounded to the 8 digits it prints) on every float of [0, CLAMP] at a stride, and prints the largest
absolute error. Needs numpy; not part of the build.

    python3 tools/fit_tanh.py
"""
import numpy as np

CLAMP = 9.0
DEG = 4
ROUNDS = 200


def fit():
    x = np.linspace(0.0, CLAMP, 20001)[1:]
    z, f = x * x, np.tanh(x)
    weight, q_prev, best = np.ones_like(x), np.ones_like(x), None
    for _ in range(ROUNDS):
        cols = [x * z**k for k in range(DEG + 1)] + [-f * z**k for k in range(1, DEG + 1)]
        a = np.stack(cols, 1)
        w = np.sqrt(weight) / q_prev
        c = np.linalg.lstsq(a * w[:, None], f * w, rcond=None)[0]
        p, q = c[: DEG + 1], np.concatenate([[1.0], c[DEG + 1 :]])
        qz = np.polyval(q[::-1], z)
        err = x * np.polyval(p[::-1], z) / qz - f
        worst = np.max(np.abs(err))
        if best is None or worst < best[0]:
            best = (worst, p, q)
        q_prev = qz
        weight = weight * np.sqrt(np.abs(err) + 1e-30)
        weight /= weight.sum()
    return best


def fma32(a, b, c):
    # exact product of two floats in float64, one rounding of the sum, then to float32
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def estrin32(coef, z):
    # the kernel's order for degree 4: (c4 z2 + (c3 z + c2)) z2 + (c1 z + c0), z2 = z * z in fp32
    c = [np.full_like(z, v) for v in coef]
    z2 = (z * z).astype(np.float32)
    return fma32(fma32(c[4], z2, fma32(c[3], z, c[2])), z2, fma32(c[1], z, c[0]))


def main():
    worst, p, q = fit()
    p32 = np.array([float("%.7e" % v) for v in p], dtype=np.float32)
    q32 = np.array([float("%.7e" % v) for v in q], dtype=np.float32)
    print("fit on [0, %g], degree %d / %d: largest error in float64 %.3g" % (CLAMP, DEG, DEG, worst))
    print("P, constant term first: " + ", ".join("%.7ef" % v for v in p32))
    print("Q, constant term first: " + ", ".join("%.7ef" % v for v in q32))
    bits = np.arange(0, np.float32(CLAMP * 1.5).view(np.int32), 7, dtype=np.int32)
    x = bits.view(np.float32)
    c = np.minimum(x, np.float32(CLAMP))
    z = (c * c).astype(np.float32)
    t = ((c * estrin32(p32, z)).astype(np.float32) / estrin32(q32, z)).astype(np.float32)
    err = np.abs(t.astype(np.float64) - np.tanh(x.astype(np.float64)))
    i = int(np.argmax(err))
    print("fp32 evaluation on %d floats of [0, %g]: largest error %.3g (%.1f units of 2^-24) at x = %.6g"
          % (x.size, CLAMP * 1.5, err[i], err[i] / 2.0**-24, x[i]))


if __name__ == "__main__":
    main()
