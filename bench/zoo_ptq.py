#!/usr/bin/env python3
"""Post-training static quantization of the whole zoo, scored on the full Fashion-MNIST test set.

For each model in models/: `quantkit quantize` (per-channel int8 weights, u8 activations,
--method, calibrated on the first --calib-samples images of the TRAIN split, so calibration
never sees a test image), then `quantkit eval INT8 --reference FLOAT` on the 10k test images:
float and int8 metric, top-1 agreement, output cosine and SQNR, file sizes.

Usage:
    cargo build --release -p quantkit-cli
    python3 bench/zoo_ptq.py [--quantkit target/release/quantkit] [--data /usr/share/datasets/fashion-mnist]
"""
import argparse, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ZOO = ["lenet", "resnet8", "mobilenet", "mlp", "autoencoder"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantkit", default=os.path.join(ROOT, "target/release/quantkit"))
    ap.add_argument("--data", default=os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--method", default="minmax")
    ap.add_argument("--calib-samples", type=int, default=1000)
    ap.add_argument("--models", nargs="*", default=ZOO)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    train = os.path.join(a.data, "train-images-idx3-ubyte.gz")
    if not os.path.exists(train):
        sys.exit(f"{train} not found (apt-get install dataset-fashion-mnist, or --data DIR)")
    d = tempfile.mkdtemp()
    rows = []
    for m in a.models:
        fmodel = os.path.join(ROOT, "models", f"{m}.onnx")
        qmodel = os.path.join(d, f"{m}_int8.onnx")
        q = json.loads(subprocess.run(
            [a.quantkit, "quantize", fmodel, "--calib", train, "--calib-samples", str(a.calib_samples),
             "--method", a.method, "-o", qmodel, "--json"], check=True, capture_output=True, text=True).stdout)
        e = json.loads(subprocess.run(
            [a.quantkit, "eval", qmodel, "--data", a.data, "--reference", fmodel, "--json"],
            check=True, capture_output=True, text=True).stdout)
        rows.append({
            "model": m, "metric": e["metric"], "float": e["reference_value"], "int8": e["value"],
            "agreement": e.get("agreement"), "cosine": e["cosine"], "sqnr_db": e["sqnr_db"],
            "samples": e["samples"], "runner": e.get("runner"),
            "float_bytes": os.path.getsize(fmodel), "int8_bytes": os.path.getsize(qmodel),
        })
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"method {a.method}, calibration: first {a.calib_samples} train images; eval: full test split")
    print(f"{'model':<12} {'metric':<9} {'float':>9} {'int8':>9} {'change':>9} {'agree':>7} {'cosine':>8} "
          f"{'SQNR dB':>8} {'size':>7}")
    for r in rows:
        if r["metric"] == "accuracy":
            f, q = 100 * r["float"], 100 * r["int8"]
            change = f"{q - f:+.2f} pt"
            fs, qs = f"{f:.2f}%", f"{q:.2f}%"
        else:
            f, q = r["float"], r["int8"]
            change = f"{100 * (q / f - 1):+.1f}%"
            fs, qs = f"{f:.6f}", f"{q:.6f}"
        agree = "-" if r["agreement"] is None else f"{100 * r['agreement']:.2f}%"
        print(f"{r['model']:<12} {r['metric']:<9} {fs:>9} {qs:>9} {change:>9} {agree:>7} {r['cosine']:>8.5f} "
              f"{r['sqnr_db']:>8.1f} {100 * r['int8_bytes'] / r['float_bytes']:>6.1f}%")
    print(f"int8 runner: {rows[0]['runner']}")


if __name__ == "__main__":
    main()
