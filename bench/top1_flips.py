#!/usr/bin/env python3
"""Are two int8 versions of one zoo model really different in top-1? Runs the float model and
two quantized ones (QDQ, in ONNX Runtime, 1 thread) on the full Fashion-MNIST TEST split and
counts the images only A gets right and only B gets right, with the two-sided sign test's
p-value on those discordant images (exact binomial): a top-1 gap of a few images out of
10,000 is noise when p is large.

Usage:
    python3 bench/top1_flips.py models/resnet8.onnx A.onnx B.onnx [--data /usr/share/datasets/fashion-mnist]
"""
import argparse, gzip, math, os, struct, sys

import numpy as np
import onnxruntime as ort


def idx(path):
    b = gzip.open(path).read()
    nd = b[3]
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def predict(model, x):
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: x[i:i + 500]})[0].argmax(1) for i in range(0, len(x), 500)])


def sign_test(k, n):
    """Two-sided exact binomial p-value of k successes out of n at p = 1/2."""
    if n == 0:
        return 1.0
    k = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("float_model")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--data", default=os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    a = ap.parse_args()
    x = idx(os.path.join(a.data, "t10k-images-idx3-ubyte.gz")).astype(np.float32)[:, None] / 255
    y = idx(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz"))
    f, pa, pb = (predict(m, x) for m in (a.float_model, a.a, a.b))
    ra, rb = pa == y, pb == y
    only_a, only_b = int((ra & ~rb).sum()), int((rb & ~ra).sum())
    print(f"top-1: float {100 * (f == y).mean():.2f} %, A {100 * ra.mean():.2f} %, B {100 * rb.mean():.2f} %")
    print(f"agreement with float: A {100 * (pa == f).mean():.2f} %, B {100 * (pb == f).mean():.2f} %")
    print(f"right only with A: {only_a}, right only with B: {only_b}, "
          f"sign test p = {sign_test(only_a, only_a + only_b):.3f}")


if __name__ == "__main__":
    sys.exit(main())
