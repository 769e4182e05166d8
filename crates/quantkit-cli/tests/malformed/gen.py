#!/usr/bin/env python3
"""Writes the malformed-input corpus beside this script (see cases.tsv and
crates/quantkit-cli/tests/malformed.rs). Every file is a few hundred bytes: the large
claims are in headers, dims and attributes, not in the data. Needs onnx and numpy.

    python3 crates/quantkit-cli/tests/malformed/gen.py
"""
import io, os, struct, zipfile, zlib, gzip
import numpy as np
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh

OUT = os.path.dirname(os.path.abspath(__file__))
F = T.FLOAT
vi = h.make_tensor_value_info


def model(name, nodes, inputs, outputs, inits=(), sparse=(), opset=17):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits),
                     sparse_initializer=list(sparse))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="malformed")
    m.ir_version = 8
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())


def conv(name, **attrs):
    model(name, [h.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)],
          [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None)],
          [nh.from_array(np.ones((1, 1, 3, 3), np.float32), "w")])


BIG = 2**63 - 2
P = 2**20
# Panics found by the probe (issue 20).
model("gap_rank1", [h.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")],
      [vi("x", F, [4])], [vi("y", F, None)])
model("layernorm_scale_rank", [h.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln", axis=-1)],
      [vi("x", F, [2, 3])], [vi("y", F, None)], [nh.from_array(np.ones((2, 3), np.float32), "s")])
model("dq_scalar_axis", [h.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], name="dq", axis=0)],
      [vi("x", T.UINT8, [])], [vi("y", F, None)],
      [nh.from_array(np.array([0.5, 0.25], np.float32), "s"),
       nh.from_array(np.array([1, 2], np.uint8), "z")])
conv("conv_pads_huge", pads=[BIG, BIG, BIG, BIG])
conv("conv_pad_begin_huge", pads=[BIG, 0, 0, 0])
conv("conv_dilation_huge", dilations=[2**62, 2**62])
# Allocation aborts.
conv("conv_pads_1m", pads=[P, P, P, P])
model("avgpool_pads_1m", [h.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], pads=[P, P, P, P])],
      [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None)])
model("maxpool_pads_1m", [h.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], pads=[P, P, P, P])],
      [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None)])
model("pad_1m", [h.make_node("Pad", ["x", "pads"], ["y"], name="pad")],
      [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None)],
      [nh.from_array(np.array([0, 0, P, P, 0, 0, P, P], np.int64), "pads")])
model("pad_folded_huge", [h.make_node("Pad", ["c", "pads"], ["cp"], name="pad"),
                          h.make_node("Add", ["x", "cp"], ["y"], name="add")],
      [vi("x", F, [1])], [vi("y", F, None)],
      [nh.from_array(np.ones((1, 4), np.float32), "c"),
       nh.from_array(np.array([P, P, P, P], np.int64), "pads")])
model("convtranspose_huge", [h.make_node("ConvTranspose", ["x", "w"], ["y"], name="deconv", strides=[P, P])],
      [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None)],
      [nh.from_array(np.ones((1, 1, 3, 3), np.float32), "w")])
t = T(); t.name = "huge_w"; t.data_type = F; t.dims.extend([P, P])
model("init_dims_huge", [h.make_node("Add", ["x", "huge_w"], ["y"], name="add")],
      [vi("x", F, [1])], [vi("y", F, None)], [t])
sp = h.make_sparse_tensor(nh.from_array(np.array([1.0], np.float32), "sparse_w"),
                          nh.from_array(np.array([5], np.int64), "sparse_w_idx"), [P, P])
model("sparse_dims_huge", [h.make_node("Add", ["x", "sparse_w"], ["y"], name="add")],
      [vi("x", F, [1])], [vi("y", F, None)], sparse=[sp])
# Accepted silently before.
conv("conv_group0", group=0)
model("maxpool_stride0", [h.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], strides=[0, 0])],
      [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None)])
model("dup_output", [h.make_node("Relu", ["x"], ["y"], name="first"),
                     h.make_node("Neg", ["x"], ["y"], name="second")],
      [vi("x", F, [2])], [vi("y", F, None)])


# The integer engine (`run --engine int8`): a QDQ Conv whose pads make the kernel's output
# size 2^40 elements, and one whose pads overflow the kernel's size arithmetic.
# Crashes found by the fuzzers (fuzz/README.md), each also kept as a fuzz seed or a unit test.
# Softmax of a scalar indexed its absent last axis (model_run, d480fbc).
model("softmax_scalar", [h.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)],
      [vi("x", F, [])], [vi("y", F, None)], opset=13)
# A Reshape folded at load time whose target dims overflow usize when multiplied (engine,
# bd06d62; 2^50 * 32767 wraps).
model("reshape_overflow", [h.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
                           h.make_node("Add", ["x", "r"], ["y"], name="add")],
      [vi("x", F, [2])], [vi("y", F, None)],
      [nh.from_array(np.ones(2, np.float32), "c"),
       nh.from_array(np.array([1, 2**50, 32767, 1], np.int64), "shape")])

# A Concat with no outputs: the engine's pattern matcher indexed its first output (engine).
model("concat_no_output", [h.make_node("Relu", ["x"], ["y"], name="relu"),
                           h.make_node("Concat", ["y"], [], name="cat", axis=0)],
      [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None)])

# A nearest Resize to 134M elements: under the default tensor_elements limit, but the
# fuzzers' limit (4M) must hold for it too: Resize had its own fixed bound (model_run).
model("resize_134m", [h.make_node("Resize", ["x", "", "sc"], ["y"], name="up", mode="nearest")],
      [vi("x", F, [1, 2, 1, 1])], [vi("y", F, None)],
      [nh.from_array(np.array([1, 1, 2**25, 2], np.float32), "sc")])


def qdq_conv(name, pads):
    u8 = T.UINT8
    q = lambda n: [nh.from_array(np.array(0.05, np.float32), n + "_s"),
                   nh.from_array(np.array(128, np.uint8), n + "_z")]
    model(name, [
        h.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"], name="qx"),
        h.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xd"], name="dqx"),
        h.make_node("DequantizeLinear", ["wq", "w_s", "w_z"], ["wd"], name="dqw"),
        h.make_node("Conv", ["xd", "wd"], ["c"], name="qconv", pads=pads),
        h.make_node("QuantizeLinear", ["c", "y_s", "y_z"], ["yq"], name="qy"),
        h.make_node("DequantizeLinear", ["yq", "y_s", "y_z"], ["y"], name="dqy")],
        [vi("x", F, [1, 1, 4, 4])], [vi("y", F, None)],
        [nh.from_array(np.full((1, 1, 3, 3), 130, np.uint8), "wq")] + q("x") + q("w") + q("y"))


qdq_conv("engine_conv_pads_1m", [P, P, P, P])
qdq_conv("engine_conv_pads_huge", [BIG, BIG, BIG, BIG])

# Inputs for `run`.
np.save(os.path.join(OUT, "x_4.npy"), np.ones(4, np.float32))
np.save(os.path.join(OUT, "x_2x3.npy"), np.ones((2, 3), np.float32))
np.save(os.path.join(OUT, "x_u8_scalar.npy"), np.array(3, np.uint8))
np.save(os.path.join(OUT, "x_1x1x4x4.npy"), np.ones((1, 1, 4, 4), np.float32))
np.save(os.path.join(OUT, "x_1.npy"), np.ones(1, np.float32))
np.save(os.path.join(OUT, "x_1x2x1x1.npy"), np.ones((1, 2, 1, 1), np.float32))
np.save(os.path.join(OUT, "x_scalar.npy"), np.array(1.5, np.float32))


def npy_header(descr, shape):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(tuple(shape)))
    d = d.encode() + b" " * ((64 - (10 + len(d) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d


# An .npz whose member claims 4 GiB (the probe's 4 MB file inflated to 4 GiB; what matters
# is the claim, checked before inflating) and one with three members (run with
# QUANTKIT_LIMITS=npz_members=2).
with zipfile.ZipFile(os.path.join(OUT, "npz_claims_4g.npz"), "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("images.npy", npy_header("|u1", (4096, 1024, 1024)) + bytes(4096))
with zipfile.ZipFile(os.path.join(OUT, "npz_three_members.npz"), "w", zipfile.ZIP_DEFLATED) as z:
    for k in "abc":
        buf = io.BytesIO(); np.save(buf, np.zeros((1, 1, 28, 28), np.float32)); z.writestr(k + ".npy", buf.getvalue())


def idx_header(dims):
    return bytes([0, 0, 0x08, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)


# A gzip IDX whose header claims 8 GiB of u8 (the probe's 16 MB file).
with open(os.path.join(OUT, "idx_claims_8g-images-idx3-ubyte.gz"), "wb") as f:
    f.write(gzip.compress(idx_header([8192, 1024, 1024]) + bytes(4096), mtime=0))


# A PNG whose header declares 20000 x 20000 pixels (the probe's 389 KB file; the data here
# is a truncated IDAT: the dimensions must be refused before anything is decoded).
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


os.makedirs(os.path.join(OUT, "images_huge_png", "a"), exist_ok=True)
with open(os.path.join(OUT, "images_huge_png", "a", "huge.png"), "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(20001 * 4))) + chunk(b"IEND", b""))


# A palette PNG whose PLTE chunk holds 53 bytes, not whole RGB triples: png 0.18.1 panicked
# on it (the image fuzz target, 7a8500a).
os.makedirs(os.path.join(OUT, "images_bad_plte", "a"), exist_ok=True)
with open(os.path.join(OUT, "images_bad_plte", "a", "plte53.png"), "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 3, 0, 0, 0))
            + chunk(b"PLTE", bytes(range(53))) + chunk(b"IDAT", zlib.compress(bytes(5 * 4)))
            + chunk(b"IEND", b""))
