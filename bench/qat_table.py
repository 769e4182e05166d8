#!/usr/bin/env python3
"""The QAT acceptance table of issue 17: `quantkit qat` on zoo models at several bit widths,
scored on the full Fashion-MNIST test set, each written file also run in ONNX Runtime.

For each run: `quantkit qat models/MODEL.onnx --data DATA --weight-bits W --activation-bits A
--epochs E --limit L --lr LR [--lsq] -o OUT --log OUT.csv --json` (float / PTQ / QAT
exact-mode / engine accuracy, engine = exact-mode agreement, time), then ONNX Runtime (one
thread, CPU provider, all optimisations) and `quantkit run --engine int8` on the 10,000 test
images: ONNX Runtime's top-1 agreement with the engine. One JSON line per run on stdout
(and appended to --results), with the load average before and after.

Usage:
    cargo build --release -p quantkit-cli
    python3 bench/qat_table.py --runs lenet:8:8:1:20000 lenet:4:4:3:20000:lsq ... \\
        [--quantkit target/release/quantkit] [--data /usr/share/datasets/fashion-mnist] \\
        [--out DIR] [--results FILE.jsonl] [--lr 1e-4]
A run is MODEL:WBITS:ABITS:EPOCHS:LIMIT[:lsq][:lr=X][:obs=N][:last][:fl8][:distill][:val=N][:best]
[:aug=SPEC][:--opt[=V]]... (last: --eval-last; fl8: --first-last-8bit; distill: --distill, no
labels in training unless --ce-weight=W; val=N: --validation N, N training images held out;
best: --keep-best, the epoch kept by that validation split; aug=SPEC: --augment SPEC with `+`
for `,`, e.g. aug=flip+shift=2; --opt[=V]: any other `quantkit qat` option, passed as is).
"""
import argparse, gzip, json, os, subprocess, sys, time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load_test(data):
    with gzip.open(os.path.join(data, "t10k-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(data, "t10k-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    # quantkit-data's IDX reader: pixel / 255 as f32, NCHW.
    return (x.astype(np.float32) / np.float32(255.0)), y


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def ort_top1(model, x):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    out = [s.run(None, {name: x[i:i + 1000]})[0] for i in range(0, len(x), 1000)]
    return np.concatenate(out).argmax(1)


def engine_top1(qk, model, xfile, tmp):
    subprocess.run([qk, "run", model, "--input", f"input={xfile}", "-o", tmp, "--engine", "int8"],
                   check=True, capture_output=True)
    outs = [f for f in os.listdir(tmp) if f.endswith(".npy")]
    assert len(outs) == 1, outs
    return np.load(os.path.join(tmp, outs[0])).argmax(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantkit", default=os.path.join(ROOT, "target/release/quantkit"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--out", default="/tmp/qat_table")
    ap.add_argument("--results", default=None)
    ap.add_argument("--lr", default="1e-4")
    ap.add_argument("--runs", nargs="+", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    x, y = load_test(a.data)
    xfile = os.path.join(a.out, "test_x.npy")
    np.save(xfile, x)
    for spec in a.runs:
        parts = spec.split(":")
        m, w, act, ep, lim = parts[:5]
        extra = parts[5:]
        lr = a.lr
        cmd = [a.quantkit, "qat", os.path.join(ROOT, "models", f"{m}.onnx"), "--data", a.data,
               "--weight-bits", w, "--activation-bits", act, "--epochs", ep, "--limit", lim]
        for e in extra:
            if e == "lsq":
                cmd.append("--lsq")
            elif e.startswith("lr="):
                lr = e[3:]
            elif e == "last":
                cmd.append("--eval-last")
            elif e == "distill":
                cmd.append("--distill")
            elif e == "fl8":
                cmd.append("--first-last-8bit")
            elif e.startswith("obs="):
                cmd += ["--observer-steps", e[4:]]
            elif e.startswith("val="):
                cmd += ["--validation", e[4:]]
            elif e == "best":
                cmd.append("--keep-best")
            elif e.startswith("aug="):
                cmd += ["--augment", e[4:].replace("+", ",")]
            elif e.startswith("--"):
                # Any other `quantkit qat` option, as --name or --name=value.
                cmd += e.split("=", 1)
            else:
                sys.exit(f"unknown option {e} in {spec}")
        tag = spec.replace(":", "_").replace("=", "").replace("+", "-")
        out = os.path.join(a.out, f"{tag}.onnx")
        cmd += ["--lr", lr, "-o", out, "--log", out + ".csv", "--json"]
        l0, t0 = load(), time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        if r.returncode != 0:
            row = {"run": spec, "error": r.stderr.strip()[-2000:], "load_before": l0}
        else:
            row = json.loads(r.stdout.strip().splitlines()[-1])
            row.update({"run": spec, "cmd": " ".join(cmd[1:]).replace(ROOT + "/", ""),
                        "wall_s": wall, "load_before": l0, "load_after": load(),
                        "train_fraction": min(int(lim), 60000) / 60000,
                        "rayon_threads": os.environ.get("RAYON_NUM_THREADS")})
            tmp = os.path.join(a.out, f"{tag}.engine")
            os.makedirs(tmp, exist_ok=True)
            e = engine_top1(a.quantkit, out, xfile, tmp)
            try:
                o = ort_top1(out, x)
                row["ort_engine_agreement"] = float((o == e).mean())
                row["ort_accuracy"] = float((o == y).mean())
            except Exception as ex:  # report, never hide
                row["ort_error"] = str(ex)[:500]
            row["engine_accuracy_run"] = float((e == y).mean())
        line = json.dumps(row)
        print(line, flush=True)
        if a.results:
            with open(a.results, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
