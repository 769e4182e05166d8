//! Conv patterns → [`ConvStep`] (`steps/conv.rs`): the QDQ sandwich
//! `DQ(x) → Conv(DQ(w) [, DQ(b)]) [→ Relu | Clip] → Q`, and `QLinearConv`, which reads and
//! writes the codes itself. Either takes a following MaxPool on its codes into the step.

use super::helpers::{Matcher, Tail, Why};
use super::pool::{plane_params, pool_params};
use super::quant::{granularity, saturation, Weight};
use super::Matched;
use crate::steps::ConvStep;
use quantkit_graph::ops::conv::ConvAttrs;
use quantkit_graph::{DType, Data, Node, OpKind};
use quantkit_kernels::conv::{ConvParams, ConvWeights};

impl<'g> Matcher<'g> {
    /// `DQ(x) → Conv(DQ(w) [, DQ(b)]) [→ Relu | Clip] → Q` anchored at the Conv `ni`, with a
    /// following MaxPool on its codes ([`Matcher::max_pool_after`]).
    pub(super) fn conv(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let (dqx, xq, qx) = self.act_input(n)?;
        let wname = n.inputs.get(1).ok_or("no weight")?;
        let Weight {
            dq: dqw,
            values: w,
            shape: wshape,
            scales: s_w,
            zero_points: z_w,
        } = self.weight(wname, 0)?;
        if wshape.len() != 4 {
            return Err(format!(
                "{}-D weight: the kernel is 2-D conv only",
                wshape.len()
            ));
        }
        let params = conv_params(n, &wshape)?;
        let group = params.groups;
        let c_out = wshape[0];
        let mut through = vec![dqx, dqw];
        let bias = match n.inputs.get(2).filter(|b| !b.is_empty()) {
            None => None,
            Some(b) => {
                let (dqb, bv) = self.bias(b, c_out, qx.scale, &s_w)?;
                through.push(dqb);
                Some(bv)
            }
        };
        let Tail {
            absorbed,
            clamp,
            q: qi,
            qp: qy,
        } = self.tail(&n.outputs[0])?;
        let stage = self.stage(qx.scale, &s_w, qy, clamp, bias, 1.0)?;
        let weights = self
            .pack_conv(&w, c_out, wshape[1] * group, params, &z_w, &n.outputs[0])
            .map_err(|e| format!("packing weights: {e}"))?;
        let kind = conv_kind(&weights);
        let mut output = self.g.nodes[qi].outputs[0].clone();
        let mut absorbed = absorbed;
        let pool = self.max_pool_after(&output, qi).map(|(pool, nodes, out)| {
            absorbed.extend(nodes);
            output = out;
            pool
        });
        let desc = format!(
            "{kind} {}→{} {}x{} {}{}",
            qx.dtype,
            qy.dtype,
            wshape[2],
            wshape[3],
            if s_w.len() > 1 {
                "per-channel"
            } else {
                "per-tensor"
            },
            match &pool {
                Some(p) => format!(" + max_pool {}x{}", p.kernel[0], p.kernel[1]),
                None => String::new(),
            }
        );
        Ok(Matched {
            kernel: Box::new(ConvStep {
                weights,
                stage,
                pool,
                x_dtype: qx.dtype,
                x_zp: qx.zp,
                y_dtype: qy.dtype,
                prelu: None,
                table: None,
                desc: desc.clone(),
            }),
            inputs: vec![xq],
            output,
            absorbed,
            through,
            kernel_desc: desc,
        })
    }

    /// The conv's weights packed with the cost model told the output plane `[oh, ow]` when
    /// shape inference gives it for `output` (the conv's NCHW output value, at batch 1 when
    /// the batch is symbolic; Winograd's odd-edge tiles count then,
    /// [`ConvWeights::for_output`]).
    fn pack_conv(
        &self,
        w: &[i8],
        c_out: usize,
        c_in: usize,
        params: ConvParams,
        zero_points: &[i32],
        output: &str,
    ) -> quantkit_kernels::Result<ConvWeights> {
        let plane = self.batch1_shape(output).and_then(|s| match s[..] {
            [_, _, h, w] => Some([h, w]),
            _ => None,
        });
        match plane {
            Some(hw) => ConvWeights::for_output(w, c_out, c_in, params, zero_points, hw),
            None => ConvWeights::new(w, c_out, c_in, params, zero_points),
        }
    }

    /// `value` (the codes a conv step writes, from QuantizeLinear node `qi`) → DQ → MaxPool
    /// → Q with the same parameters (the codes pass unchanged), each read only by the next:
    /// the pool's parameters, those three nodes, and the final Q's output. The conv step then
    /// pools its own output (`conv2d_quant_max_pool`, exact), saving the pool step's pass
    /// and, on the Winograd path, three quarters of the output stage.
    pub(super) fn max_pool_after(
        &self,
        value: &str,
        qi: usize,
    ) -> Option<(ConvParams, Vec<usize>, String)> {
        let dq = &self.g.nodes[self.sole_reader(value).ok()?];
        let pi = self.sole_reader(&dq.outputs[0]).ok()?;
        let p = &self.g.nodes[pi];
        if !p.is(OpKind::MaxPool) || p.inputs.len() != 1 {
            return None;
        }
        let params = pool_params(p).ok()?;
        // The pool step's own pattern, DQ(value) → MaxPool → Q, whose DQ → Q pair must be
        // the identity (same parameters): the pool then runs on the codes.
        let (dqi, xq, _, q2, _) = self.sandwich(p).ok()?;
        let q = &self.g.nodes[q2];
        if xq != value || !matches!(self.table(&self.g.nodes[dqi], None, q), Ok(None)) {
            return None;
        }
        // The nodes come after the conv's Q in node order (the plan keeps that order).
        if [dqi, pi, q2].iter().any(|&i| i < qi) {
            return None;
        }
        Some((params, vec![dqi, pi, q2], q.outputs[0].clone()))
    }

    /// `QLinearConv(x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp [, B])`: 2-D, constant weight and
    /// parameters, optional constant int32 bias of `c_out` values.
    pub(super) fn qlinear_conv(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let x = Self::codes_input(n)?;
        let output = Self::sole_output(n)?;
        let qx = self.qparams_at(n, 1, 2)?;
        let w = self.qweight(n, 3, 4, 0)?;
        let qy = self.qparams_at(n, 6, 7)?;
        let params = conv_params(n, &w.shape)?;
        let c_out = w.shape[0];
        let c_in = w.shape[1]
            .checked_mul(params.groups)
            .ok_or_else(|| format!("group {} is too large", params.groups))?;
        let bias = match n.inputs.get(8).filter(|b| !b.is_empty()) {
            None => None,
            Some(_) => {
                let b = self.const_input(n, 8, "bias")?;
                match &b.data {
                    Data::I32(bv) if b.rank() == 1 && bv.len() == c_out => Some(bv.clone()),
                    _ => {
                        return Err(format!(
                            "bias must be int32 of shape [{c_out}] (got {}{:?})",
                            b.dtype, b.shape
                        ))
                    }
                }
            }
        };
        let has_bias = bias.is_some();
        let stage = self.stage(qx.scale, &w.scales, qy, saturation(qy), bias, 1.0)?;
        let weights = self
            .pack_conv(&w.values, c_out, c_in, params, &w.zero_points, &output)
            .map_err(|e| format!("packing weights: {e}"))?;
        let kind = conv_kind(&weights);
        // A MaxPool reading only these codes runs inside the conv call.
        let mut output = output;
        let mut absorbed = Vec::new();
        let pool = self.sole_reader(&output).ok().and_then(|pi| {
            let p = &self.g.nodes[pi];
            let ok = p.is(OpKind::MaxPool)
                && p.inputs.len() == 1
                && pi > ni
                && p.outputs.first().is_some_and(|o| !o.is_empty());
            let params = pool_params(p).ok().filter(|_| ok)?;
            absorbed.push(pi);
            output = p.outputs[0].clone();
            Some(params)
        });
        let desc = format!(
            "{kind} {}→{} {}x{} {}{}{}{}",
            qx.dtype,
            qy.dtype,
            w.shape[2],
            w.shape[3],
            granularity(&w.scales),
            if w.dtype == DType::U8 {
                " u8 weights"
            } else {
                ""
            },
            if has_bias { " + bias" } else { "" },
            match &pool {
                Some(p) => format!(" + max_pool {}x{}", p.kernel[0], p.kernel[1]),
                None => String::new(),
            }
        );
        Ok(Matched {
            kernel: Box::new(ConvStep {
                weights,
                stage,
                pool,
                x_dtype: qx.dtype,
                x_zp: qx.zp,
                y_dtype: qy.dtype,
                prelu: None,
                table: None,
                desc: desc.clone(),
            }),
            inputs: vec![x],
            output,
            absorbed,
            through: Vec::new(),
            kernel_desc: desc,
        })
    }
}

/// The 2-D convolution parameters of a Conv or ConvInteger node with weight shape `wshape`
/// (`[c_out, c_in/group, kh, kw]`). Attributes are read by the registry's [`ConvAttrs`],
/// the executor's own parse.
pub(super) fn conv_params(n: &Node, wshape: &[usize]) -> Why<ConvParams> {
    let a = ConvAttrs::parse(n).map_err(|e| e.to_string())?;
    let (stride, dilation, pads) = plane_params(&a.strides, &a.dilations, &a.pads)?;
    if let Some(k) = &a.kernel_shape {
        if k.len() != 2 || k[0] != wshape[2] || k[1] != wshape[3] {
            return Err(format!("kernel_shape {k:?} differs from the weight"));
        }
    }
    Ok(ConvParams {
        kernel: [wshape[2], wshape[3]],
        stride,
        dilation,
        pads,
        groups: a.group,
    })
}

/// The step name's kernel family: `depthwise conv2d`, `winograd conv2d`, `direct conv2d`
/// (the im2col-free `vpdpbusd` conv) or `conv2d` (im2col + GEMM).
pub(crate) fn conv_kind(weights: &ConvWeights) -> &'static str {
    match weights.method() {
        "depthwise" => "depthwise conv2d",
        "winograd" => "winograd conv2d",
        "winograd4" => "winograd4 conv2d",
        "direct" => "direct conv2d",
        _ => "conv2d",
    }
}
