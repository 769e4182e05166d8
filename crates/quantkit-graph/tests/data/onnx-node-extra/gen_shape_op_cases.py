#!/usr/bin/env python3
"""Writes ONNX node-test-style cases for the shape and indexing operators (Tile, TopK,
Scatter*, GatherND, OneHot, DepthToSpace...) at the older opsets the node suite does not
cover, and in element types it does not try. Expected outputs come from ONNX Runtime; onnx's
reference evaluator is run too and any disagreement is printed (it has no `Scatter`).

    python3 gen_shape_op_cases.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper, TensorProto
from onnx.reference import ReferenceEvaluator

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def case(out, name, opset, node, inputs, out_types=None):
    """inputs: list of (name, array); the graph outputs are node.output (float unless
    out_types says otherwise)."""
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs]

    def model(outs):
        g = helper.make_graph([node], name, ins, outs)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 7
        return m

    untyped = [helper.make_tensor_value_info(o, (out_types or {}).get(o, F), None)
               for o in node.output]
    feed = {n: a for n, a in inputs}
    sess = ort.InferenceSession(model(untyped).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    got = sess.run(None, feed)
    try:
        ref = ReferenceEvaluator(model(untyped)).run(None, feed)
        for o, y, r in zip(node.output, got, ref):
            if y.dtype != r.dtype or y.shape != r.shape or not np.allclose(y, r, atol=1e-6, equal_nan=True):
                print(f"{name}: onnx.reference disagrees with onnxruntime on {o}",
                      file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - the reference lacks some old operators
        print(f"{name}: onnx.reference cannot run it ({type(e).__name__})", file=sys.stderr)
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
    rng = np.random.default_rng(16)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    x[1, 3] = x[1, 0]  # a tie: the lower index comes first
    # TopK: k as an attribute (opset 1), as an input (10), largest = 0 (11); other types.
    case(out, "test_top_k_opset1_attribute", 1,
         helper.make_node("TopK", ["x"], ["v", "i"], k=2, axis=0), [("x", x)],
         out_types={"i": I64})
    case(out, "test_top_k_opset10_input", 10,
         helper.make_node("TopK", ["x", "k"], ["v", "i"]),
         [("x", x), ("k", np.array([3], dtype=np.int64))], out_types={"i": I64})
    case(out, "test_top_k_opset11_smallest_axis0", 11,
         helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=0, largest=0),
         [("x", x), ("k", np.array([2], dtype=np.int64))], out_types={"i": I64})
    for dt, name, code in [(np.int32, "int32", TensorProto.INT32),
                           (np.float64, "double", TensorProto.DOUBLE),
                           (np.float16, "float16", TensorProto.FLOAT16)]:
        xi = rng.integers(-4, 4, (2, 7)).astype(dt)  # many ties
        case(out, f"test_top_k_{name}_ties", 11,
             helper.make_node("TopK", ["x", "k"], ["v", "i"]),
             [("x", xi), ("k", np.array([4], dtype=np.int64))],
             out_types={"v": code, "i": I64})
    # NaN ranks above every number (largest first, smallest last), as numpy sorts.
    xn = np.array([[1.0, np.nan, 3.0, np.nan, 0.0]], dtype=np.float32)
    for largest in [1, 0]:
        case(out, f"test_top_k_nan_largest_{largest}", 11,
             helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=largest),
             [("x", xn), ("k", np.array([3], dtype=np.int64))], out_types={"i": I64})
    # Scatter (opset 9) and ScatterElements/ScatterND before reductions (11), then 16's.
    data = np.zeros((3, 4), dtype=np.float32)
    ind = np.array([[1, 0, 2, -1], [0, 2, 1, 0]], dtype=np.int64)
    upd = rng.standard_normal((2, 4)).astype(np.float32)
    case(out, "test_scatter_opset9", 9,
         helper.make_node("Scatter", ["d", "i", "u"], ["y"], axis=0),
         [("d", data), ("i", np.abs(ind)), ("u", upd)])
    case(out, "test_scatter_elements_opset11_negative_indices", 11,
         helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=0),
         [("d", data), ("i", ind), ("u", upd)])
    di = np.arange(12, dtype=np.int32).reshape(3, 4)
    case(out, "test_scatter_elements_opset16_add_int32_duplicates", 16,
         helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction="add"),
         [("d", di), ("i", np.array([[0, 0, 3]], dtype=np.int32)),
          ("u", np.array([[5, 6, 7]], dtype=np.int32))], out_types={"y": TensorProto.INT32})
    d3 = rng.standard_normal((2, 3, 2)).astype(np.float32)
    case(out, "test_scatternd_opset11_slices", 11,
         helper.make_node("ScatterND", ["d", "i", "u"], ["y"]),
         [("d", d3), ("i", np.array([[1, 2], [0, -1]], dtype=np.int64)),
          ("u", rng.standard_normal((2, 2)).astype(np.float32))])
    case(out, "test_scatternd_opset16_mul", 16,
         helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction="mul"),
         [("d", d3), ("i", np.array([[1], [1]], dtype=np.int64)),
          ("u", rng.standard_normal((2, 3, 2)).astype(np.float32))])
    # GatherND before batch_dims (11), GatherElements with int32 indices.
    case(out, "test_gathernd_opset11_negative", 11,
         helper.make_node("GatherND", ["d", "i"], ["y"]),
         [("d", d3), ("i", np.array([[[1, -1]], [[0, 0]]], dtype=np.int64))])
    case(out, "test_gather_elements_int32_indices_axis1", 13,
         helper.make_node("GatherElements", ["d", "i"], ["y"], axis=1),
         [("d", d3), ("i", np.array([[[2, 0]], [[-1, 1]]], dtype=np.int32))])
    # Tile of bool and uint8 (opset 6), DepthToSpace/SpaceToDepth at opset 1 (DCR only).
    case(out, "test_tile_opset6_bool", 6,
         helper.make_node("Tile", ["x", "r"], ["y"]),
         [("x", np.array([[True, False, True]])), ("r", np.array([2, 2], dtype=np.int64))],
         out_types={"y": TensorProto.BOOL})
    case(out, "test_tile_uint8_3d", 13,
         helper.make_node("Tile", ["x", "r"], ["y"]),
         [("x", np.arange(6, dtype=np.uint8).reshape(1, 2, 3)),
          ("r", np.array([2, 1, 3], dtype=np.int64))], out_types={"y": TensorProto.UINT8})
    x4 = rng.standard_normal((2, 8, 2, 3)).astype(np.float32)
    case(out, "test_depthtospace_opset1", 1,
         helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2), [("x", x4)])
    case(out, "test_spacetodepth_opset1", 1,
         helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2),
         [("x", rng.standard_normal((2, 3, 4, 6)).astype(np.float32))])
    # OneHot at opset 9 (non-negative indices; float indices and depth).
    case(out, "test_onehot_opset9_float_indices", 9,
         helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=1),
         [("i", np.array([[0.0, 2.0], [3.0, 1.0]], dtype=np.float32)),
          ("d", np.array([4.0], dtype=np.float32)),
          ("v", np.array([0.0, 9.0], dtype=np.float32))])
    # Compress at opset 9, NonZero of int32, EyeLike at opset 9 with dtype.
    case(out, "test_compress_opset9_axis1", 9,
         helper.make_node("Compress", ["x", "c"], ["y"], axis=1),
         [("x", x), ("c", np.array([True, False, True]))])
    case(out, "test_nonzero_int32_3d", 13,
         helper.make_node("NonZero", ["x"], ["y"]),
         [("x", rng.integers(0, 2, (2, 3, 4)).astype(np.int32))], out_types={"y": I64})
    case(out, "test_eyelike_opset9_int32_to_double", 9,
         helper.make_node("EyeLike", ["x"], ["y"], k=-1, dtype=TensorProto.DOUBLE),
         [("x", np.zeros((3, 4), dtype=np.int32))], out_types={"y": TensorProto.DOUBLE})
    # ReverseSequence with a trailing axis; Unique of int64 along an axis, unsorted.
    case(out, "test_reversesequence_3d", 10,
         helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=1, batch_axis=0),
         [("x", rng.standard_normal((3, 4, 2)).astype(np.float32)),
          ("l", np.array([4, 0, 2], dtype=np.int64))])
    case(out, "test_unique_not_sorted_with_axis_int64", 11,
         helper.make_node("Unique", ["x"], ["y", "i", "v", "c"], axis=1, sorted=0),
         [("x", np.array([[3, 1, 3, 2, 1], [0, 5, 0, 2, 5]], dtype=np.int64))],
         out_types={"y": I64, "i": I64, "v": I64, "c": I64})
    print(f"wrote cases to {out} (onnx {onnx.__version__}, onnxruntime {ort.__version__})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
