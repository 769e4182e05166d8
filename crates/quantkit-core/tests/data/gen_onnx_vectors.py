"""Regenerates onnx_vectors.json: ONNX node-test vectors for (De)QuantizeLinear and
DynamicQuantizeLinear (integer types only), plus random cases run through ONNX Runtime.

Run from the repository root:  python3 crates/quantkit-core/tests/data/gen_onnx_vectors.py
Needs onnx, onnxruntime, numpy and the shared conformance folder (../shared or
$QUANTKIT_SHARED). The JSON is committed so the Rust tests need neither Python nor the
shared folder.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("QUANTKIT_SHARED", os.path.join(HERE, "../../../../../shared"))
NODE = os.path.join(SHARED, "conformance", "onnx-node")

INT_TYPES = {
    TensorProto.UINT8: ("u8", 0, 255),
    TensorProto.INT8: ("i8", -128, 127),
    TensorProto.UINT16: ("u16", 0, 65535),
    TensorProto.INT16: ("i16", -32768, 32767),
    TensorProto.UINT4: ("u4", 0, 15),
    TensorProto.INT4: ("i4", -8, 7),
    TensorProto.UINT2: ("u2", 0, 3),
    TensorProto.INT2: ("i2", -2, 1),
}


def f32list(a):
    return [float(v) for v in np.asarray(a, dtype=np.float32).reshape(-1)]


def intlist(a):
    return [int(v) for v in np.asarray(a).astype(np.int64).reshape(-1)]


def load(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def node_cases():
    cases = []
    for name in sorted(os.listdir(NODE)):
        if not any(name.startswith(p) for p in ("test_quantizelinear", "test_dequantizelinear", "test_dynamicquantizelinear")):
            continue
        d = os.path.join(NODE, name)
        model = onnx.load(os.path.join(d, "model.onnx"))
        node = model.graph.node[0]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ds = os.path.join(d, "test_data_set_0")
        ins = [load(os.path.join(ds, f"input_{i}.pb")) for i in range(len(node.input)) if os.path.exists(os.path.join(ds, f"input_{i}.pb"))]
        outs = [load(os.path.join(ds, f"output_{i}.pb")) for i in range(len(node.output))]
        if node.op_type == "DynamicQuantizeLinear":
            x = numpy_helper.to_array(ins[0])
            y, s, z = (numpy_helper.to_array(o) for o in outs)
            cases.append({"name": name, "op": "dynamic", "x": f32list(x), "shape": list(x.shape),
                          "y": intlist(y), "scale": float(s), "zero_point": int(z)})
            continue
        qtype = ins[0].data_type if node.op_type == "DequantizeLinear" else (
            ins[2].data_type if len(ins) > 2 else TensorProto.UINT8)
        if node.op_type == "QuantizeLinear" and "output_dtype" in attrs:
            qtype = attrs["output_dtype"]
        if qtype not in INT_TYPES:
            continue
        dtype, qmin, qmax = INT_TYPES[qtype]
        arrs = [numpy_helper.to_array(t) for t in ins]
        y = numpy_helper.to_array(outs[0])
        x = arrs[0]
        scale = arrs[1]
        zp = arrs[2] if len(arrs) > 2 else np.zeros_like(scale, dtype=np.int64)
        axis = attrs.get("axis", 1)
        if axis < 0:
            axis += x.ndim
        case = {"name": name, "op": "quantize" if node.op_type == "QuantizeLinear" else "dequantize",
                "shape": list(x.shape), "scales": f32list(scale), "zero_points": intlist(zp),
                "axis": axis if scale.size > 1 else 0, "block_size": attrs.get("block_size", 0),
                "dtype": dtype, "qmin": qmin, "qmax": qmax}
        if node.op_type == "QuantizeLinear":
            case["x"] = f32list(x)
            case["y"] = intlist(y)
        else:
            case["q"] = intlist(x)
            case["y"] = f32list(y)
        cases.append(case)
    return cases


def ort_cases():
    import onnxruntime as ort
    rng = np.random.default_rng(20261122)
    cases = []
    for dtype, tp, qmin, qmax in (("u8", TensorProto.UINT8, 0, 255), ("i8", TensorProto.INT8, -128, 127)):
        for k in range(6):
            n = 257
            x = (rng.standard_normal(n) * 10 ** rng.uniform(-3, 3)).astype(np.float32)
            scale = np.float32(np.abs(x).max() / rng.uniform(40, 300))
            z = int(rng.integers(qmin, qmax + 1))
            # Exact ties of x/scale (k + 0.5) to pin half-to-even rounding.
            x[:20] = ((np.arange(20) - 10) + 0.5).astype(np.float32) * scale
            npdt = np.uint8 if dtype == "u8" else np.int8
            g = helper.make_graph(
                [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "q",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                [helper.make_tensor_value_info("y", tp, [n])],
                [numpy_helper.from_array(np.array(scale, dtype=np.float32), "s"),
                 numpy_helper.from_array(np.array(z, dtype=npdt), "z")])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            m.ir_version = 8
            sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            y = sess.run(None, {"x": x})[0]
            cases.append({"name": f"ort_{dtype}_{k}", "op": "quantize", "shape": [n], "x": f32list(x),
                          "scales": [float(scale)], "zero_points": [z], "axis": 0, "block_size": 0,
                          "dtype": dtype, "qmin": qmin, "qmax": qmax, "y": intlist(y)})
    return cases


def main():
    if not os.path.isdir(NODE):
        sys.exit(f"conformance folder not found: {NODE}")
    cases = node_cases() + ort_cases()
    with open(os.path.join(HERE, "onnx_vectors.json"), "w") as f:
        json.dump(cases, f, indent=0)
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
