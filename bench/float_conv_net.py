#!/usr/bin/env python3
"""Float executor vs ONNX Runtime f32 on a 4-stage 3x3-conv network.

Network: 4 stages of Conv 3x3 (pad 1) + Relu with 32, 64, 128, 256 output channels and a
2x2 MaxPool between stages; input float32 (64, 3, 64, 64). Both runtimes get the same
model file and the same input; each is timed as the best of --repeat runs after one
warm-up, in one process each. quantkit's time is `quantkit run --repeat`'s reported
"run_seconds", the fastest of its runs (model load and .npy I/O excluded).

Usage:
    cargo build --release -p quantkit-cli
    python3 bench/float_conv_net.py [--quantkit target/release/quantkit] [--repeat 5]
"""
import argparse, json, os, subprocess, tempfile, time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def build(path):
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    cin, x = 3, "x"
    for i, cout in enumerate([32, 64, 128, 256]):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1], kernel_shape=[3, 3], name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
        if i < 3:
            nodes.append(helper.make_node("MaxPool", [x], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2], name=f"pool{i}"))
            x = f"p{i}"
        cin = cout
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    g = helper.make_graph(
        nodes, "conv4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 256, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantkit", default="target/release/quantkit")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    d = tempfile.mkdtemp()
    model, inp = os.path.join(d, "conv4.onnx"), os.path.join(d, "x.npy")
    build(model)
    x = np.random.default_rng(1).standard_normal((64, 3, 64, 64)).astype(np.float32)
    np.save(inp, x)

    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0]
    ort_times = []
    for _ in range(a.repeat):
        t = time.perf_counter()
        sess.run(None, {"x": x})
        ort_times.append(time.perf_counter() - t)

    # One process, warm-up included: `--repeat` reports the fastest of its runs, like the
    # ORT loop above (the first run of a process also pays for page faults and threads).
    out = subprocess.run([a.quantkit, "run", model, "--input", f"x={inp}", "--output-dir", d, "--json",
                          "--repeat", str(a.repeat + 1)],
                         check=True, capture_output=True, text=True).stdout
    qk_times = [None, json.loads(out)["run_seconds"]]
    y = np.load(os.path.join(d, "y.npy"))
    err = float(np.abs(y - ref).max() / np.abs(ref).max())
    best_ort, best_qk = min(ort_times), min(qk_times[1:])
    print(f"onnxruntime {ort.__version__} f32: {best_ort * 1e3:.1f} ms (threads: default)")
    print(f"quantkit float executor: {best_qk * 1e3:.1f} ms")
    print(f"ratio quantkit/onnxruntime: {best_qk / best_ort:.2f}  (target <= 2.0)")
    print(f"max |quantkit - onnxruntime| / max |onnxruntime|: {err:.2e}")


if __name__ == "__main__":
    main()
