#!/usr/bin/env python3
"""Where do quantkit's integer engine, ONNX Runtime and the literal QDQ graph part ways?

Runs one QDQ model (e.g. `quantkit quantize` output) on one input `.npy` three or four ways,
with the codes of every QuantizeLinear made a graph output (the engine's and ONNX Runtime's
final outputs are unchanged by that; the script checks it):

- `engine`: `quantkit run --engine int8` (the integer engine);
- `ort`: ONNX Runtime with its default optimizations (it fuses DQ → op → Q into QLinearConv,
  QLinearMatMul, QLinearSoftmax, ... with its own arithmetic);
- `ort_noopt`: ONNX Runtime with `ORT_DISABLE_ALL`, i.e. the QDQ graph literally: every
  DequantizeLinear, float operator and QuantizeLinear on its own;
- `ref` (with `--float-executor`): `quantkit run` without `--engine`, quantkit's float
  executor on the same QDQ graph (slow on big models).

Tables:

1. **Whole run**: per quantized tensor in graph order, the fraction of codes where each run
   differs from the engine, and the largest difference in steps. The first rows that are
   not 0 are where the runs part; what follows is how the difference grows.
2. **One step at a time** (`--local`): every QuantizeLinear recomputed by ONNX Runtime (both
   modes; and quantkit's float executor with `--float-executor`) from the *engine's* codes of the quantized tensors it reads, so each row is one
   step's own disagreement, nothing inherited: the number of codes that differ from the
   engine's. Rows with no difference in either mode are left out.
3. **Ties** (`--local --ties`): at each Conv/MatMul code where the engine and `ort_noopt`
   differ, which of the two rounds as the exact value (the f32 DequantizeLinear outputs
   multiplied and summed in f64, divided by the output scale) and how far that value lies
   from a rounding tie, in steps.

With `--float MODEL.onnx --ctc`, also the decoded-line and frame agreement with the float
model (greedy CTC over the last axis, blank 0), for every run: PP-OCR text recognizers.

Example (PP-OCRv4's recognizer, BENCHMARKS.md 2026-11-27 "engine vs ONNX Runtime"):

    python3 bench/qdq_trace.py q.onnx eval.npy --quantkit target/release/quantkit \\
        --float ch_PP-OCRv4_rec_infer.onnx --ctc --local --ties --float-executor \\
        --unfuse Softmax
"""

import argparse
import os
import subprocess
import shutil
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort


def session(path, optimize):
    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def run_ort(path, feed, optimize):
    s = session(path, optimize)
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(None, feed)))


def run_quantkit(quantkit, path, input_name, x_path, engine, work):
    out = os.path.join(work, "engine" if engine else "ref")
    cmd = [quantkit, "run", path, "-i", f"{input_name}={x_path}", "-o", out]
    if engine:
        cmd += ["--engine", "int8"]
    subprocess.run(cmd, check=True, capture_output=True)
    return {f[:-4]: np.load(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".npy")}


def ctc(o):
    out = []
    for r in o.argmax(-1):
        s, prev = [], -1
        for t in r:
            if t != prev and t != 0:
                s.append(int(t))
            prev = t
        out.append(tuple(s))
    return out


def main():
    work = tempfile.mkdtemp(prefix="qdq_trace_")
    try:
        trace(work)
    finally:
        shutil.rmtree(work)


def trace(work):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="QDQ ONNX model")
    ap.add_argument("input", help=".npy for the model's single input")
    ap.add_argument("--quantkit", default="target/release/quantkit")
    ap.add_argument("--float", help="float model, for agreement figures")
    ap.add_argument("--ctc", action="store_true", help="decoded-line agreement (greedy CTC)")
    ap.add_argument("--local", action="store_true", help="one step at a time (table 2)")
    ap.add_argument("--float-executor", action="store_true", help="also quantkit's float executor")
    ap.add_argument("--unfuse", action="append", default=[], metavar="OP",
                    help="also run `ort_no_OP`: ONNX Runtime optimized as usual, but each OP's "
                         "float output made a graph output too, which keeps ONNX Runtime from "
                         "fusing DQ -> OP -> Q (e.g. --unfuse Softmax: no QLinearSoftmax)")
    ap.add_argument("--ties", action="store_true",
                    help="with --local: for Conv/MatMul codes where the engine and ort_noopt "
                         "differ, which one rounds as the exact value (f64 from the f32 DQ "
                         "outputs), and how far that value is from a rounding tie")
    a = ap.parse_args()

    m = onnx.load(a.model)
    g = m.graph
    if len(g.input) != 1:
        sys.exit(f"{a.model}: {len(g.input)} inputs; this script feeds one")
    input_name = g.input[0].name
    final = [o.name for o in g.output]
    qouts = [n.output[0] for n in g.node if n.op_type == "QuantizeLinear"]
    producer = {o: n for n in g.node for o in n.output}
    x = np.load(a.input)
    feed = {input_name: x}

    traced = os.path.join(work, "traced.onnx")
    have = set(final)
    for t in qouts:
        if t not in have:
            g.output.append(onnx.ValueInfoProto(name=t))
    onnx.save(m, traced)
    x_path = os.path.join(work, "x.npy")
    np.save(x_path, x)

    runs = {"engine": run_quantkit(a.quantkit, traced, input_name, x_path, True, work)}
    runs["ort"] = run_ort(traced, feed, True)
    runs["ort_noopt"] = run_ort(traced, feed, False)
    for op in a.unfuse:
        um = onnx.load(traced)
        outs = {o.name for o in um.graph.output}
        for n in um.graph.node:
            if n.op_type == op and n.output[0] not in outs:
                um.graph.output.append(onnx.ValueInfoProto(name=n.output[0]))
        path = os.path.join(work, f"no_{op}.onnx")
        onnx.save(um, path)
        runs[f"ort_no_{op}"] = run_ort(path, feed, True)
    if a.float_executor:
        runs["ref"] = run_quantkit(a.quantkit, traced, input_name, x_path, False, work)
    # The extra outputs must not change what the runs compute.
    plain_engine = run_quantkit(a.quantkit, a.model, input_name, x_path, True,
                                tempfile.mkdtemp(dir=work))
    plain_ort = run_ort(a.model, feed, True)
    for o in final:
        same_e = np.array_equal(plain_engine[o], runs["engine"][o])
        same_o = np.array_equal(plain_ort[o], runs["ort"][o])
        print(f"output {o}: traced = plain model: engine {same_e}, ort {same_o}")

    if a.float:
        f = run_ort(a.float, feed, True)[final[0]]
        print(f"\nagreement with float ({final[0]}):")
        for k, r in runs.items():
            o = r[final[0]]
            line = ""
            if a.ctc:
                line = f"lines {np.mean([u == v for u, v in zip(ctc(f), ctc(o))]):.3f}, "
            print(f"  {k:10s} {line}frames {(f.argmax(-1) == o.argmax(-1)).mean():.4f}")
        if a.ctc:
            print("pairwise decoded-line agreement:")
            ks = list(runs)
            for i, p in enumerate(ks):
                for q in ks[i + 1:]:
                    dp, dq = ctc(runs[p][final[0]]), ctc(runs[q][final[0]])
                    print(f"  {p:10s} {q:10s} {np.mean([u == v for u, v in zip(dp, dq)]):.3f}")

    print("\n1. whole run: fraction of codes differing from the engine, max |difference| (steps)")
    others = [k for k in runs if k != "engine"]
    print(f"{'tensor':40s} {'producer':18s} " + " ".join(f"{k:>20s}" for k in others))
    for t in qouts:
        e = runs["engine"][t].astype(np.int32)
        cells = []
        for k in others:
            d = np.abs(runs[k][t].astype(np.int32) - e)
            cells.append(f"{(d > 0).mean():12.2e} {d.max():6d} ")
        p = producer.get(producer[t].input[0])
        print(f"{t:40s} {p.op_type if p else '-':18s} " + " ".join(cells))

    if a.local:
        # Every reader of a Q output reads a fresh graph input fed with the engine's codes.
        lm = onnx.load(a.model)
        lg = lm.graph
        qset = set(qouts)
        fed = []
        for n in lg.node:
            for i, v in enumerate(n.input):
                if v in qset:
                    n.input[i] = v + "__engine"
                    if v not in fed:
                        fed.append(v)
        for v in fed:
            c = runs["engine"][v]
            lg.input.append(onnx.helper.make_tensor_value_info(
                v + "__engine", onnx.helper.np_dtype_to_tensor_dtype(c.dtype), list(c.shape)))
        have = {o.name for o in lg.output}
        for t in qouts:
            if t not in have:
                lg.output.append(onnx.ValueInfoProto(name=t))
        local = os.path.join(work, "local.onnx")
        onnx.save(lm, local)
        lfeed = dict(feed)
        lfeed.update({v + "__engine": runs["engine"][v] for v in fed})
        lref = run_ort(local, lfeed, False)
        lruns = {"ort_noopt": lref, "ort": run_ort(local, lfeed, True)}
        if a.float_executor:
            npz = os.path.join(work, "local.npz")
            np.savez(npz, **lfeed)
            out = os.path.join(work, "local_ref")
            subprocess.run([a.quantkit, "run", local, "-i", npz, "-o", out], check=True,
                           capture_output=True)
            lruns["ref"] = {t: np.load(os.path.join(out, t + ".npy")) for t in qouts}
        print("\n2. one step at a time: codes differing from the engine, from the engine's inputs")
        print(f"{'tensor':40s} {'producer':18s} {'elements':>10s} "
              + " ".join(f"{k:>10s}" for k in lruns))
        for t in qouts:
            e = runs["engine"][t].astype(np.int32)
            ds = [np.abs(r[t].astype(np.int32) - e) for r in lruns.values()]
            if any(d.any() for d in ds):
                p = producer.get(producer[t].input[0])
                worst = max(d.max() for d in ds)
                print(f"{t:40s} {p.op_type if p else '-':18s} {e.size:10d} "
                      + " ".join(f"{int((d > 0).sum()):10d}" for d in ds)
                      + ("" if worst <= 1 else f"  (max {worst})"))
        if a.ties:
            ties(onnx.load(a.model), runs, lref)


def dq_value(name, producer, init, codes_of):
    """The f32 output of DequantizeLinear `name`, widened to f64."""
    n = producer[name]
    c = init[n.input[0]] if n.input[0] in init else codes_of(n.input[0])
    s = init[n.input[1]].astype(np.float64)
    z = init[n.input[2]].astype(np.float64) if len(n.input) > 2 else 0.0
    axis = next((at.i for at in n.attribute if at.name == "axis"), 1)
    if s.ndim == 1:
        sh = [1] * c.ndim
        sh[axis] = -1
        s = s.reshape(sh)
        z = np.reshape(z, sh) if np.ndim(z) else z
    return ((c.astype(np.float64) - z) * s).astype(np.float32).astype(np.float64)


def exact_at(node, x, w, b, i):
    """Conv (2-D, NCHW) or MatMul output element `i` in f64."""
    if node.op_type == "MatMul":
        wb = w if w.ndim == 2 else w[i[:-2]]
        return x[i[:-1]] @ wb[:, i[-1]] + (0.0 if b is None else b[i[-1]])
    at = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    n, c, h, wi = i
    group = at.get("group", 1)
    st, p, d = at.get("strides", [1, 1]), at.get("pads", [0, 0, 0, 0]), at.get("dilations", [1, 1])
    m, cg, kh, kw = w.shape
    gi = c // (m // group)
    xp = np.pad(x[n], ((0, 0), (p[0], p[2]), (p[1], p[3])))
    patch = xp[gi * cg:(gi + 1) * cg, h * st[0]:h * st[0] + (kh - 1) * d[0] + 1:d[0],
               wi * st[1]:wi * st[1] + (kw - 1) * d[1] + 1:d[1]]
    return (patch * w[c]).sum() + (0.0 if b is None else b.reshape(-1)[c])


def ties(model, runs, lref):
    from onnx import numpy_helper
    g = model.graph
    init = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    closer = {"engine": [], "ort_noopt": [], "neither": []}
    for q in g.node:
        if q.op_type != "QuantizeLinear":
            continue
        t, node = q.output[0], producer.get(q.input[0])
        if node is None or node.op_type not in ("Conv", "MatMul"):
            continue
        e, r = runs["engine"][t].astype(np.int64), lref[t].astype(np.int64)
        idx = np.argwhere(e != r)
        if len(idx) == 0:
            continue
        sy, zy = float(init[q.input[1]]), int(init[q.input[2]])
        x, w = (dq_value(v, producer, init, lambda c: runs["engine"][c]) for v in node.input[:2])
        b = dq_value(node.input[2], producer, init, None) if len(node.input) > 2 else None
        for i in map(tuple, idx):
            v = exact_at(node, x, w, b, i) / sy
            k = "engine" if e[i] == np.round(v) + zy else "ort_noopt" if r[i] == np.round(v) + zy else "neither"
            closer[k].append(abs(abs(v - np.floor(v)) - 0.5))
    print("\n3. Conv/MatMul codes where engine and ort_noopt differ: which rounds as the exact value")
    for k, d in closer.items():
        if d:
            print(f"  {k:10s} {len(d):6d}  distance of the exact value from a tie: "
                  f"max {max(d):.2e}, median {np.median(d):.2e} steps")
        else:
            print(f"  {k:10s} {0:6d}")


if __name__ == "__main__":
    main()
