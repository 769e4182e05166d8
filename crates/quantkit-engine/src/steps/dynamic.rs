//! The dynamic-quantization step, produced by `compile/dynamic.rs`.

use super::{alloc_len, bad, first, kernel_err, nhwc_input, Kernel};
use crate::error::Result;
use crate::value::Val;
use crate::Step;
use quantkit_graph::{DType, Data, Tensor};
use quantkit_kernels::conv::{conv2d_i32, conv2d_output_shape, ConvParams, ConvWeights, NhwcInput};
use quantkit_kernels::gemm::{gemm_i32, Activations, PackedWeights};
use quantkit_kernels::pool::max_pool;

/// The integer operator of a [`DynamicStep`], with its weights packed once at compile time.
pub(crate) enum DynOp {
    /// ConvInteger: 2-D conv, NHWC inside the step.
    Conv(ConvWeights),
    /// MatMulInteger with a constant `[K, N]` B.
    Gemm(PackedWeights),
}

/// ONNX Runtime's dynamic-quantization chain as one step: `DynamicQuantizeLinear(x)`,
/// `ConvInteger`/`MatMulInteger` with constant int8 weights, `Cast` to f32, `Mul` by
/// `x_scale · w_scale[c]`, optional `Add` of `bias[c]`. Every float operation is the one the
/// graph crate's operators perform, in the same order, so the output is bit-identical to the
/// float executor's on the same graph.
pub(crate) struct DynamicStep {
    pub op: DynOp,
    /// Weight scale, one entry or one per output channel.
    pub w_scale: Vec<f32>,
    /// Bias, one entry or one per output channel.
    pub bias: Option<Vec<f32>>,
    /// A following float `Relu` (`max(y, 0)`, as the graph's operator computes it).
    pub relu: bool,
    /// A following float `MaxPool` (conv only), on the NHWC result.
    pub pool: Option<ConvParams>,
    /// Largest rank of the scale and bias constants: the broadcast output has at least this
    /// rank (leading 1s), as in the graph's `Mul`/`Add`.
    pub min_rank: usize,
    pub desc: String,
}

/// `DynamicQuantizeLinear` with the graph operator's own arithmetic: the codes (same order
/// as `v`), the scale and the zero point.
fn dynamic_quantize(v: &[f32]) -> (Vec<u8>, f32, i32) {
    let (q, scale, zp) = quantkit_graph::ops::dynamic_quantize_linear::quantize(v);
    (q, scale, zp as i32)
}

/// Accumulators per chunk of images of a dynamic conv (4 MiB of i32): the conv, its float
/// epilogue and the pool run chunk by chunk, so the data stays in cache between them and no
/// batch-sized i32 buffer is allocated (at 32 MiB and more glibc maps fresh pages for it on
/// every run, and page faults then cost as much as the conv).
const DYN_CHUNK_ACC: usize = 1 << 20;

impl DynamicStep {
    /// The graph's `Cast`, `Mul(x_scale · w_scale)`, `Add(bias)` and `Relu` on `acc`
    /// (channels fastest), written to `out`: one f32 rounding per operation, in the graph's
    /// order (Rust does not contract `a * b + c` into a fused multiply-add).
    fn epilogue(&self, acc: &[i32], x_scale: f32, channels: usize, out: &mut [f32]) {
        if channels == 0 {
            return;
        }
        let pick = |v: &[f32], c: usize| if v.len() == 1 { v[0] } else { v[c] };
        let sc: Vec<f32> = (0..channels)
            .map(|c| x_scale * pick(&self.w_scale, c))
            .collect();
        let bias: Vec<f32> = match &self.bias {
            Some(b) => (0..channels).map(|c| pick(b, c)).collect(),
            None => Vec::new(),
        };
        let relu = self.relu;
        for (a, y) in acc
            .chunks_exact(channels)
            .zip(out.chunks_exact_mut(channels))
        {
            if bias.is_empty() {
                for ((y, &a), &s) in y.iter_mut().zip(a).zip(&sc) {
                    let t = a as f32 * s;
                    *y = if relu { t.max(0.0) } else { t };
                }
            } else {
                for (((y, &a), &s), &b) in y.iter_mut().zip(a).zip(&sc).zip(&bias) {
                    let t = a as f32 * s + b;
                    *y = if relu { t.max(0.0) } else { t };
                }
            }
        }
    }
}

impl Kernel for DynamicStep {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        if x.tensor.dtype != DType::F32 {
            return Err(bad(
                step,
                "input 0",
                format!("expected f32, got {}", x.tensor.dtype),
            ));
        }
        let (y, out_shape, nhwc) = match &self.op {
            DynOp::Conv(w) => {
                let x = nhwc_input(step, x)?;
                let Data::F32(v) = &x.data else {
                    return Err(bad(step, "input 0", "not f32 data".into()));
                };
                // One scale and zero point for the whole tensor, as the graph computes them.
                let (q, x_scale, zp) = dynamic_quantize(v);
                let s = &x.shape;
                let shape = [s[0], s[1], s[2], s[3]];
                let [n, oh, ow, co] = conv2d_output_shape(shape, w).map_err(kernel_err(step))?;
                let [fh, fw] = match &self.pool {
                    Some(p) => p.output_size(oh, ow).map_err(kernel_err(step))?,
                    None => [oh, ow],
                };
                alloc_len(step, "accumulator", &[oh, ow, co])?;
                alloc_len(step, "output", &[n, fh, fw, co])?;
                let (per_in, per_acc) = (shape[1] * shape[2] * shape[3], oh * ow * co);
                let chunk = (DYN_CHUNK_ACC / per_acc.max(1)).clamp(1, n.max(1));
                let per_y = fh * fw * co;
                let mut acc = vec![0i32; chunk * per_acc];
                // The float result before pooling, per chunk (only needed with a pool).
                let mut yc = vec![
                    0f32;
                    if self.pool.is_some() {
                        chunk * per_acc
                    } else {
                        0
                    }
                ];
                let mut y = vec![0f32; n * per_y];
                for b0 in (0..n).step_by(chunk) {
                    let nb = chunk.min(n - b0);
                    let input = NhwcInput {
                        data: &q[b0 * per_in..(b0 + nb) * per_in],
                        shape: [nb, shape[1], shape[2], shape[3]],
                        zero_point: zp,
                    };
                    let a = &mut acc[..nb * per_acc];
                    conv2d_i32(&input, w, a).map_err(kernel_err(step))?;
                    let yb = &mut y[b0 * per_y..(b0 + nb) * per_y];
                    match &self.pool {
                        Some(p) => {
                            let yc = &mut yc[..nb * per_acc];
                            self.epilogue(a, x_scale, co, yc);
                            max_pool(yc, [nb, oh, ow, co], p, yb).map_err(kernel_err(step))?;
                        }
                        None => self.epilogue(a, x_scale, co, yb),
                    }
                }
                (y, vec![n, fh, fw, co], true)
            }
            DynOp::Gemm(w) => {
                let x = x.to_nchw();
                let (k, n) = (w.k(), w.n());
                if x.rank() == 0 || x.shape.last() != Some(&k) {
                    return Err(bad(
                        step,
                        "input 0",
                        format!("expected [.., {k}], got {:?}", x.shape),
                    ));
                }
                let Data::F32(v) = &x.data else {
                    return Err(bad(step, "input 0", "not f32 data".into()));
                };
                let (q, x_scale, zp) = dynamic_quantize(v);
                let m = v.len() / k.max(1);
                let mut out_shape = x.shape.clone();
                *out_shape.last_mut().expect("rank ≥ 1") = n;
                while out_shape.len() < self.min_rank {
                    out_shape.insert(0, 1);
                }
                let mn = alloc_len(step, "output", &[m, n])?;
                let mut acc = vec![0i32; mn];
                gemm_i32(&Activations::u8(&q, m, k, zp), w, &mut acc).map_err(kernel_err(step))?;
                let mut y = vec![0f32; mn];
                self.epilogue(&acc, x_scale, n, &mut y);
                (y, out_shape, false)
            }
        };
        let t =
            Tensor::new(out_shape, Data::F32(y)).map_err(|e| bad(step, "output", e.to_string()))?;
        Ok(vec![Val { tensor: t, nhwc }])
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
}
