#!/usr/bin/env python3
"""Writes ONNX node-test-style cases (model.onnx + test_data_set_0/{input,output}_K.pb) for
the spatial operators' forms the ONNX node suite does not cover: Upsample-7/9 (linear too),
Resize-10 (Upsample's meaning), Resize-11's tf_half_pixel_for_nn, pytorch_half_pixel onto
one element, RoiAlign-10, MaxRoiPool and LpPool-2/11. Expected outputs come from ONNX
Runtime (pip install onnx onnxruntime), which implements each opset's semantics; onnx's
reference evaluator lacks most of these forms (and runs RoiAlign-10 with opset 16's
half-pixel default), so it is only reported where it runs and disagrees.

    python3 gen_spatial_cases.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper, TensorProto
from onnx.reference import ReferenceEvaluator


def case(out, name, opset, node, inputs, out_type=TensorProto.FLOAT):
    """inputs: list of (name, array); the single graph output is node.output[0]."""
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs]

    def model(shape):
        o = helper.make_tensor_value_info(node.output[0], out_type, shape)
        g = helper.make_graph([node], name, ins, [o])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 7
        return m

    feed = dict(inputs)
    sess = ort.InferenceSession(model(None).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, feed)
    try:
        (r,) = ReferenceEvaluator(model(None)).run(None, feed)
        if r.shape != y.shape or not np.allclose(r, y, atol=1e-5):
            print(f"{name}: onnx.reference disagrees with onnxruntime", file=sys.stderr)
    except Exception as e:  # the reference lacks this form
        print(f"{name}: onnx.reference cannot run it ({type(e).__name__})", file=sys.stderr)
    m = model(y.shape)
    onnx.checker.check_model(m)
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    for j, (n, a) in enumerate(inputs):
        with open(os.path.join(d, "test_data_set_0", f"input_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    with open(os.path.join(d, "test_data_set_0", "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y, node.output[0]).SerializeToString())


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(16)
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    f32 = lambda *v: np.array(v, dtype=np.float32)  # noqa: E731
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731

    # Upsample: scales as an attribute (7) or an input (9); nearest floors, linear clamps.
    for mode in ["nearest", "linear"]:
        case(out, f"test_upsample_opset7_{mode}", 7,
             helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 1.5]),
             [("x", x)])
    case(out, "test_upsample_opset9_linear", 9,
         helper.make_node("Upsample", ["x", "s"], ["y"], mode="linear"),
         [("x", x), ("s", f32(1, 1, 2.5, 3))])

    # Resize-10: (X, scales), asymmetric; nearest floors up and ceils down.
    for mode in ["nearest", "linear"]:
        for tag, s in [("up", f32(1, 1, 2, 1.5)), ("down", f32(1, 1, 0.6, 0.5))]:
            case(out, f"test_resize_opset10_{mode}_{tag}", 10,
                 helper.make_node("Resize", ["x", "s"], ["y"], mode=mode), [("x", x), ("s", s)])

    # Resize-11: tf_half_pixel_for_nn (removed in 13), cubic with exclude_outside.
    empty = np.zeros((0,), dtype=np.float32)
    case(out, "test_resize_opset11_tf_half_pixel_for_nn", 11,
         helper.make_node("Resize", ["x", "roi", "s"], ["y"], mode="nearest",
                          coordinate_transformation_mode="tf_half_pixel_for_nn"),
         [("x", x), ("roi", empty), ("s", f32(1, 1, 1.7, 0.8))])
    # pytorch_half_pixel onto one output element samples input 0 (the spec and ONNX
    # Runtime; the reference evaluator uses −0.5, which only a cubic kernel tells apart).
    case(out, "test_resize_pytorch_half_pixel_cubic_to_one", 13,
         helper.make_node("Resize", ["x", "roi", "", "sz"], ["y"], mode="cubic",
                          coordinate_transformation_mode="pytorch_half_pixel"),
         [("x", x), ("roi", empty), ("sz", i64(1, 2, 1, 3))])
    # No integer case: ONNX Runtime's uint8 linear Resize differs from the spec's rounding
    # of the interpolated value by 1 in places (it agrees with onnx.reference, as quantkit does).

    # RoiAlign-10: no half-pixel shift, rois under a pixel stretched to one.
    xr = rng.standard_normal((2, 2, 5, 6)).astype(np.float32)
    rois = f32([0.5, 1.0, 4.0, 3.5], [1.0, 1.0, 1.2, 1.3], [-1.0, 0.0, 7.0, 6.0])
    b = i64(0, 1, 1)
    for mode in ["avg", "max"]:
        case(out, f"test_roialign_opset10_{mode}", 10,
             helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], mode=mode, output_height=3,
                              output_width=2, sampling_ratio=2, spatial_scale=0.9),
             [("x", xr), ("rois", rois), ("b", b)])

    # MaxRoiPool: rounded roi corners, bins clipped to the image, empty bins 0.
    mr = f32([0, 0, 0, 5, 4], [1, 1.4, 0.6, 3.5, 2.5], [1, 4, 3, 9, 9], [0, 7, 7, 9, 9])
    case(out, "test_maxroipool", 1,
         helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[2, 3],
                          spatial_scale=1.0),
         [("x", xr), ("rois", mr)])
    case(out, "test_maxroipool_scaled", 1,
         helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[3, 2],
                          spatial_scale=0.5),
         [("x", xr), ("rois", mr)])

    # LpPool-2 (integer p), LpPool-11 (auto_pad).
    case(out, "test_lppool_opset2_p3_pads", 2,
         helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 3], p=3, pads=[1, 0, 0, 1],
                          strides=[1, 2]),
         [("x", x)])
    case(out, "test_lppool_opset11_same_upper", 11,
         helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=1, auto_pad="SAME_UPPER",
                          strides=[2, 2]),
         [("x", x)])
    print(f"wrote cases to {out} (onnx {onnx.__version__}, onnxruntime {ort.__version__})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
