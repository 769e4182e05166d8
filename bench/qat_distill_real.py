#!/usr/bin/env python3
"""Distillation without labels on the shared real models (issue 17): MTCNN O-Net (three
outputs: box regression, landmarks, face softmax) and the PP-OCR direction classifier
(one softmax output), W4A8 by default.

The fixtures in ../shared/models are split in two halves. The training half is the only
data `quantkit qat` sees (calibration and distillation: `--distill`, no labels); the
held-out half is scored. O-Net: even rows train, odd rows are held out (the file holds 100
faces then 100 non-faces, so each half is 50/50). PP-OCR: rows 0-63 train, 64-127 are
held out (the set alternates upright/rotated, so each half is 32/32).

For each model: `quantkit qat MODEL --data train.npy --eval heldout.npy --eval-labels
heldout_labels.npy --distill --weight-bits W --activation-bits A ... -o OUT --json`
(float / PTQ / QAT accuracy on the held-out labels, per-output cosine with the float model
for PTQ and QAT, exact mode = engine agreement), then the written file in ONNX Runtime
(one thread, CPU) and `quantkit run --engine int8` on the held-out half: per output the
cosine of ORT's and the engine's outputs with the float reference outputs shipped with the
fixtures, and ORT's top-1 agreement with the engine on the classifier output. One JSON
line per model on stdout (and appended to --results), with the load average.

Usage:
    cargo build --release -p quantkit-cli
    python3 bench/qat_distill_real.py [--models onet ppocr] [--quantkit target/release/quantkit]
        [--fixtures /work/shared/models] [--out /tmp/qat_real] [--results FILE.jsonl]
        [--wbits 4] [--abits 8] [--epochs 3] [--batch 8] [--lr 1e-4] [--lsq] [--extra "..."]
        [--swap]  # train on the held-out half, score the training half
"""
import argparse, json, os, shlex, subprocess, time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def file_stem(name):
    # `quantkit run` names each output file like this (cmd/run.rs, file_stem).
    return "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "_" for c in name)


def model_setup(name, fx):
    if name == "onet":
        d = os.path.join(fx, "mtcnn")
        x = np.load(os.path.join(d, "onet_input.npy"))
        y = np.load(os.path.join(d, "labels.npy"))
        refs = [np.load(os.path.join(d, f"onet_ref_output_{i}.npy")) for i in range(3)]
        tr, ho = np.arange(0, 200, 2), np.arange(1, 200, 2)
        return os.path.join(d, "onet.onnx"), x, y, refs, tr, ho, 2
    if name == "ppocr":
        d = os.path.join(fx, "ppocr-cls")
        x = np.load(os.path.join(d, "cls_input.npy"))
        y = np.load(os.path.join(d, "cls_labels.npy"))
        refs = [np.load(os.path.join(d, "cls_ref_output.npy"))]
        tr, ho = np.arange(0, 64), np.arange(64, 128)
        return os.path.join(d, "ch_ppocr_mobile_v2.0_cls_infer.onnx"), x, y, refs, tr, ho, 0
    raise SystemExit(f"unknown model {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["onet", "ppocr"])
    ap.add_argument("--quantkit", default=os.path.join(ROOT, "target/release/quantkit"))
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "..", "shared", "models"))
    ap.add_argument("--out", default="/tmp/qat_real")
    ap.add_argument("--results", default=None)
    ap.add_argument("--wbits", default="4")
    ap.add_argument("--abits", default="8")
    ap.add_argument("--epochs", default="3")
    ap.add_argument("--batch", default="8")
    ap.add_argument("--lr", default="1e-4")
    ap.add_argument("--lsq", action="store_true")
    ap.add_argument("--extra", default="", help="more quantkit qat arguments")
    ap.add_argument("--augment", action="store_true",
                    help="add a transformed copy of every training input (O-Net: mirrored "
                         "along x; PP-OCR: rotated by 180 degrees); distillation needs no "
                         "labels, so the teacher labels the copies itself")
    ap.add_argument("--swap", action="store_true",
                    help="train on the held-out half and score the training half: checks a "
                         "recipe that was chosen by its held-out score on data it was not "
                         "chosen on")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for m in a.models:
        path, x, y, refs, tr, ho, cls = model_setup(m, a.fixtures)
        if a.swap:
            tr, ho = ho, tr
        files = {}
        stem = m + ("_swap" if a.swap else "")
        for tag, idx in (("train", tr), ("heldout", ho)):
            files[tag] = os.path.join(a.out, f"{stem}_{tag}.npy")
            xs = x[idx]
            if tag == "train" and a.augment:
                files[tag] = os.path.join(a.out, f"{stem}_{tag}_aug.npy")
                t = xs[:, ::-1] if m == "onet" else xs[:, :, ::-1, ::-1]
                xs = np.concatenate([xs, t])
            np.save(files[tag], np.ascontiguousarray(xs))
        lab = os.path.join(a.out, f"{stem}_heldout_labels.npy")
        np.save(lab, y[ho].astype(np.int64))
        tag = f"{m}_w{a.wbits}a{a.abits}_e{a.epochs}_b{a.batch}_lr{a.lr}" + ("_lsq" if a.lsq else "")
        if a.augment:
            tag += "_aug"
        if a.swap:
            tag += "_swap"
        if a.extra:
            tag += "_" + "".join(c if c.isalnum() else "-" for c in a.extra)
        out = os.path.join(a.out, tag + ".onnx")
        cmd = [a.quantkit, "qat", path, "--data", files["train"], "--eval", files["heldout"],
               "--eval-labels", lab, "--distill", "--weight-bits", a.wbits,
               "--activation-bits", a.abits, "--epochs", a.epochs, "--batch", a.batch,
               "--lr", a.lr, "-o", out, "--log", out + ".csv", "--json"]
        if a.lsq:
            cmd.append("--lsq")
        cmd += shlex.split(a.extra)
        l0, t0 = load(), time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        if r.returncode != 0:
            row = {"model": m, "error": r.stderr.strip()[-2000:], "load_before": l0}
        else:
            row = json.loads(r.stdout.strip().splitlines()[-1])
            row.update({"model": m, "cmd": " ".join(cmd[1:]).replace(ROOT + "/", ""),
                        "wall_s": wall, "load_before": l0, "load_after": load(),
                        "train_samples": len(tr) * (2 if a.augment else 1),
                        "augment": a.augment, "swap": a.swap, "heldout_samples": len(ho),
                        "file_bytes": os.path.getsize(out)})
            import onnx
            g = onnx.load(out).graph
            names = [o.name for o in g.output]
            row["int4_initializers"] = sum(1 for t in g.initializer if t.data_type == onnx.TensorProto.INT4)
            tmp = os.path.join(a.out, tag + ".engine")
            os.makedirs(tmp, exist_ok=True)
            inp = g.input[0].name
            subprocess.run([a.quantkit, "run", out, "--input", f"{inp}={files['heldout']}",
                            "-o", tmp, "--engine", "int8"], check=True, capture_output=True)
            eng = [np.load(os.path.join(tmp, file_stem(n) + ".npy")) for n in names]
            per = []
            try:
                import onnxruntime as ort
                so = ort.SessionOptions()
                so.intra_op_num_threads = 1
                s = ort.InferenceSession(out, so, providers=["CPUExecutionProvider"])
                ortv = s.run(None, {inp: np.load(files["heldout"])})
            except Exception as ex:  # report, never hide
                row["ort_error"] = str(ex)[:500]
                ortv = None
            for i, n in enumerate(names):
                ref = refs[i][ho].reshape(eng[i].shape)
                d = {"name": n, "engine_cosine_vs_float_ref": cosine(eng[i], ref),
                     "engine_max_abs_vs_float_ref": float(np.abs(eng[i] - ref).max())}
                if ortv is not None:
                    d["ort_cosine_vs_float_ref"] = cosine(ortv[i], ref)
                    d["ort_max_abs_vs_engine"] = float(np.abs(ortv[i] - eng[i]).max())
                per.append(d)
            row["files_per_output"] = per
            row["engine_accuracy_run"] = float((eng[cls].argmax(1) == y[ho]).mean())
            row["float_ref_accuracy"] = float((refs[cls][ho].argmax(1) == y[ho]).mean())
            if ortv is not None:
                row["ort_accuracy"] = float((ortv[cls].argmax(1) == y[ho]).mean())
                row["ort_engine_agreement"] = float((ortv[cls].argmax(1) == eng[cls].argmax(1)).mean())
        line = json.dumps(row)
        print(line, flush=True)
        if a.results:
            with open(a.results, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
