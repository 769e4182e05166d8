//! ONNX Runtime's dynamic quantization → [`DynamicStep`] (`steps/dynamic.rs`):
//! `DynamicQuantizeLinear → ConvInteger | MatMulInteger → Cast → Mul [→ Add] [→ Relu]
//! [→ MaxPool]` as one step reading the float input.

use super::conv::{conv_kind, conv_params};
use super::helpers::{Matcher, Why};
use super::pool::pool_params;
use super::Matched;
use crate::steps::{DynOp, DynamicStep};
use quantkit_graph::OpKind;
use quantkit_graph::{DType, Data, Node};
use quantkit_kernels::conv::ConvWeights;
use quantkit_kernels::gemm::{PackedWeights, WeightLayout};

impl<'g> Matcher<'g> {
    /// The constant f32 tensor `name` when its shape broadcasts per output channel against
    /// the integer op's output: a scalar or one element, or `channels` values on the channel
    /// axis (`[C,1,1]`/`[1,C,1,1]` for conv, `[C]`/`[1,C]` for MatMul). Returns the values
    /// and the tensor's rank (a rank-2 constant makes a 1-D MatMul result 2-D).
    pub(super) fn channel_const(
        &self,
        name: &str,
        conv: bool,
        channels: usize,
    ) -> Why<(Vec<f32>, usize)> {
        let t = self
            .init(name)
            .filter(|t| t.dtype == DType::F32)
            .ok_or_else(|| format!("`{name}` is not a constant f32"))?;
        let s = t.shape.as_slice();
        let ok = match s {
            [] | [1] => true,
            _ if conv => matches!(s, [c, 1, 1] | [1, c, 1, 1] if *c == channels),
            _ => matches!(s, [c] | [1, c] if *c == channels),
        };
        if !ok {
            return Err(format!(
                "`{name}` of shape {s:?} is not per output channel ({channels} channels)"
            ));
        }
        Ok((t.to_f32_vec(), t.rank()))
    }

    /// ONNX Runtime's dynamic quantization anchored at a ConvInteger or MatMulInteger:
    /// `DynamicQuantizeLinear(x) → (xq, xs, xz)`, `op(xq, W int8 constant, xz, wz constant)
    /// → Cast(float) → Mul(·, Mul(xs, w_scale)) [→ Add(·, bias)]` (see
    /// `quantkit-ptq/src/dynamic.rs`). One step reading the float `x`.
    pub(super) fn dynamic(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let conv = n.is(OpKind::ConvInteger);
        if n.inputs.len() < 3 || n.inputs[0].is_empty() || n.inputs[2].is_empty() {
            return Err("the input zero point is absent".into());
        }
        let di = self
            .uses
            .producer(n.inputs[0].as_str())
            .ok_or("the input does not come from a DynamicQuantizeLinear")?;
        let d = &self.g.nodes[di];
        if !d.is(OpKind::DynamicQuantizeLinear)
            || d.outputs.len() != 3
            || d.outputs[0] != n.inputs[0]
            || d.outputs[2] != n.inputs[2]
        {
            return Err(format!(
                "input and zero point do not come from one DynamicQuantizeLinear (`{}`)",
                d.name
            ));
        }
        let x = d
            .inputs
            .first()
            .filter(|x| !x.is_empty())
            .ok_or("no input")?;
        let w = self
            .init(&n.inputs[1])
            .ok_or_else(|| format!("weight `{}` is not a constant", n.inputs[1]))?;
        let (Data::I8(wv), DType::I8) = (&w.data, w.dtype) else {
            return Err(format!("weight `{}` is {}, not int8", n.inputs[1], w.dtype));
        };
        let channels = if conv {
            if w.rank() != 4 {
                return Err(format!(
                    "{}-D weight: the kernel is 2-D conv only",
                    w.rank()
                ));
            }
            w.shape[0]
        } else {
            if w.rank() != 2 {
                return Err(format!(
                    "{}-D weight: the GEMM kernel takes 2-D B",
                    w.rank()
                ));
            }
            w.shape[1]
        };
        let wz: Vec<i32> = match n.inputs.get(3).filter(|z| !z.is_empty()) {
            None => vec![0],
            Some(z) => self
                .init(z)
                .filter(|z| z.dtype == DType::I8 && (z.len() == 1 || z.len() == channels))
                .filter(|z| z.rank() <= 1)
                .ok_or_else(|| {
                    format!("weight zero point `{z}` is not a constant i8 (one or per channel)")
                })?
                .to_i64_vec()
                .iter()
                .map(|&v| v as i32)
                .collect(),
        };
        // i32 → Cast(float) → Mul(·, s) with s = Mul(x_scale, w_scale).
        let ci = self.sole_reader(&n.outputs[0])?;
        let cast = &self.g.nodes[ci];
        let to = cast.attr_int("to", 0).map_err(|e| e.to_string())?;
        if !cast.is(OpKind::Cast) || to != i64::from(DType::F32.onnx_code()) {
            return Err(format!(
                "the int32 result feeds {} `{}`, not a Cast to float",
                cast.op_type, cast.name
            ));
        }
        let mi = self.sole_reader(&cast.outputs[0])?;
        let mul = &self.g.nodes[mi];
        let other = |node: &Node, v: &str| -> Option<String> {
            match node.inputs.as_slice() {
                [a, b] if a == v => Some(b.clone()),
                [a, b] if b == v => Some(a.clone()),
                _ => None,
            }
        };
        let scale_v = (mul.is(OpKind::Mul))
            .then(|| other(mul, &cast.outputs[0]))
            .flatten()
            .ok_or_else(|| format!("the Cast feeds {} `{}`, not a Mul", mul.op_type, mul.name))?;
        let si = self
            .uses
            .producer(scale_v.as_str())
            .ok_or_else(|| format!("scale `{scale_v}` is not computed by a Mul"))?;
        let smul = &self.g.nodes[si];
        if !smul.is(OpKind::Mul) || self.sole_reader(&scale_v)? != mi {
            return Err(format!(
                "scale `{scale_v}` is not a Mul read only by `{}`",
                mul.name
            ));
        }
        let w_scale_name = other(smul, &d.outputs[1])
            .ok_or_else(|| format!("`{}` does not multiply the input scale", smul.name))?;
        let (w_scale, mut const_rank) = self.channel_const(&w_scale_name, conv, channels)?;
        if w_scale.iter().any(|s| !s.is_finite()) {
            return Err(format!("weight scale `{w_scale_name}` is not finite"));
        }
        let mut absorbed = vec![ci, si, mi];
        let mut output = mul.outputs[0].clone();
        let mut bias = None;
        if let Ok(ai) = self.sole_reader(&output) {
            let add = &self.g.nodes[ai];
            if add.is(OpKind::Add) {
                if let Some(b) = other(add, &output) {
                    if let Ok((bv, rank)) = self.channel_const(&b, conv, channels) {
                        bias = Some(bv);
                        const_rank = const_rank.max(rank);
                        absorbed.push(ai);
                        output = add.outputs[0].clone();
                    }
                }
            }
        }
        // A float Relu, then (conv only) a float MaxPool, read only by the previous node
        // run inside the step too: on the NHWC f32 result they cost one pass over channels,
        // where as graph islands each would transpose the whole tensor back to NCHW.
        let mut relu = false;
        if let Ok(ri) = self.sole_reader(&output) {
            let r = &self.g.nodes[ri];
            if r.is(OpKind::Relu) && r.outputs.len() == 1 {
                relu = true;
                absorbed.push(ri);
                output = r.outputs[0].clone();
            }
        }
        let mut pool = None;
        if conv {
            if let Ok(pi) = self.sole_reader(&output) {
                let p = &self.g.nodes[pi];
                if p.is(OpKind::MaxPool) && p.inputs.len() == 1 {
                    if let Ok(params) = pool_params(p) {
                        pool = Some(params);
                        absorbed.push(pi);
                        output = p.outputs[0].clone();
                    }
                }
            }
        }
        if absorbed.iter().any(|&a| a < ni) {
            return Err("the float tail comes before the integer op in node order".into());
        }
        let (op, kind) = if conv {
            let params = conv_params(n, &w.shape)?;
            let group = params.groups;
            let weights = ConvWeights::new(wv, channels, w.shape[1] * group, params, &wz)
                .map_err(|e| format!("packing weights: {e}"))?;
            let kind = conv_kind(&weights);
            (
                DynOp::Conv(weights),
                format!("{kind} {}x{}", w.shape[2], w.shape[3]),
            )
        } else {
            let (k, nn) = (w.shape[0], w.shape[1]);
            let weights = PackedWeights::from_i8(wv, k, nn, WeightLayout::KxN, &wz)
                .map_err(|e| format!("packing weights: {e}"))?;
            (DynOp::Gemm(weights), format!("gemm {k}x{nn}"))
        };
        let desc = format!(
            "dynamic {kind} u8 x i8 -> f32 {}{}{}{}",
            if w_scale.len() > 1 {
                "per-channel"
            } else {
                "per-tensor"
            },
            if bias.is_some() { " + bias" } else { "" },
            if relu { " + relu" } else { "" },
            match &pool {
                Some(p) => format!(" + max_pool {}x{}", p.kernel[0], p.kernel[1]),
                None => String::new(),
            }
        );
        Ok(Matched {
            kernel: Box::new(DynamicStep {
                op,
                w_scale,
                bias,
                relu,
                pool,
                min_rank: const_rank,
                desc: desc.clone(),
            }),
            inputs: vec![x.clone()],
            output,
            absorbed,
            through: vec![di],
            kernel_desc: desc,
        })
    }
}
