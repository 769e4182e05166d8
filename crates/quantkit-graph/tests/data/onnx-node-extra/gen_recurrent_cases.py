#!/usr/bin/env python3
"""Writes ONNX node-test-style cases (model.onnx + test_data_set_0/{input,output}_K.pb) for
the features of LSTM, GRU and RNN that the ONNX node suite leaves untested: sequence_lens
with reverse and bidirectional passes, batch-first layout with initial states, clip,
activation lists with alpha/beta, LSTM's input_forget and GRU's linear_before_reset.
Expected outputs come from ONNX Runtime (pip install onnx onnxruntime); onnx's reference
evaluator ignores several of these attributes, so it is only printed where it disagrees.
ONNX Runtime refuses `layout = 1`, so batch-first cases are run in layout 0 on the
transposed inputs (`X`, `initial_h`, `initial_c`: axes 0 and 1 swapped) and the outputs
transposed back, which is what the spec defines layout 1 to be.

    python3 gen_recurrent_cases.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

OPSET = 22


def case(out, name, node, inputs):
    """inputs: list of (name, array) in the node's input order ("" names are skipped)."""
    inputs = [(n, a) for n, a in inputs if n]
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs]
    feed = {n: a for n, a in inputs}
    outs = [o for o in node.output if o]

    def model(vis):
        g = helper.make_graph([node], name, ins, vis)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 10
        return m

    untyped = [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outs]
    batchwise = any(a.name == "layout" and a.i == 1 for a in node.attribute)
    run_model = model(untyped)
    run_feed = dict(feed)
    if batchwise:
        for a in run_model.graph.node[0].attribute:
            if a.name == "layout":
                a.i = 0
        for n in ("X", "initial_h", "initial_c"):
            if n in run_feed:
                run_feed[n] = np.ascontiguousarray(np.swapaxes(run_feed[n], 0, 1))
        for vi in run_model.graph.input:
            vi.type.tensor_type.ClearField("shape")
    sess = ort.InferenceSession(run_model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    got = sess.run(None, run_feed)
    if batchwise:
        # Y: [seq, dirs, batch, hidden] -> [batch, seq, dirs, hidden]; states swap 0 and 1.
        got = [np.ascontiguousarray(np.transpose(y, (2, 0, 1, 3)) if o == "Y"
                                    else np.swapaxes(y, 0, 1)) for o, y in zip(outs, got)]
    try:
        ref = ReferenceEvaluator(model(untyped)).run(None, feed)
        for o, y, r in zip(outs, got, ref):
            if y.shape != r.shape or not np.allclose(y, r, atol=1e-5):
                print(f"{name}: onnx.reference disagrees with onnxruntime on {o}",
                      file=sys.stderr)
    except Exception as e:  # the reference refuses some attributes
        print(f"{name}: onnx.reference fails: {e}", file=sys.stderr)
    typed = [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, y.shape)
             for o, y in zip(outs, got)]
    m = model(typed)
    onnx.checker.check_model(m)
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    for j, (n, a) in enumerate(inputs):
        with open(os.path.join(d, "test_data_set_0", f"input_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    for j, (o, y) in enumerate(zip(outs, got)):
        with open(os.path.join(d, "test_data_set_0", f"output_{j}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(y, o).SerializeToString())


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(16)

    def r(*shape, s=0.5):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    seq, batch, inp = 4, 3, 2
    lens = np.array([4, 2, 3], dtype=np.int32)

    # LSTM: both directions, batch-first, sequence_lens, initial states, peepholes.
    h, d = 3, 2
    node = helper.make_node(
        "LSTM", ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"],
        ["Y", "Y_h", "Y_c"], hidden_size=h, direction="bidirectional", layout=1)
    case(out, "test_lstm_ort_bidirectional_seq_lens_batchwise", node, [
        ("X", r(batch, seq, inp)), ("W", r(d, 4 * h, inp)), ("R", r(d, 4 * h, h)),
        ("B", r(d, 8 * h)), ("sequence_lens", lens), ("initial_h", r(batch, d, h)),
        ("initial_c", r(batch, d, h)), ("P", r(d, 3 * h))])

    # LSTM: reverse, clip, other activations with alpha/beta, input_forget.
    h = 2
    node = helper.make_node(
        "LSTM", ["X", "W", "R", "B", "sequence_lens"], ["Y", "Y_h", "Y_c"],
        hidden_size=h, direction="reverse", clip=0.7, input_forget=1,
        activations=["HardSigmoid", "ScaledTanh", "Softsign"],
        activation_alpha=[0.3, 0.9], activation_beta=[0.4, 1.5])
    case(out, "test_lstm_ort_reverse_clip_activations_input_forget", node, [
        ("X", r(seq, batch, inp, s=2.0)), ("W", r(1, 4 * h, inp)), ("R", r(1, 4 * h, h)),
        ("B", r(1, 8 * h)), ("sequence_lens", lens)])

    # GRU: linear_before_reset, both directions, sequence_lens, initial_h.
    h, d = 3, 2
    node = helper.make_node(
        "GRU", ["X", "W", "R", "B", "sequence_lens", "initial_h"], ["Y", "Y_h"],
        hidden_size=h, direction="bidirectional", linear_before_reset=1)
    case(out, "test_gru_ort_linear_before_reset_bidirectional_seq_lens", node, [
        ("X", r(seq, batch, inp)), ("W", r(d, 3 * h, inp)), ("R", r(d, 3 * h, h)),
        ("B", r(d, 6 * h)), ("sequence_lens", lens), ("initial_h", r(d, batch, h))])

    # GRU: reverse, batch-first, clip, activations with alpha/beta.
    h = 2
    node = helper.make_node(
        "GRU", ["X", "W", "R", "B", "", "initial_h"], ["Y", "Y_h"],
        hidden_size=h, direction="reverse", layout=1, clip=0.8,
        activations=["HardSigmoid", "LeakyRelu"], activation_alpha=[0.25, 0.1],
        activation_beta=[0.45])
    case(out, "test_gru_ort_reverse_batchwise_clip_activations", node, [
        ("X", r(batch, seq, inp, s=2.0)), ("W", r(1, 3 * h, inp)), ("R", r(1, 3 * h, h)),
        ("B", r(1, 6 * h)), ("", None), ("initial_h", r(batch, 1, h))])

    # RNN: both directions, batch-first, sequence_lens, one activation per direction.
    h, d = 3, 2
    node = helper.make_node(
        "RNN", ["X", "W", "R", "B", "sequence_lens", "initial_h"], ["Y", "Y_h"],
        hidden_size=h, direction="bidirectional", layout=1,
        activations=["Relu", "Affine"], activation_alpha=[0.6], activation_beta=[-0.2])
    case(out, "test_rnn_ort_bidirectional_seq_lens_batchwise_activations", node, [
        ("X", r(batch, seq, inp)), ("W", r(d, h, inp)), ("R", r(d, h, h)),
        ("B", r(d, 2 * h)), ("sequence_lens", lens), ("initial_h", r(batch, d, h))])


if __name__ == "__main__":
    main()
