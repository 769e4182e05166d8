#!/usr/bin/env python3
"""Writes ONNX node-test-style cases (model.onnx + test_data_set_0/{input,output}_K.pb) for
the older-opset forms of operators whose ONNX node suite only covers the latest opset.
Expected outputs come from ONNX Runtime (pip install onnx onnxruntime), which implements
each opset version's semantics: onnx's reference evaluator (onnx.reference) does not for
these operators (it runs pre-13 Softmax/LogSoftmax/Hardmax along one axis, and its LRN
sums over the wrong axis), so it is only printed where it disagrees.

    python3 gen_old_opset_cases.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper, TensorProto
from onnx.reference import ReferenceEvaluator

F = TensorProto.FLOAT


def case(out, name, opset, node, inputs, out_types=None, initializers=()):
    """inputs: list of (name, array); the graph outputs are node.output."""
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs]

    def model(outs):
        g = helper.make_graph([node], name, ins, outs, initializer=list(initializers))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 7
        return m

    untyped = [helper.make_tensor_value_info(o, (out_types or {}).get(o, F), None)
               for o in node.output]
    feed = {n: a for n, a in inputs}
    sess = ort.InferenceSession(model(untyped).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    got = sess.run(None, feed)
    ref = ReferenceEvaluator(model(untyped)).run(None, feed)
    for o, y, r in zip(node.output, got, ref):
        if y.dtype != r.dtype or y.shape != r.shape or not np.allclose(y, r, atol=1e-6):
            print(f"{name}: onnx.reference disagrees with onnxruntime on {o}", file=sys.stderr)
    typed = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.asarray(y).dtype),
                                           np.asarray(y).shape)
             for o, y in zip(node.output, got)]
    m = model(typed)
    onnx.checker.check_model(m)
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    for j, (n, a) in enumerate(inputs):
        with open(os.path.join(d, "test_data_set_0", f"input_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    for j, (o, y) in enumerate(zip(node.output, got)):
        with open(os.path.join(d, "test_data_set_0", f"output_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(y), o).SerializeToString())


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(0)
    x3 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x3[1, 2, 1] = x3[1].max() + 1.0  # one clear maximum in the coerced block
    for op in ["LogSoftmax", "Hardmax", "Softmax"]:
        for axis in [None, 0, 1, 2, -1]:
            kw = {} if axis is None else {"axis": axis}
            tag = "default_axis" if axis is None else f"axis_{axis}".replace("-", "negative_")
            case(out, f"test_{op.lower()}_opset11_{tag}", 11,
                 helper.make_node(op, ["x"], ["y"], **kw), [("x", x3)])
    x = rng.standard_normal((2, 6)).astype(np.float32)
    case(out, "test_split_opset11_attribute", 11,
         helper.make_node("Split", ["x"], ["a", "b", "c"], axis=-1, split=[1, 2, 3]), [("x", x)])
    case(out, "test_split_opset2_equal", 2,
         helper.make_node("Split", ["x"], ["a", "b"], axis=1), [("x", x)])
    case(out, "test_reduce_sum_opset11_axes_attribute", 11,
         helper.make_node("ReduceSum", ["x"], ["y"], axes=[0, -1], keepdims=0), [("x", x3)])
    case(out, "test_reduce_sum_opset11_keepdims", 11,
         helper.make_node("ReduceSum", ["x"], ["y"], axes=[1]), [("x", x3)])
    # No Dropout cases: ONNX Runtime fills the inference mask of Dropout-7/10 with 0/false,
    # while the mask marks the kept elements (output = data · mask, all ones at inference,
    # as the node suite's test_dropout_default_mask expects).
    case(out, "test_constantofshape_opset9_int32", 9,
         helper.make_node("ConstantOfShape", ["s"], ["y"],
                          value=numpy_helper.from_array(np.array([-3], dtype=np.int32))),
         [("s", np.array([2, 0, 3], dtype=np.int64))], out_types={"y": TensorProto.INT32})
    # The first input has the full shape: onnx's reference Mean accumulates in place.
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 1)).astype(np.float32)
    c = rng.standard_normal((4,)).astype(np.float32)
    for op in ["Sum", "Max", "Min", "Mean"]:
        case(out, f"test_{op.lower()}_opset8_broadcast3", 8,
             helper.make_node(op, ["a", "b", "c"], ["y"]), [("a", a), ("b", b), ("c", c)])
    # ONNX Runtime takes odd sizes only; onnx.reference's LRN loops over the batch axis
    # instead of the channels (onnx 1.23), so it disagrees here.
    x4 = rng.standard_normal((2, 5, 2, 2)).astype(np.float32)
    for size in [1, 5]:
        case(out, f"test_lrn_size_{size}", 1,
             helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.01, beta=0.6, bias=2.0),
             [("x", x4)])
    print(f"wrote cases to {out} (onnx {onnx.__version__}, onnxruntime {ort.__version__})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
