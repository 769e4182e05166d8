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

With --time (issue 19) it also times every model on the same QDQ file: quantkit int8 (the
integer engine) vs ONNX Runtime int8, and both f32, at 1 and 2 threads, batch 1 and the
model's natural batch (the batch its pipeline runs: MTCNN R-Net 32 and O-Net 16 candidate
boxes per photo, PP-OCR cls 6 = PaddleOCR's `cls_batch_num`), and MTCNN P-Net on the fixture's
96x48 grid image at batch 1 (timing only). Each figure is the best of
runs filling --seconds after a warm-up; ONNX Runtime runs the fixture's real inputs,
`quantkit bench FLOAT --int8 QDQ` a synthetic batch of the same shape (integer kernels do
not depend on the values). With --profile it prints `quantkit bench --profile` (time per
engine step and operator kind, float islands marked) for batch 1, 1 thread.

Usage:
    cargo build --release -p quantkit-cli
    python3 bench/real_models.py [--quantkit target/release/quantkit] [--shared ../shared] [--json]
                                 [--time [--seconds S] [--profile]]
"""
import argparse, json, os, subprocess, sys, tempfile, time

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


# Natural batch per model (see the docstring).
NATURAL_BATCH = {"mtcnn-rnet": 32, "mtcnn-onet": 16, "ppocr-cls": 6, "mtcnn-pnet": 1}


def ort_best(model, x, threads, seconds, repeat=10):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    s.run(None, {name: x})
    best, start, n = float("inf"), time.perf_counter(), 0
    while n < repeat or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        s.run(None, {name: x})
        best = min(best, time.perf_counter() - t)
        n += 1
    return best * 1e3


def fixed_shape_copy(model, sample_shape, out):
    """`model` with input dims 1.. fixed to the fixture's sample shape (PP-OCR cls declares
    H and W symbolic; `quantkit bench` needs a fixed sample shape to synthesise input)."""
    import onnx
    m = onnx.load(model)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    if all(d.HasField("dim_value") and d.dim_value > 0 for d in dims[1:]):
        return model
    for d, n in zip(dims[1:], sample_shape):
        d.ClearField("dim_param")
        d.dim_value = n
    onnx.save(m, out)
    return out


def timing_rows(qk, name, model, q, x, seconds):
    """quantkit int8/f32 and ONNX Runtime int8/f32 on the same QDQ file."""
    rows = []
    bench_model = fixed_shape_copy(model, x.shape[1:], q.replace(".int8.onnx", ".fixed.onnx"))
    for threads in (1, 2):
        for batch in sorted({1, NATURAL_BATCH[name]}):
            xb = np.ascontiguousarray(np.resize(x, (batch,) + x.shape[1:]).astype(np.float32))
            env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
            v = json.loads(subprocess.run(
                [qk, "bench", bench_model, "--int8", q, "--batch", str(batch), "--threads", str(threads),
                 "--seconds", str(seconds), "--json"],
                check=True, capture_output=True, text=True, env=env).stdout)
            r = {"model": name, "threads": threads, "batch": batch,
                 "ort_f32_ms": ort_best(model, xb, threads, seconds),
                 "ort_int8_ms": ort_best(q, xb, threads, seconds),
                 "quantkit_f32_ms": v["float"]["best_ms"], "quantkit_int8_ms": v["int8"]["best_ms"]}
            r["qk8_vs_ort8"] = r["ort_int8_ms"] / r["quantkit_int8_ms"]
            r["qk32_vs_ort32"] = r["ort_f32_ms"] / r["quantkit_f32_ms"]
            rows.append(r)
    return rows


def print_timing(rows):
    import onnxruntime as ort
    print(f"\ntiming: onnxruntime {ort.__version__}, best latency in ms, same QDQ file for both int8 columns")
    print(f"{'model':<11} {'thr':>3} {'batch':>5} {'ORT f32':>9} {'ORT int8':>9} {'qk f32':>9} {'qk int8':>9} "
          f"{'qk8/ORT8':>9} {'qk32/ORT32':>10}")
    for r in rows:
        print(f"{r['model']:<11} {r['threads']:>3} {r['batch']:>5} {r['ort_f32_ms']:>9.3f} {r['ort_int8_ms']:>9.3f} "
              f"{r['quantkit_f32_ms']:>9.3f} {r['quantkit_int8_ms']:>9.3f} {r['qk8_vs_ort8']:>8.2f}x "
              f"{r['qk32_vs_ort32']:>9.2f}x")
    print("target (issue 19): qk8/ORT8 >= 1.3 on MTCNN O-Net/R-Net and the PP-OCR classifier, 1 thread; "
          f"load average {os.getloadavg()[0]:.2f} at the end")


def cosine(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantkit", default=os.path.join(ROOT, "target/release/quantkit"))
    ap.add_argument(
        "--shared",
        default=os.environ.get("QUANTKIT_SHARED", os.path.join(ROOT, "..", "shared")),
        help="the shared folder (models/); default $QUANTKIT_SHARED, else ../shared",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--time", action="store_true", help="also time int8/f32 against ONNX Runtime")
    ap.add_argument("--seconds", type=float, default=1.0, help="timing budget per figure")
    ap.add_argument("--profile", action="store_true", help="print the engine profile (batch 1, 1 thread)")
    ap.add_argument("--method", default=None, help="calibration method (default: quantize's)")
    a = ap.parse_args()
    base = os.path.join(a.shared, "models")
    d = tempfile.mkdtemp()
    rows, times = [], []
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
        if a.time:
            times += timing_rows(a.quantkit, name, model, q, x, a.seconds)
        if a.profile:
            env = dict(os.environ, RAYON_NUM_THREADS="1")
            fixed = fixed_shape_copy(model, x.shape[1:], q.replace(".int8.onnx", ".fixed.onnx"))
            prof = subprocess.run([a.quantkit, "bench", fixed, "--int8", q, "--profile", "--seconds",
                                   str(a.seconds)], check=True, capture_output=True, text=True, env=env).stdout
            if not a.json:
                print(f"--- {name}: quantkit bench --profile (batch 1, 1 thread)\n{prof}")
    if a.time:
        # MTCNN P-Net, timing only: the fixture's 96x48 grid image (one pyramid scale; the
        # pipeline runs P-Net once per scale, so its natural batch is 1), calibrated on it.
        pm, pin = os.path.join(base, "mtcnn/pnet.onnx"), os.path.join(base, "mtcnn/pnet_input.npy")
        q = os.path.join(d, "mtcnn-pnet.int8.onnx")
        subprocess.run([a.quantkit, "quantize", pm, "--calib", pin, "-o", q, "--json"]
                       + (["--method", a.method] if a.method else []), check=True, capture_output=True)
        times += timing_rows(a.quantkit, "mtcnn-pnet", pm, q, np.load(pin), a.seconds)
    if a.json:
        print(json.dumps({"accuracy": rows, "timing": times} if a.time else rows, indent=2))
        return
    print(f"{'model':<11} {'n':>4} {'float acc':>9} {'int8 acc':>9} {'held-out f/q':>13} {'cosine':>8} "
          f"{'max|dp|':>8} {'other cos':>10} {'size':>6}")
    for r in rows:
        oc = ",".join(f"{c:.4f}" for c in r["other_outputs_cosine"]) or "-"
        print(f"{r['model']:<11} {r['samples']:>4} {r['float_accuracy']:>9.3f} {r['int8_accuracy']:>9.3f} "
              f"{r['float_accuracy_heldout']:>6.3f}/{r['int8_accuracy_heldout']:<6.3f} {r['cosine']:>8.5f} "
              f"{r['max_abs_diff']:>8.4f} {oc:>10} {100 * r['size_int8'] / r['size_float']:>5.1f}%")
    print("targets: MTCNN accuracy unchanged and face-probability cosine >= 0.995; PP-OCR accuracy >= float - 1 pt")
    if times:
        print_timing(times)


if __name__ == "__main__":
    sys.exit(main())
