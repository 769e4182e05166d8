#!/usr/bin/env python3
"""Calibration methods side by side (issue 18): int8 change against float for minmax,
percentile=99.99, mse, entropy and auto on the zoo (bench/zoo_ptq.py: first 1,000 TRAIN
images for calibration, the full 10k TEST split for evaluation, int8 on the integer engine)
and on the real models of ../shared/models (bench/real_models.py: calibration on every
other sample, accuracy on all and on the held-out half, cosine of the score vs ONNX
Runtime's float output).

Usage:
    cargo build --release -p quantkit-cli
    python3 bench/range_methods.py [--quantkit target/release/quantkit] [--methods minmax mse ...]
"""
import argparse, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
METHODS = ["minmax", "percentile=99.99", "mse", "entropy", "auto"]


def run(script, quantkit, method, extra):
    out = subprocess.run([sys.executable, os.path.join(HERE, script), "--quantkit", quantkit,
                          "--method", method, "--json"] + extra,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantkit", default=os.path.join(ROOT, "target/release/quantkit"))
    ap.add_argument("--methods", nargs="*", default=METHODS)
    ap.add_argument("--zoo", nargs="*", default=["lenet", "resnet8", "mobilenet", "mlp"])
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument(
        "--shared",
        default=os.environ.get("QUANTKIT_SHARED", os.path.join(ROOT, "..", "shared")),
        help="the shared folder (models/); default $QUANTKIT_SHARED, else ../shared",
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = {}
    for m in a.methods:
        res[m] = {"zoo": run("zoo_ptq.py", a.quantkit, m, ["--models"] + a.zoo)}
        if not a.no_real:
            res[m]["real"] = run("real_models.py", a.quantkit, m, ["--shared", a.shared])
        print(f"done {m}", file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(res, indent=2))
        return
    head = "| model | " + " | ".join(a.methods) + " |"
    print("Zoo: int8 top-1 change vs float in points (top-1 agreement with float), full 10k test split")
    print(head)
    print("|" + "---|" * (len(a.methods) + 1))
    for i, z in enumerate(a.zoo):
        cells = []
        for m in a.methods:
            r = res[m]["zoo"][i]
            cells.append(f"{100 * (r['int8'] - r['float']):+.2f} ({100 * r['agreement']:.2f} %)")
        f = res[a.methods[0]]["zoo"][i]["float"]
        print(f"| {z} ({100 * f:.2f} %) | " + " | ".join(cells) + " |")
    if a.no_real:
        return
    print()
    print("Real models: int8 accuracy all / held-out half (float), score cosine vs float")
    print(head)
    print("|" + "---|" * (len(a.methods) + 1))
    for i, r0 in enumerate(res[a.methods[0]]["real"]):
        cells = []
        for m in a.methods:
            r = res[m]["real"][i]
            cells.append(f"{r['int8_accuracy']:.3f} / {r['int8_accuracy_heldout']:.3f}, cos {r['cosine']:.5f}")
        print(f"| {r0['model']} ({r0['float_accuracy']:.3f}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
