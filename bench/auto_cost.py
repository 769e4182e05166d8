#!/usr/bin/env python3
"""Cost of `--method auto` against minmax (issue 18): `quantkit quantize --json` with each
method on the zoo (first 1,000 TRAIN images, as bench/zoo_ptq.py) and on the real models of
../shared/models (every other fixture sample, as bench/real_models.py); prints the whole
calibration time of each (`calibration_seconds`: observers, and for auto the range search),
their ratio, and auto's search: model runs, seconds (and of them computing the candidate
ranges from the histograms), and the share of the node evaluations
that full re-runs would have done (`auto.nodes_run / auto.nodes_full`).

Usage:
    cargo build --release -p quantkit-cli
    python3 bench/auto_cost.py [--quantkit target/release/quantkit] [--shared ../shared]
"""
import argparse, json, os, subprocess, sys, tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REAL = [("mtcnn-rnet", "mtcnn/rnet.onnx", "mtcnn/rnet_input.npy"),
        ("mtcnn-onet", "mtcnn/onet.onnx", "mtcnn/onet_input.npy"),
        ("ppocr-cls", "ppocr-cls/ch_ppocr_mobile_v2.0_cls_infer.onnx", "ppocr-cls/cls_input.npy")]


def quantize(qk, model, extra, method, out):
    r = subprocess.run([qk, "quantize", model, "--method", method, "-o", out, "--json"] + extra,
                       check=True, capture_output=True, text=True)
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantkit", default=os.path.join(ROOT, "target/release/quantkit"))
    ap.add_argument("--data", default=os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--shared", default=os.environ.get("QUANTKIT_SHARED", os.path.join(ROOT, "..", "shared")))
    ap.add_argument("--zoo", nargs="*", default=["lenet", "resnet8", "mobilenet", "mlp"])
    ap.add_argument("--no-real", action="store_true")
    a = ap.parse_args()
    d = tempfile.mkdtemp()
    jobs = []
    train = os.path.join(a.data, "train-images-idx3-ubyte.gz")
    for m in a.zoo:
        jobs.append((m, os.path.join(ROOT, "models", f"{m}.onnx"), ["--calib", train, "--calib-samples", "1000"]))
    if not a.no_real:
        for name, model, inp in REAL:
            x = np.load(os.path.join(a.shared, "models", inp))
            calib = os.path.join(d, f"{name}_calib.npy")
            np.save(calib, x[0::2])
            jobs.append((name, os.path.join(a.shared, "models", model), ["--calib", calib]))
    print("| model | minmax s | auto s | auto / minmax | activations | model runs | search s | of it candidates s | node evaluations vs full re-runs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, model, extra in jobs:
        mm = quantize(a.quantkit, model, extra, "minmax", os.path.join(d, "mm.onnx"))
        au = quantize(a.quantkit, model, extra, "auto", os.path.join(d, "au.onnx"))
        r = au["auto"]
        t0, t1 = mm["calibration_seconds"], au["calibration_seconds"]
        frac = r["nodes_run"] / max(r["nodes_full"], 1)
        print(f"| {name} | {t0:.2f} | {t1:.2f} | {t1 / t0:.1f}× | {len(r['choices'])} | {r['model_runs']} | "
              f"{r['seconds']:.2f} | {r['candidate_seconds']:.2f} | {100 * frac:.0f} % |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
