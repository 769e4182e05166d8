#!/usr/bin/env python3
"""Writes the committed seed corpora and dictionaries of the fuzz targets (fuzz/seeds/).

    python3 fuzz/seeds/gen.py          # from the repository root; needs onnx, onnxruntime,
                                       # numpy and cjpeg (Debian: libjpeg-turbo-progs)

Every file is small (the corpora total well under 200 KB): libFuzzer needs valid
structure to mutate, not size. Models are tiny float models built here, their QDQ,
QOperator and dynamic quantizations by ONNX Runtime's quantizer (what users bring to the
engine), and for the quantize target the float models behind a 65-byte options header
(see fuzz_targets/quantize.rs). The output is deterministic up to ONNX Runtime's
quantizer.
"""

import gzip
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(ROOT))
rng = np.random.default_rng(20)


def out(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def fresh(target):
    shutil.rmtree(os.path.join(ROOT, target), ignore_errors=True)


# ---------------------------------------------------------------- float models
def init(name, shape, scale=0.5):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def model(name, nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="gen.py")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def float_models():
    ms = {}
    # Conv → Relu → MaxPool → Flatten → Gemm → Softmax (a LeNet in miniature).
    ms["conv_pool_gemm"] = model(
        "conv_pool_gemm",
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Flatten", ["p"], ["f"], axis=1),
            helper.make_node("Gemm", ["f", "wg", "bg"], ["g"], transB=1),
            helper.make_node("Softmax", ["g"], ["y"], axis=-1),
        ],
        [vi("x", [1, 1, 6, 6])],
        [vi("y", [1, 3])],
        [init("w", [2, 1, 3, 3]), init("b", [2]), init("wg", [3, 18]), init("bg", [3])],
    )
    # MatMul + Add + Sigmoid, batch 2.
    ms["matmul_add"] = model(
        "matmul_add",
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Sigmoid", ["a"], ["y"]),
        ],
        [vi("x", [2, 4])],
        [vi("y", [2, 3])],
        [init("w", [4, 3]), init("b", [3])],
    )
    # Residual block: Conv → BatchNormalization → Add(x) → Relu → GlobalAveragePool.
    ms["residual"] = model(
        "residual",
        [
            helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "s", "o", "mu", "var"], ["bn"]),
            helper.make_node("Add", ["bn", "x"], ["a"]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["y"]),
        ],
        [vi("x", [1, 2, 4, 4])],
        [vi("y", [1, 2, 1, 1])],
        [
            init("w", [2, 2, 3, 3]),
            init("s", [2]),
            init("o", [2]),
            init("mu", [2]),
            numpy_helper.from_array(np.array([1.0, 0.5], np.float32), "var"),
        ],
    )
    # Depthwise conv + Clip (ReLU6) + AveragePool + Resize (nearest, ×2) + Concat.
    ms["depthwise_clip"] = model(
        "depthwise_clip",
        [
            helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=2),
            helper.make_node("Clip", ["c", "lo", "hi"], ["r"]),
            helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Resize", ["p", "", "sc"], ["u"], mode="nearest"),
            helper.make_node("Concat", ["u", "x"], ["y"], axis=1),
        ],
        [vi("x", [1, 2, 4, 4])],
        [vi("y", [1, 4, 4, 4])],
        [
            init("w", [2, 1, 3, 3]),
            numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
            numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
            numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc"),
        ],
    )
    # A transformer-ish block: MatMul → LayerNormalization → Transpose → MatMul → Softmax.
    ms["attention_like"] = model(
        "attention_like",
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("LayerNormalization", ["m", "g", "bt"], ["n"], axis=-1),
            helper.make_node("Transpose", ["n"], ["t"], perm=[0, 2, 1]),
            helper.make_node("MatMul", ["n", "t"], ["s"]),
            helper.make_node("Softmax", ["s"], ["y"], axis=-1),
        ],
        [vi("x", [1, 3, 4])],
        [vi("y", [1, 3, 3])],
        [init("w", [4, 4]), init("g", [4]), init("bt", [4])],
    )
    # Convolution inside an If branch, reading an outer-scope weight.
    then_g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["ct"], kernel_shape=[1, 1])], "then", [], [vi("ct", [1, 2, 3, 3])]
    )
    else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["ce"])], "else", [], [vi("ce", [1, 2, 3, 3])])
    ms["if_conv"] = model(
        "if_conv",
        [
            helper.make_node("If", ["cond"], ["i"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Relu", ["i"], ["y"]),
        ],
        [vi("x", [1, 2, 3, 3])],
        [vi("y", [1, 2, 3, 3])],
        [init("w", [2, 2, 1, 1]), numpy_helper.from_array(np.array(True), "cond")],
    )
    return ms


def ort_quantized(name, m):
    """ONNX Runtime's static QDQ and QOperator quantizations and its dynamic one."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{m.graph.input[0].name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    res = {}
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "m.onnx")
        onnx.save(m, src)
        for tag, fmt, pc in [("qdq", QuantFormat.QDQ, True), ("qop", QuantFormat.QOperator, False)]:
            dst = os.path.join(d, f"{tag}.onnx")
            quantize_static(src, dst, Reader(), quant_format=fmt, per_channel=pc,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
            res[f"{name}.{tag}.onnx"] = open(dst, "rb").read()
        dst = os.path.join(d, "dyn.onnx")
        quantize_dynamic(src, dst, weight_type=QuantType.QUInt8)
        res[f"{name}.dynamic.onnx"] = open(dst, "rb").read()
    return res


def models():
    # model_import, model_run and engine share seeds/models.
    for t in ["models", "quantize"]:
        fresh(t)
    fl = float_models()
    for name, m in fl.items():
        b = m.SerializeToString()
        out("models", f"{name}.onnx", b)
        # quantize: options byte + 16 f32 calibration values + the model.
        for flags, vals in [
            (0x00, rng.standard_normal(16)),
            (0x29, rng.uniform(0, 6, 16)),  # entropy, signed activations, QOperator
            (0x52, np.full(16, 0.25)),  # percentile, per-tensor, 7-bit weights; constant
            (0xC3, np.r_[np.zeros(15), 1e-30]),  # mse, 2-bit weights, a denormal
        ]:
            head = bytes([flags]) + np.asarray(vals, "<f4").tobytes()
            out("quantize", f"{name}.{flags:02x}", head + b)
        if name == "if_conv":
            continue  # ONNX Runtime's quantizer leaves branches alone: nothing new
        for qname, qb in ort_quantized(name, m).items():
            out("models", qname, qb)


# ---------------------------------------------------------------- arrays
def npy(a, fortran=False):
    f = io.BytesIO()
    np.lib.format.write_array(f, np.asfortranarray(a) if fortran else a, allow_pickle=False)
    return f.getvalue()


def npz(compressed=False, **arrays):
    f = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(f, **arrays)
    return f.getvalue()


def arrays():
    fresh("npy")
    fresh("npz")
    fresh("idx")
    x = rng.standard_normal((4, 3)).astype(np.float32)
    for name, a, fo in [
        ("f32.npy", x, False),
        ("f32_fortran.npy", x, True),
        ("u8_images.npy", rng.integers(0, 255, (2, 1, 3, 3), dtype=np.uint8), False),
        ("i64.npy", np.arange(5, dtype=np.int64), False),
        ("f16.npy", x.astype(np.float16), False),
        ("f64_be.npy", x.astype(">f8"), False),
        ("bool.npy", np.array([True, False, True]), False),
        ("scalar.npy", np.array(3.5, np.float32), False),
        ("empty.npy", np.zeros((0, 3), np.float32), False),
    ]:
        out("npy", name, npy(a, fo))
    ids = np.array([3, 1, 4, 1], np.int64)
    sr = np.array(16000, np.int64)
    out("npz", "stacked.npz", npz(x=x, ids=ids, sr=sr))
    out("npz", "stacked_deflate.npz", npz(True, x=x, ids=ids, sr=sr))
    out("npz", "per_run.npz", npz(True, x__0=x[:2], x__1=x[2:], ids__0=ids[:2], ids__1=ids[2:], sr=sr))
    out("npz", "x_only.npz", npz(x=x))
    out("npz", "batches.npz", npz(True, arr_0=x, arr_1=x[:1] * 2))
    out("npz", "images_labels.npz", npz(images=rng.integers(0, 255, (3, 1, 2, 2), dtype=np.uint8),
                                         labels=np.array([0, 1, 2], np.int64)))
    out("npz", "mixed_dtypes.npz", npz(True, x=x.astype(np.float16), ids=ids.astype(np.int32), sr=sr))

    def idx(a, code):
        head = struct.pack(">BBBB", 0, 0, code, a.ndim) + b"".join(struct.pack(">I", d) for d in a.shape)
        return head + a.astype(a.dtype.newbyteorder(">")).tobytes()

    imgs = rng.integers(0, 255, (2, 3, 3), dtype=np.uint8)
    out("idx", "images-idx3-ubyte", idx(imgs, 0x08))
    out("idx", "images-idx3-ubyte.gz", gzip.compress(idx(imgs, 0x08), mtime=0))
    out("idx", "labels-idx1-ubyte.gz", gzip.compress(idx(np.array([1, 7], np.uint8), 0x08), mtime=0))
    out("idx", "i32-idx2.gz", gzip.compress(idx(np.arange(6, dtype=np.int32).reshape(2, 3), 0x0C), mtime=0))
    out("idx", "f32-idx1", idx(np.array([0.5, -1.0], np.float32), 0x0D))
    out("idx", "f64-idx1", idx(np.array([0.5], np.float64), 0x0E))


# ---------------------------------------------------------------- images
def png(w, h, color_type, bit_depth, pixels, palette=None, interlace=0):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + row for row in pixels)
    s = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, interlace))
    if palette is not None:
        s += chunk(b"PLTE", palette)
    return s + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def images():
    fresh("image")
    w, h = 5, 4
    g = rng.integers(0, 255, (h, w), dtype=np.uint8)
    rgb = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    rgba = rng.integers(0, 255, (h, w, 4), dtype=np.uint8)
    out("image", "gray8.png", png(w, h, 0, 8, [r.tobytes() for r in g]))
    out("image", "gray16.png", png(w, h, 0, 16, [r.astype(">u2").tobytes() for r in g.astype(np.uint16) * 257]))
    out("image", "rgb8.png", png(w, h, 2, 8, [r.tobytes() for r in rgb]))
    out("image", "rgba8.png", png(w, h, 6, 8, [r.tobytes() for r in rgba]))
    out("image", "graya8.png", png(w, h, 4, 8, [r.tobytes() for r in rgba[..., :2]]))
    pal = bytes(range(48))
    out("image", "palette4.png", png(w, h, 3, 4, [bytes([(a << 4) | b for a, b in zip(r[::2], list(r[1::2]) + [0])])
                                                  for r in (g % 16)], palette=pal))
    out("image", "gray1.png", png(8, 2, 0, 1, [b"\xa5", b"\x3c"]))
    with tempfile.TemporaryDirectory() as d:
        ppm = os.path.join(d, "a.ppm")
        pgm = os.path.join(d, "a.pgm")
        with open(ppm, "wb") as f:
            f.write(b"P6 %d %d 255\n" % (w, h) + rgb.tobytes())
        with open(pgm, "wb") as f:
            f.write(b"P5 %d %d 255\n" % (w, h) + g.tobytes())
        for name, src, args in [
            ("rgb.jpg", ppm, ["-quality", "80"]),
            ("rgb_444.jpg", ppm, ["-sample", "1x1"]),
            ("progressive.jpg", ppm, ["-progressive"]),
            ("restart.jpg", ppm, ["-restart", "1B"]),
            ("gray.jpg", pgm, []),
        ]:
            outp = os.path.join(d, name)
            subprocess.run(["cjpeg", *args, "-outfile", outp, src], check=True)
            out("image", name, open(outp, "rb").read())


# ---------------------------------------------------------------- dictionaries
def esc(b):
    return "".join(f"\\x{c:02x}" if c < 0x20 or c >= 0x7F or c in (0x22, 0x5C) else chr(c) for c in b)


def key(field, wire):
    v = (field << 3) | wire
    b = b""
    while True:
        if v < 0x80:
            return b + bytes([v])
        b += bytes([(v & 0x7F) | 0x80])
        v >>= 7


def dictionaries():
    d = os.path.join(ROOT, "dict")
    os.makedirs(d, exist_ok=True)
    lines = ["# onnx.dict: protobuf field keys (tag << 3 | wire type) of the ONNX messages quantkit",
             "# reads, op types of the operator registry, attribute names and domains. gen.py writes it."]
    # (message, field, number, wire type): 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
    fields = {
        "ModelProto": [("ir_version", 1, 0), ("producer_name", 2, 2), ("domain", 4, 2),
                       ("model_version", 5, 0), ("doc_string", 6, 2), ("graph", 7, 2),
                       ("opset_import", 8, 2), ("metadata_props", 14, 2), ("functions", 25, 2)],
        "OperatorSetIdProto": [("domain", 1, 2), ("version", 2, 0)],
        "GraphProto": [("node", 1, 2), ("name", 2, 2), ("initializer", 5, 2), ("doc_string", 10, 2),
                       ("input", 11, 2), ("output", 12, 2), ("value_info", 13, 2),
                       ("sparse_initializer", 15, 2)],
        "NodeProto": [("input", 1, 2), ("output", 2, 2), ("name", 3, 2), ("op_type", 4, 2),
                      ("attribute", 5, 2), ("doc_string", 6, 2), ("domain", 7, 2), ("overload", 8, 2)],
        "AttributeProto": [("name", 1, 2), ("f", 2, 5), ("i", 3, 0), ("s", 4, 2), ("t", 5, 2),
                           ("g", 6, 2), ("floats", 7, 2), ("floats_packed", 7, 5), ("ints", 8, 2),
                           ("ints_varint", 8, 0), ("strings", 9, 2), ("tensors", 10, 2),
                           ("graphs", 11, 2), ("type", 20, 0), ("ref_attr_name", 21, 2)],
        "TensorProto": [("dims", 1, 0), ("dims_packed", 1, 2), ("data_type", 2, 0), ("segment", 3, 2),
                        ("float_data", 4, 2), ("int32_data", 5, 2), ("string_data", 6, 2),
                        ("int64_data", 7, 2), ("name", 8, 2), ("raw_data", 9, 2),
                        ("double_data", 10, 2), ("uint64_data", 11, 2), ("doc_string", 12, 2),
                        ("external_data", 13, 2), ("data_location", 14, 0)],
        "SparseTensorProto": [("values", 1, 2), ("indices", 2, 2), ("dims", 3, 0)],
        "ValueInfoProto": [("name", 1, 2), ("type", 2, 2), ("doc_string", 3, 2)],
        "TypeProto": [("tensor_type", 1, 2), ("sequence_type", 4, 2), ("map_type", 5, 2),
                      ("optional_type", 9, 2), ("sparse_tensor_type", 8, 2)],
        "TypeProto.Tensor": [("elem_type", 1, 0), ("shape", 2, 2)],
        "TensorShapeProto": [("dim", 1, 2)],
        "TensorShapeProto.Dimension": [("dim_value", 1, 0), ("dim_param", 2, 2), ("denotation", 3, 2)],
    }
    seen = set()
    for msg, fs in fields.items():
        for name, num, wire in fs:
            k = key(num, wire)
            label = f"{msg}_{name}".replace(".", "_")
            if k in seen:
                lines.append(f"# {label} = \"{esc(k)}\" (same key as above)")
                continue
            seen.add(k)
            lines.append(f"{label}=\"{esc(k)}\"")
    src = open(os.path.join(REPO, "crates/quantkit-graph/src/ops/mod.rs")).read()
    block = src[src.index("registry::registry!"):]
    ops = sorted(set(re.findall(r"^\s+([A-Z][A-Za-z0-9]*) => [a-z0-9_]+,", block, re.M)))
    lines += [f"\"{o}\"" for o in ops]
    lines += [f"\"{a}\"" for a in [
        "kernel_shape", "pads", "strides", "dilations", "group", "auto_pad", "SAME_UPPER", "axis",
        "axes", "perm", "transA", "transB", "alpha", "beta", "epsilon", "keepdims", "mode",
        "then_branch", "else_branch", "body", "to", "value", "block_size", "output_padding",
        "ceil_mode", "count_include_pad", "com.microsoft", "ai.onnx.ml", "ai.onnx",
    ]]
    open(os.path.join(d, "onnx.dict"), "w").write("\n".join(lines) + "\n")

    npy_tokens = ["\\x93NUMPY", "\\x01\\x00", "\\x02\\x00", "{'descr': '", "'fortran_order': ",
                  "'shape': (", "True", "False", "<f4", "<f8", ">f8", "<f2", "<i8", "<i4", "|u1",
                  "|i1", "|b1", "<u2", "<c8", "|O", "),", ",)", "}"]
    open(os.path.join(d, "npy.dict"), "w").write(
        "# npy.dict: .npy magic, versions, header keys and dtype codes. gen.py writes it.\n"
        + "\n".join(f"\"{t}\"" for t in npy_tokens) + "\n")
    zip_tokens = ["PK\\x03\\x04", "PK\\x01\\x02", "PK\\x05\\x06", "PK\\x06\\x06", "PK\\x06\\x07",
                  "PK\\x07\\x08", "\\x08\\x00", "\\x00\\x00", ".npy", "x.npy", "ids.npy", "sr.npy",
                  "x__0.npy", "x__1.npy", "arr_0.npy", "images.npy", "labels.npy", "__"]
    open(os.path.join(d, "npz.dict"), "w").write(
        "# npz.dict: zip record signatures, deflate/store methods, member names, and the npy\n"
        "# tokens. gen.py writes it.\n"
        + "\n".join(f"\"{t}\"" for t in zip_tokens + npy_tokens) + "\n")
    img_tokens = ["\\x89PNG\\x0d\\x0a\\x1a\\x0a", "IHDR", "IDAT", "IEND", "PLTE", "tRNS", "gAMA",
                  "iCCP", "sRGB", "acTL", "fcTL", "fdAT", "\\xff\\xd8", "\\xff\\xd9", "\\xff\\xc0",
                  "\\xff\\xc1", "\\xff\\xc2", "\\xff\\xc4", "\\xff\\xdb", "\\xff\\xda", "\\xff\\xdd",
                  "\\xff\\xe0", "\\xff\\xee", "JFIF\\x00", "Adobe"]
    open(os.path.join(d, "image.dict"), "w").write(
        "# image.dict: PNG signature and chunk types, JPEG markers. gen.py writes it.\n"
        + "\n".join(f"\"{t}\"" for t in img_tokens) + "\n")
    idx_tokens = ["\\x00\\x00\\x08\\x01", "\\x00\\x00\\x08\\x03", "\\x00\\x00\\x09\\x02",
                  "\\x00\\x00\\x0b\\x02", "\\x00\\x00\\x0c\\x02", "\\x00\\x00\\x0d\\x01",
                  "\\x00\\x00\\x0e\\x01", "\\x1f\\x8b\\x08\\x00", "\\xff\\xff\\xff\\xff"]
    open(os.path.join(d, "idx.dict"), "w").write(
        "# idx.dict: IDX magic numbers (type code, rank), the gzip header. gen.py writes it.\n"
        + "\n".join(f"\"{t}\"" for t in idx_tokens) + "\n")


if __name__ == "__main__":
    models()
    arrays()
    images()
    dictionaries()
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(ROOT) for f in fs)
    print(f"fuzz/seeds: {total} bytes", file=sys.stderr)
