#!/usr/bin/env python3
"""quantkit int8 vs ONNX Runtime int8 (and both f32), side by side in one run.

Models: the committed LeNet (models/lenet.onnx) and the 4-stage 3x3-conv network of
bench/float_conv_net.py (channels 32-64-128-256, 64x64x3 input) with a symbolic batch.
Each float model is quantized once by `quantkit quantize` (QDQ, per-channel int8 weights,
u8 activations, min/max); ONNX Runtime and quantkit then run the SAME QDQ file (ONNX
Runtime fuses the Q/DQ pairs into its int8 kernels, quantkit compiles them into its
integer engine). Batch 1 and 64, one thread for everyone unless --threads (e.g. `--threads 1,2`:
each model and batch at every count, ONNX Runtime with intra_op_num_threads and quantkit with
`--threads` and RAYON_NUM_THREADS set to it, side by side). ONNX Runtime: best of at least
--repeat runs filling at least --seconds after a warm-up; quantkit: `quantkit bench FLOAT
--int8 QDQ --json` (best of runs filling --seconds after a warm-up).

With --dynamic the models are also quantized by `quantkit quantize --dynamic` (int8 weights,
activations quantized per batch at run time: DynamicQuantizeLinear -> ConvInteger/MatMulInteger
-> Cast -> Mul -> Add, as ONNX Runtime's own dynamic quantizer writes them) and those rows
are added with mode "dynamic" (target: dynamic Conv faster than f32 on the convnet).

Usage:
    cargo build --release -p quantkit-cli
    python3 bench/int8_vs_ort.py [--quantkit target/release/quantkit] [--repeat 10] [--threads 1,2]
                                 [--batches 1,64]
"""
import argparse, json, os, subprocess, sys, tempfile, time

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def build_convnet(path):
    """The float_conv_net.py network with a symbolic batch dimension."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    cin, x = 3, "x"
    for i, cout in enumerate([32, 64, 128, 256]):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                      kernel_shape=[3, 3], name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
        if i < 3:
            nodes.append(helper.make_node("MaxPool", [x], [f"p{i}"], kernel_shape=[2, 2],
                                          strides=[2, 2], name=f"pool{i}"))
            x = f"p{i}"
        cin = cout
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    g = helper.make_graph(
        nodes, "conv4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 256, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def ort_best(model, x, repeat, seconds, threads=1):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    s.run(None, {name: x})
    best = float("inf")
    # At least `repeat` runs and at least `seconds` of runs: the same budget quantkit's
    # best-of gets, so neither side's minimum comes from fewer samples.
    start, n = time.perf_counter(), 0
    while n < repeat or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        s.run(None, {name: x})
        best = min(best, time.perf_counter() - t)
        n += 1
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantkit", default=os.path.join(ROOT, "target/release/quantkit"))
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dynamic", action="store_true", help="also measure --dynamic quantization")
    ap.add_argument("--threads", default="1", help="comma-separated thread counts (default 1)")
    ap.add_argument("--batches", default="1,64", help="comma-separated batch sizes (default 1,64)")
    a = ap.parse_args()
    qk = a.quantkit
    d = tempfile.mkdtemp()
    rng = np.random.default_rng(1)

    conv = os.path.join(d, "conv4.onnx")
    build_convnet(conv)
    calib = os.path.join(d, "conv4_calib.npy")
    np.save(calib, rng.uniform(0, 1, (32, 3, 64, 64)).astype(np.float32))
    models = [
        ("lenet", os.path.join(ROOT, "models/lenet.onnx"), os.path.join(ROOT, "data/fashion-mnist-sample"),
         (1, 28, 28)),
        ("convnet", conv, calib, (3, 64, 64)),
    ]
    rows = []
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    modes = ["static", "dynamic"] if a.dynamic else ["static"]
    thread_counts = [int(t) for t in a.threads.split(",")]
    batches = [int(b) for b in a.batches.split(",")]
    for (name, fmodel, cdata, sample), mode in [(m, mode) for m in models for mode in modes]:
        qmodel = os.path.join(d, f"{name}_{mode}.onnx")
        extra = ["--dynamic"] if mode == "dynamic" else []
        subprocess.run([qk, "quantize", fmodel, "--calib", cdata, "--calib-samples", "256", "-o", qmodel,
                        "--json"] + extra, check=True, capture_output=True, env=env)
        for batch, threads in [(b, t) for b in batches for t in thread_counts]:
            x = rng.uniform(0, 1, (batch,) + sample).astype(np.float32)
            ort_f32 = ort_best(fmodel, x, a.repeat, a.seconds, threads)
            ort_i8 = ort_best(qmodel, x, a.repeat, a.seconds, threads)
            tenv = dict(os.environ, RAYON_NUM_THREADS=str(threads))
            out = subprocess.run([qk, "bench", fmodel, "--int8", qmodel, "--batch", str(batch), "--threads",
                                  str(threads), "--seconds", str(a.seconds), "--json"],
                                 check=True, capture_output=True, text=True, env=tenv).stdout
            v = json.loads(out)
            rows.append({
                "model": name, "mode": mode, "batch": batch, "threads": threads,
                "ort_f32_ms": ort_f32, "ort_int8_ms": ort_i8,
                "quantkit_f32_ms": v["float"]["best_ms"], "quantkit_int8_ms": v["int8"]["best_ms"],
                "quantkit_int8_runner": v["int8"]["runner"],
                "quantkit_int8_vs_ort_int8": ort_i8 / v["int8"]["best_ms"],
                "quantkit_int8_vs_quantkit_f32": v["float"]["best_ms"] / v["int8"]["best_ms"],
            })
    if a.json:
        print(json.dumps({"onnxruntime": ort.__version__, "threads": thread_counts, "rows": rows,
                          "loadavg": os.getloadavg()}, indent=2))
        return
    print(f"onnxruntime {ort.__version__}, threads {a.threads}, best latency in ms, "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    print(f"{'model':<8} {'mode':<8} {'batch':>5} {'thr':>3} {'ORT f32':>9} {'ORT int8':>9} {'qk f32':>9} "
          f"{'qk int8':>9} {'qk8/ORT8':>9} {'qk8/qk32':>9}")
    for r in rows:
        print(f"{r['model']:<8} {r['mode']:<8} {r['batch']:>5} {r['threads']:>3} {r['ort_f32_ms']:>9.3f} "
              f"{r['ort_int8_ms']:>9.3f} "
              f"{r['quantkit_f32_ms']:>9.3f} {r['quantkit_int8_ms']:>9.3f} "
              f"{r['quantkit_int8_vs_ort_int8']:>8.2f}x {r['quantkit_int8_vs_quantkit_f32']:>8.2f}x")
    print(f"quantkit int8 runner: {rows[0]['quantkit_int8_runner']}")
    print("targets: static qk8/ORT8 >= 1.3 on both models and batches; static qk8/qk32 >= 2.5 on the convnet;"
          " dynamic qk8/qk32 > 1 on the convnet")


if __name__ == "__main__":
    sys.exit(main())
