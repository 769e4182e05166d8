"""Writes format_vectors.txt: f32 inputs and their codes in the narrow ONNX float formats as
ONNX 1.23's reference evaluator computes them (ml_dtypes casts, onnx.numpy_helper's
saturate_cast and to_float8e8m0), for tests/formats.rs.

Run from this folder: python3 gen_format_vectors.py  (onnx 1.23.2, ml_dtypes 0.6.0, numpy).
Each line: the f32 bits, then per format (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, float4e2m1) the
code with saturate=1 and with saturate=0, then e8m0 with saturate=1/0 for round_mode up,
down, nearest, then bfloat16 -- all hex.
"""

import ml_dtypes as m
import numpy as np
from onnx import numpy_helper as nh

FORMATS = [m.float8_e4m3fn, m.float8_e4m3fnuz, m.float8_e5m2, m.float8_e5m2fnuz, m.float4_e2m1fn]

rng = np.random.default_rng(16)
xs = set()
for f in FORMATS:
    n = 16 if f is m.float4_e2m1fn else 256
    codes = np.arange(n, dtype=np.uint8).view(f) if n == 256 else \
        np.array([f(v) for v in np.arange(n, dtype=np.uint8).view(np.uint8)], dtype=f)
    if n == 16:
        vals = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
    else:
        vals = codes.astype(np.float32)
        vals = vals[np.isfinite(vals)]
    vals = np.unique(np.abs(vals))
    mids = ((vals[:-1].astype(np.float64) + vals[1:]) / 2).astype(np.float32)
    mx = vals[-1]
    extra = np.array([mx * 1.0625, mx * 1.03, mx * 1.1, mx * 2, mx * 0.999], np.float32)
    for v in np.concatenate([vals, mids, extra]):
        v = np.float32(v)
        xs.update([v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(0))])
# e8m0: powers of two, their midpoints and neighbours over the whole f32 range
for k in range(-149, 128):
    p = np.float32(2.0 ** k)
    for v in [p, np.float32(p * 1.5) if k < 127 else p]:
        xs.add(v)
        if k % 8 == 0 or k < -120 or k > 120:
            xs.update([np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(0))])
xs.update(np.float32(v) for v in [0.0, np.inf, np.nan, 1e-45, 3.4028235e38, 1e-30])
xs.update(rng.standard_normal(200).astype(np.float32) * np.float32(100))
xs.update(np.exp2(rng.uniform(-30, 30, 100)).astype(np.float32))
pos = np.array(sorted(x for x in xs if not np.isnan(x)), np.float32)
neg = -pos[rng.choice(len(pos), size=len(pos) // 4, replace=False)]
x = np.concatenate([pos, neg, np.array([np.nan, -np.nan, -np.inf, -0.0], np.float32)])
x = x[np.isnan(x) | (x >= 0) | (x < 0)]

cols = []
for f in FORMATS:
    info = m.finfo(f)
    with np.errstate(over="ignore", invalid="ignore"):
        if f is m.float4_e2m1fn:
            sat = x.astype(f)
        else:
            sat = nh.saturate_cast(x, f)
        nosat = x.astype(f)
    cols += [sat.view(np.uint8), nosat.view(np.uint8)]
for mode in ["up", "down", "nearest"]:
    for s in [True, False]:
        with np.errstate(over="ignore"):
            cols.append(nh.to_float8e8m0(x, s, mode).view(np.uint8))
with np.errstate(over="ignore"):
    bf = x.astype(m.bfloat16).view(np.uint16)

with open("format_vectors.txt", "w") as out:
    for i in range(len(x)):
        out.write("%08x %s %04x\n" % (x[i:i+1].view(np.uint32)[0],
                                      " ".join("%02x" % c[i] for c in cols), bf[i]))
print(len(x), "rows")
