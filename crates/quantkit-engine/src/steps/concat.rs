//! Concat of 8-bit code tensors, produced by `compile/concat.rs`: `DQ(x_i)… → Concat → Q`.
//!
//! Concat only moves values, so each output code is `Q_y(DQ_i(code))` of one input code: a
//! 256-entry table per input (made with the graph's own DequantizeLinear/QuantizeLinear, so
//! exact), or a plain copy when input `i` has the output's parameters. NHWC 4-D inputs
//! joined on the channel axis are interleaved per pixel without leaving NHWC; every other
//! case runs the graph's Concat on the (tabled) codes in ONNX order.

use super::{alloc_len, bad, GraphOp, Kernel, Table};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::{DType, Data, Tensor};

/// `DQ(x_i)… → Concat → Q` on codes.
pub(crate) struct ConcatStep {
    /// Per input: its code type and the table to the output's codes (`None`: a copy).
    pub parts: Vec<(DType, Option<Table>)>,
    /// Concat axis as the attribute gives it (ONNX order; negative from the end).
    pub axis: i64,
    pub out: DType,
    /// The graph's Concat, for every layout but NHWC channels.
    pub graph_op: GraphOp,
}

fn bytes_of(t: &Tensor) -> &[u8] {
    match &t.data {
        Data::U8(d) => d,
        // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
        Data::I8(d) => unsafe { std::slice::from_raw_parts(d.as_ptr().cast(), d.len()) },
        _ => &[],
    }
}

impl Kernel for ConcatStep {
    fn per_image(&self, _consts: &[Option<&Tensor>]) -> bool {
        // Along an axis after the batch (a negative axis may be the batch's: not known
        // without the rank).
        self.axis >= 1
    }
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        if inputs.len() != self.parts.len() {
            return Err(bad(
                step,
                "inputs",
                format!("expected {}", self.parts.len()),
            ));
        }
        let mut xs = Vec::with_capacity(inputs.len());
        for (k, (v, (dt, _))) in inputs.iter().zip(&self.parts).enumerate() {
            let v = v.ok_or_else(|| bad(step, &format!("input {k}"), "missing".into()))?;
            if v.tensor.dtype != *dt {
                return Err(bad(
                    step,
                    &format!("input {k}"),
                    format!("expected {dt} codes, got {}", v.tensor.dtype),
                ));
            }
            xs.push(v);
        }
        let nhwc_channels = (self.axis == 1 || self.axis == -3)
            && xs.iter().all(|v| v.nhwc && v.tensor.rank() == 4)
            && xs
                .windows(2)
                .all(|w| w[0].tensor.shape[..3] == w[1].tensor.shape[..3]);
        if nhwc_channels {
            let s = &xs[0].tensor.shape;
            let pixels = s[0] * s[1] * s[2];
            let c_total: usize = xs.iter().map(|v| v.tensor.shape[3]).sum();
            let out_shape = vec![s[0], s[1], s[2], c_total];
            let len = alloc_len(step, "output", &out_shape)?;
            let mut out = vec![0u8; len];
            let mut off = 0;
            for (v, (_, table)) in xs.iter().zip(&self.parts) {
                let c = v.tensor.shape[3];
                let src = bytes_of(&v.tensor);
                for p in 0..pixels {
                    let d = &mut out[p * c_total + off..][..c];
                    let s = &src[p * c..][..c];
                    match table {
                        None => d.copy_from_slice(s),
                        Some(t) => d
                            .iter_mut()
                            .zip(s)
                            .for_each(|(d, &x)| *d = t.bytes[x as usize]),
                    }
                }
                off += c;
            }
            let tensor = match self.out {
                DType::U8 => tensor_u8(out_shape, out),
                _ => tensor_i8(out_shape, out.into_iter().map(|b| b as i8).collect()),
            };
            return Ok(vec![Val { tensor, nhwc: true }]);
        }
        let tabled: Vec<Tensor> = xs
            .iter()
            .zip(&self.parts)
            .map(|(v, (_, table))| {
                let t = Val::nchw(v.to_nchw().into_owned());
                match table {
                    Some(tb) => tb.apply(t).tensor,
                    None => t.tensor,
                }
            })
            .collect();
        let args: Vec<Option<&Tensor>> = tabled.iter().map(Some).collect();
        let y = self.graph_op.eval(&args)?.remove(0);
        Ok(vec![Val::nchw(y)])
    }
    fn describe(&self) -> String {
        let copies = self.parts.iter().filter(|p| p.1.is_none()).count();
        format!(
            "concat of {} {} code tensors ({copies} copied, {} requantized by table)",
            self.parts.len(),
            self.out,
            self.parts.len() - copies
        )
    }
}
