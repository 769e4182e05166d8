"""Writes the three small multi-input / non-float-input models of tests/multi_input.rs.

    python3 gen_models.py            # writes vad.onnx, text.onnx, bytes.onnx here

Weights come from a fixed NumPy seed, so the files are reproducible. Each model stands for a
kind of real model that quantkit must calibrate and quantize (issue 16):

- vad.onnx: a voice-activity detector's interface: audio float32 [batch, 64], a recurrent
  state float32 [2, batch, 16] and an int64 sample-rate scalar. The rate is used twice, as
  float (Cast, Div by 16000 scales the audio) and as a condition (Equal 16000 selects
  between two gains with Where). Outputs: probabilities [batch, 2] and the next state.
- text.onnx: int64 token ids [batch, seq] and an int64 attention mask [batch, seq]: Gather
  of a float embedding table, masked mean over the sequence, MatMul + Relu, Gemm.
- bytes.onnx: a file-type classifier on int32 bytes [batch, 32]: one-hot by Equal against
  Range(0, 256) and Cast (an integer-only path), Conv 1x3 over the byte positions, Relu,
  GlobalAveragePool, Gemm.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(16)


def w(name, *shape, scale=None):
    fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:]))
    s = scale if scale is not None else 1.0 / np.sqrt(fan_in)
    return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)


def c(name, value, dtype):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def save(graph, name):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, os.path.join(HERE, name))


def vad():
    n = helper.make_node
    nodes = [
        n("Cast", ["sr"], ["sr_f"], to=TensorProto.FLOAT, name="sr_cast"),
        n("Div", ["sr_f", "ref_rate"], ["rate_ratio"], name="rate_div"),
        n("Equal", ["sr", "rate_16k"], ["is_16k"], name="is_16k"),
        n("Where", ["is_16k", "gain_16k", "gain_8k"], ["gain"], name="gain_select"),
        n("Mul", ["rate_ratio", "gain"], ["audio_scale"], name="audio_scale"),
        n("Mul", ["audio", "audio_scale"], ["audio_s"], name="audio_mul"),
        n("MatMul", ["audio_s", "w_in"], ["h_in"], name="in_matmul"),
        n("Gather", ["state", "idx0"], ["h_prev"], axis=0, name="state_h"),
        n("Gather", ["state", "idx1"], ["c_prev"], axis=0, name="state_c"),
        n("MatMul", ["h_prev", "w_rec"], ["h_rec"], name="rec_matmul"),
        n("Add", ["h_in", "h_rec"], ["h_sum"], name="h_add"),
        n("Add", ["h_sum", "b_h"], ["h_pre"], name="h_bias"),
        n("Tanh", ["h_pre"], ["h_new"], name="h_tanh"),
        n("Add", ["c_prev", "h_new"], ["c_new"], name="c_add"),
        n("Unsqueeze", ["h_new", "axis0"], ["h_u"], name="h_unsq"),
        n("Unsqueeze", ["c_new", "axis0"], ["c_u"], name="c_unsq"),
        n("Concat", ["h_u", "c_u"], ["state_out"], axis=0, name="state_concat"),
        n("Gemm", ["h_new", "w_out", "b_out"], ["logits"], name="out_gemm"),
        n("Softmax", ["logits"], ["prob"], axis=1, name="out_softmax"),
    ]
    inits = [
        c("ref_rate", 16000.0, np.float32),
        c("rate_16k", 16000, np.int64),
        c("gain_16k", 1.0, np.float32),
        c("gain_8k", 0.5, np.float32),
        w("w_in", 64, 16),
        w("w_rec", 16, 16),
        w("b_h", 16, scale=0.1),
        w("w_out", 16, 2),
        w("b_out", 2, scale=0.1),
        c("idx0", 0, np.int64),
        c("idx1", 1, np.int64),
        c("axis0", [0], np.int64),
    ]
    g = helper.make_graph(
        nodes,
        "vad",
        [
            helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", 64]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", 16]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["batch", 2]),
            helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [2, "batch", 16]),
        ],
        inits,
    )
    save(g, "vad.onnx")


def text():
    n = helper.make_node
    nodes = [
        n("Gather", ["embedding", "ids"], ["emb"], axis=0, name="embed"),
        n("Cast", ["mask"], ["mask_f"], to=TensorProto.FLOAT, name="mask_cast"),
        n("Unsqueeze", ["mask_f", "axis_last"], ["mask_u"], name="mask_unsq"),
        n("Mul", ["emb", "mask_u"], ["emb_masked"], name="mask_mul"),
        n("ReduceSum", ["emb_masked", "axis1"], ["emb_sum"], keepdims=0, name="pool_sum"),
        n("ReduceSum", ["mask_u", "axis1"], ["count"], keepdims=0, name="mask_count"),
        n("Max", ["count", "one"], ["count_1"], name="count_floor"),
        n("Div", ["emb_sum", "count_1"], ["pooled"], name="pool_div"),
        n("MatMul", ["pooled", "w1"], ["h1"], name="fc1"),
        n("Add", ["h1", "b1"], ["h1b"], name="fc1_bias"),
        n("Relu", ["h1b"], ["h1r"], name="fc1_relu"),
        n("Gemm", ["h1r", "w2", "b2"], ["logits"], name="fc2"),
    ]
    inits = [
        w("embedding", 100, 16, scale=1.0),
        c("axis_last", [-1], np.int64),
        c("axis1", [1], np.int64),
        c("one", 1.0, np.float32),
        w("w1", 16, 32),
        w("b1", 32, scale=0.1),
        w("w2", 32, 4),
        w("b2", 4, scale=0.1),
    ]
    g = helper.make_graph(
        nodes,
        "text",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])],
        inits,
    )
    save(g, "text.onnx")


def bytes_model():
    n = helper.make_node
    nodes = [
        n("Range", ["r0", "r256", "r1"], ["byte_values"], name="byte_range"),
        n("Unsqueeze", ["bytes", "axis_last"], ["bytes_u"], name="bytes_unsq"),
        n("Equal", ["bytes_u", "byte_values"], ["onehot_b"], name="onehot_eq"),
        n("Cast", ["onehot_b"], ["onehot"], to=TensorProto.FLOAT, name="onehot_cast"),
        n("Transpose", ["onehot"], ["onehot_t"], perm=[0, 2, 1], name="onehot_t"),
        n("Unsqueeze", ["onehot_t", "axis2"], ["x"], name="to_image"),
        n("Conv", ["x", "conv_w", "conv_b"], ["conv"], kernel_shape=[1, 3],
          pads=[0, 1, 0, 1], name="conv"),
        n("Relu", ["conv"], ["conv_r"], name="conv_relu"),
        n("GlobalAveragePool", ["conv_r"], ["gap"], name="gap"),
        n("Flatten", ["gap"], ["feat"], axis=1, name="flatten"),
        n("Gemm", ["feat", "fc_w", "fc_b"], ["logits"], name="fc"),
    ]
    inits = [
        c("r0", 0, np.int32),
        c("r256", 256, np.int32),
        c("r1", 1, np.int32),
        c("axis_last", [-1], np.int64),
        c("axis2", [2], np.int64),
        w("conv_w", 8, 256, 1, 3, scale=0.5),
        w("conv_b", 8, scale=0.1),
        w("fc_w", 8, 3),
        w("fc_b", 3, scale=0.1),
    ]
    g = helper.make_graph(
        nodes,
        "bytes",
        [helper.make_tensor_value_info("bytes", TensorProto.INT32, ["batch", 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        inits,
    )
    save(g, "bytes.onnx")


if __name__ == "__main__":
    vad()
    text()
    bytes_model()
