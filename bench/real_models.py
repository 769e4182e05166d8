#!/usr/bin/env python3
"""Post-training quantization of the real models in ../shared/models (issue 4 acceptance).

For MTCNN R-Net and O-Net (face / non-face crops) and the PP-OCR text-orientation
classifier: `quantkit quantize` (defaults: min/max, per-channel int8 weights, u8
activations) calibrated on HALF of the fixture inputs (every other sample, so both classes
are represented), then `quantkit run --engine int8` (the integer engine) on all inputs. The
float reference is the fixture's ONNX Runtime output. Reported per model, on all samples and
on the held-out half: accuracy of float and int8 against the labels (MTCNN: p(face) > 0.5;
PP-OCR: argmax), cosine of the int8 vs float score vector (MTCNN: the face-probability
column; PP-OCR: the softmax output), the largest |p - p_ref|, and the file sizes.

Usage:
    cargo build --release -p quantkit-cli
    python3 bench/real_models.py [--quantkit target/release/quantkit] [--shared ../shared] [--json]
"""
import argparse, json, os, subprocess, sys, tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = [
    # name, model, input, labels, reference outputs, score output index, score column
    ("mtcnn-rnet", "mtcnn/rnet.onnx", "mtcnn/rnet_input.npy", "mtcnn/labels.npy",
     ["mtcnn/rnet_ref_output_0.npy", "mtcnn/rnet_ref_output_1.npy"], 1, 1),
    ("mtcnn-onet", "mtcnn/onet.onnx", "mtcnn/onet_input.npy", "mtcnn/labels.npy",
     ["mtcnn/onet_ref_output_0.npy", "mtcnn/onet_ref_output_1.npy", "mtcnn/onet_ref_output_2.npy"], 2, 1),
    ("ppocr-cls", "ppocr-cls/ch_ppocr_mobile_v2.0_cls_infer.onnx", "ppocr-cls/cls_input.npy",
     "ppocr-cls/cls_labels.npy", ["ppocr-cls/cls_ref_output.npy"], 0, None),
]


def cosine(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantkit", default=os.path.join(ROOT, "target/release/quantkit"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--method", default=None, help="calibration method (default: quantize's)")
    a = ap.parse_args()
    base = os.path.join(a.shared, "models")
    d = tempfile.mkdtemp()
    rows = []
    for name, model, inp, lab, refs, out_i, col in MODELS:
        model, inp = os.path.join(base, model), os.path.join(base, inp)
        x = np.load(inp)
        y = np.load(os.path.join(base, lab))
        ref = [np.load(os.path.join(base, r)) for r in refs]
        calib = os.path.join(d, f"{name}_calib.npy")
        np.save(calib, x[0::2])
        q = os.path.join(d, f"{name}.int8.onnx")
        summary = json.loads(subprocess.run(
            [a.quantkit, "quantize", model, "--calib", calib, "-o", q, "--json"]
            + (["--method", a.method] if a.method else []),
            check=True, capture_output=True, text=True).stdout)
        out_dir = os.path.join(d, f"{name}_out")
        run = json.loads(subprocess.run(
            [a.quantkit, "run", q, "--input", inp, "--output-dir", out_dir, "--engine", "int8", "--json"],
            check=True, capture_output=True, text=True).stdout)
        outs = [np.load(o["file"]) for o in run["outputs"]]
        got, want = outs[out_i], ref[out_i]
        if col is None:
            pred_q, pred_f = got.argmax(1), want.argmax(1)
            score_q, score_f = got, want
        else:
            score_q, score_f = got[:, col], want[:, col]
            pred_q, pred_f = (score_q > 0.5).astype(int), (score_f > 0.5).astype(int)
        held = np.arange(len(y)) % 2 == 1
        row = {
            "model": name,
            "samples": int(len(y)),
            "float_accuracy": float((pred_f == y).mean()),
            "int8_accuracy": float((pred_q == y).mean()),
            "float_accuracy_heldout": float((pred_f[held] == y[held]).mean()),
            "int8_accuracy_heldout": float((pred_q[held] == y[held]).mean()),
            "cosine": cosine(score_q, score_f),
            "cosine_heldout": cosine(score_q[held], score_f[held]),
            "max_abs_diff": float(np.abs(score_q - score_f).max()),
            "other_outputs_cosine": [cosine(o, r) for i, (o, r) in enumerate(zip(outs, ref)) if i != out_i],
            "size_float": os.path.getsize(model),
            "size_int8": os.path.getsize(q),
            "nodes_quantized": summary.get("nodes_quantized"),
        }
        rows.append(row)
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'model':<11} {'n':>4} {'float acc':>9} {'int8 acc':>9} {'held-out f/q':>13} {'cosine':>8} "
          f"{'max|dp|':>8} {'other cos':>10} {'size':>6}")
    for r in rows:
        oc = ",".join(f"{c:.4f}" for c in r["other_outputs_cosine"]) or "-"
        print(f"{r['model']:<11} {r['samples']:>4} {r['float_accuracy']:>9.3f} {r['int8_accuracy']:>9.3f} "
              f"{r['float_accuracy_heldout']:>6.3f}/{r['int8_accuracy_heldout']:<6.3f} {r['cosine']:>8.5f} "
              f"{r['max_abs_diff']:>8.4f} {oc:>10} {100 * r['size_int8'] / r['size_float']:>5.1f}%")
    print("targets: MTCNN accuracy unchanged and face-probability cosine >= 0.995; PP-OCR accuracy >= float - 1 pt")


if __name__ == "__main__":
    sys.exit(main())
