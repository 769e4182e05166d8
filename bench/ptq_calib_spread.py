#!/usr/bin/env python3
"""How far a zoo model's W8A8 PTQ figure moves with the calibration images alone, and how
QAT files compare with PTQ image by image (issue 17: "W8A8 QAT >= W8A8 PTQ" on resnet8,
where PTQ is already at float and every fine-tune moves a few borderline test images).

1. PTQ as `quantkit qat` starts from it (`quantkit quantize MODEL --calib DATA
   --calib-samples 1000`: the first 1,000 training images, min/max, per-channel int8
   weights, u8 activations), then the same with 1,000 other training images drawn at
   random (numpy `default_rng(K).choice(60000, 1000, replace=False)`, K = 1..--draws):
   each file run by `quantkit run --engine int8` on the full test set.
2. For each `--qat FILE.onnx`: the engine's test top-1 and, against the first PTQ file
   (or `--ptq FILE.onnx`: the start the QAT runs began from, e.g. the file `quantkit qat
   --validation N --keep-best` writes when it keeps the start, calibrated on the training
   part only), the images only QAT gets right, the images only PTQ gets right, and the
   exact two-sided McNemar (sign test) p-value of that split.
3. The float model (ONNX Runtime, one thread) on the first 10,000 training images as they
   are, mirrored left-right, and shifted one pixel right (np.roll): how far the model is
   from the views an augmentation would train on.

Usage:
    python3 bench/ptq_calib_spread.py [--quantkit target/release/quantkit] [--model resnet8]
        [--data /usr/share/datasets/fashion-mnist] [--out /tmp/ptq_spread] [--draws 5]
        [--ptq START.onnx] [--qat A.onnx B.onnx ...]
"""
import argparse, gzip, math, os, subprocess

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def idx(data, name, offset, shape):
    with gzip.open(os.path.join(data, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset).reshape(shape)


def engine_top1(qk, model, xfile, out):
    os.makedirs(out, exist_ok=True)
    subprocess.run([qk, "run", model, "--input", f"input={xfile}", "-o", out, "--engine", "int8"],
                   check=True, capture_output=True)
    return np.load(os.path.join(out, "output.npy")).argmax(1)


def sign_test(b, c):
    n, k = b + c, min(b, c)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantkit", default=os.path.join(ROOT, "target/release/quantkit"))
    ap.add_argument("--model", default="resnet8")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--out", default="/tmp/ptq_spread")
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--qat", nargs="*", default=[])
    ap.add_argument("--ptq", help="the PTQ file the --qat files are compared with (default: the first PTQ)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    model = os.path.join(ROOT, "models", f"{a.model}.onnx")
    x = idx(a.data, "t10k-images-idx3-ubyte.gz", 16, (-1, 1, 28, 28)).astype(np.float32) / np.float32(255)
    y = idx(a.data, "t10k-labels-idx1-ubyte.gz", 8, (-1,))
    xfile = os.path.join(a.out, "test_x.npy")
    np.save(xfile, x)
    tr = idx(a.data, "train-images-idx3-ubyte.gz", 16, (-1, 1, 28, 28))
    ptq = os.path.join(a.out, "ptq0.onnx")
    subprocess.run([a.quantkit, "quantize", model, "--calib", a.data, "--calib-samples", "1000",
                    "-o", ptq], check=True, capture_output=True)
    p0 = engine_top1(a.quantkit, ptq, xfile, os.path.join(a.out, "ptq0"))
    accs = [(p0 == y).mean()]
    print(f"PTQ, first 1,000 training images: {accs[0] * 100:.2f} %")
    for k in range(1, a.draws + 1):
        r = np.random.default_rng(k).choice(len(tr), 1000, replace=False)
        cfile = os.path.join(a.out, f"calib{k}.npy")
        np.save(cfile, tr[r].astype(np.float32) / np.float32(255))
        m = os.path.join(a.out, f"ptq{k}.onnx")
        subprocess.run([a.quantkit, "quantize", model, "--calib", cfile, "-o", m],
                       check=True, capture_output=True)
        p = engine_top1(a.quantkit, m, xfile, os.path.join(a.out, f"ptq{k}"))
        accs.append((p == y).mean())
        print(f"PTQ, random draw {k}: {accs[-1] * 100:.2f} % (differs from the first on {(p != p0).sum()} images)")
    print(f"PTQ over {len(accs)} calibration sets: {min(accs) * 100:.2f}–{max(accs) * 100:.2f} %, "
          f"mean {np.mean(accs) * 100:.3f} %")
    if a.ptq:
        p0 = engine_top1(a.quantkit, a.ptq, xfile, os.path.join(a.out, "ptq_given"))
        print(f"{os.path.basename(a.ptq)} (the reference below): {(p0 == y).mean() * 100:.2f} %")
    for f in a.qat:
        q = engine_top1(a.quantkit, f, xfile, os.path.join(a.out, "qat_" + os.path.basename(f)))
        b, c = int(((q == y) & (p0 != y)).sum()), int(((q != y) & (p0 == y)).sum())
        print(f"{os.path.basename(f)}: {(q == y).mean() * 100:.2f} %; only QAT right {b}, only PTQ right {c}, "
              f"sign-test p {sign_test(b, c):.3f}")
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime missing: the float model's mirrored/shifted accuracy is skipped")
        return
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
    n = s.get_inputs()[0].name
    xt = tr[:10000].astype(np.float32) / np.float32(255)
    yt = idx(a.data, "train-labels-idx1-ubyte.gz", 8, (-1,))[:10000]

    def top1(z):
        return np.concatenate([s.run(None, {n: z[i:i + 1000]})[0] for i in range(0, len(z), 1000)]).argmax(1)

    for name, z in [("as they are", xt), ("mirrored", xt[..., ::-1].copy()),
                    ("shifted 1 px right", np.roll(xt, 1, axis=3))]:
        p = top1(z)
        per = " ".join(f"{(p == yt)[yt == c].mean() * 100:.0f}" for c in range(10))
        print(f"float on the first 10,000 training images {name}: {(p == yt).mean() * 100:.2f} % (per class: {per})")


if __name__ == "__main__":
    main()
