//! Pool patterns → [`MaxPoolStep`], [`GlobalAvgPoolStep`] (`steps/pool.rs`): `DQ(x) → MaxPool → Q` (the pool on
//! the codes, then a table when the parameters change), and a MaxPool reading codes another
//! step wrote (QOperator models); `DQ(x) → GlobalAveragePool → Q` with the reference's exact f64 sums (as integer sums of
//! the table's units, `steps/pool.rs`).

use super::helpers::{Matcher, Why};
use super::Matched;
use crate::steps::{GlobalAvgPoolStep, MaxPoolStep};
use quantkit_graph::ops::pool::PoolAttrs;
use quantkit_graph::ops::PadSpec;
use quantkit_graph::ops::{self, OpCtx};
use quantkit_graph::{DType, Node};
use quantkit_graph::{Data, Tensor};
use quantkit_kernels::conv::ConvParams;

impl<'g> Matcher<'g> {
    /// `DQ(x) → MaxPool → Q` anchored at the MaxPool `ni`: the pool on the codes, then a
    /// table when the output's parameters differ.
    pub(super) fn max_pool(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let (params, same) = max_pool_params(n)?;
        let k = params.kernel;
        let (dqx, xq, qx, qi, qy) = self.sandwich(n)?;
        let table = self.table(&self.g.nodes[dqx], None, &self.g.nodes[qi])?;
        let desc = format!(
            "max_pool {}→{} {}x{}{}",
            qx.dtype,
            qy.dtype,
            k[0],
            k[1],
            same_desc(&same)
        );
        Ok(Matched {
            kernel: Box::new(MaxPoolStep {
                params,
                same,
                x_dtype: qx.dtype,
                table,
            }),
            inputs: vec![xq],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed: vec![qi],
            through: vec![dqx],
            kernel_desc: desc,
        })
    }

    /// MaxPool on codes another step produced (QOperator models keep MaxPool on the
    /// quantized tensor): the integer max pool, no requantization.
    pub(super) fn max_pool_codes(&self, ni: usize, dtype: DType) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let (params, same) = max_pool_params(n)?;
        let x = Self::codes_input(n)?;
        let output = n
            .outputs
            .first()
            .filter(|o| !o.is_empty())
            .cloned()
            .ok_or("no output")?;
        let desc = format!(
            "max_pool {dtype} {}x{}{} on codes",
            params.kernel[0],
            params.kernel[1],
            same_desc(&same)
        );
        Ok(Matched {
            kernel: Box::new(MaxPoolStep {
                params,
                same,
                x_dtype: dtype,
                table: None,
            }),
            inputs: vec![x],
            output,
            absorbed: Vec::new(),
            through: Vec::new(),
            kernel_desc: desc,
        })
    }
}

/// [`pool_params`], or for `auto_pad = SAME_UPPER | SAME_LOWER` the parameters with zero
/// pads and the rule the step resolves the pads by at run time, from the input's size
/// ([`PadSpec::resolve`], the executor's own rule). The pool kernel ignores padded taps,
/// so the padding acts as −∞ whichever pads the rule gives.
pub(super) fn max_pool_params(n: &Node) -> Why<(ConvParams, Option<PadSpec>)> {
    let a = PoolAttrs::parse(n).map_err(|e| e.to_string())?;
    match a.pads {
        PadSpec::SameUpper | PadSpec::SameLower => {
            if n.outputs.len() > 1 && !n.outputs[1].is_empty() {
                return Err("the Indices output is used".into());
            }
            // The executor's SAME output size with ceil_mode can exceed ceil(in / stride)
            // when the window is shorter than the stride; not worth a second rule here.
            if a.ceil_mode {
                return Err("ceil_mode = 1 with auto_pad SAME".into());
            }
            let k = &a.kernel_shape;
            if k.len() != 2 {
                return Err(format!("kernel_shape {k:?}: the kernel is 2-D"));
            }
            let (stride, dilation, _) = plane_params(&a.strides, &a.dilations, &PadSpec::Valid)?;
            let params = ConvParams {
                kernel: [k[0], k[1]],
                stride,
                dilation,
                pads: [0; 4],
                groups: 1,
            };
            Ok((params, Some(a.pads)))
        }
        _ => Ok((pool_params(n)?, None)),
    }
}

fn same_desc(same: &Option<PadSpec>) -> &'static str {
    match same {
        Some(PadSpec::SameLower) => " SAME_LOWER",
        Some(_) => " SAME_UPPER",
        None => "",
    }
}

/// The 2-D parameters of a MaxPool node the NHWC pooling steps run: floor output size, no
/// Indices output, explicit pads (or VALID). Attributes are read by the registry's
/// [`PoolAttrs`], the executor's own parse.
pub(super) fn pool_params(n: &Node) -> Why<ConvParams> {
    if n.outputs.len() > 1 && !n.outputs[1].is_empty() {
        return Err("the Indices output is used".into());
    }
    let a = PoolAttrs::parse(n).map_err(|e| e.to_string())?;
    if a.ceil_mode {
        return Err("ceil_mode = 1".into());
    }
    let k = &a.kernel_shape;
    if k.len() != 2 {
        return Err(format!("kernel_shape {k:?}: the kernel is 2-D"));
    }
    let (stride, dilation, pads) = plane_params(&a.strides, &a.dilations, &a.pads)?;
    Ok(ConvParams {
        kernel: [k[0], k[1]],
        stride,
        dilation,
        pads,
        groups: 1,
    })
}

/// Strides, dilations and `[t, l, b, r]` pads of a 2-D window, when they do not depend on
/// the input size (the plan is compiled before shapes are known).
pub(super) fn plane_params(
    strides: &Option<Vec<usize>>,
    dilations: &Option<Vec<usize>>,
    pads: &PadSpec,
) -> Why<([usize; 2], [usize; 2], [usize; 4])> {
    let two = |name: &str, v: &Option<Vec<usize>>| -> Why<[usize; 2]> {
        match v.as_deref() {
            None => Ok([1; 2]),
            Some(&[a, b]) => Ok([a, b]),
            Some(v) => Err(format!("{name} {v:?} not supported")),
        }
    };
    let pads = match pads.fixed() {
        None => {
            let name = match pads {
                PadSpec::SameLower => "SAME_LOWER",
                _ => "SAME_UPPER",
            };
            return Err(format!("auto_pad {name} needs the input size"));
        }
        Some(p) if p.is_empty() => [0; 4],
        Some(p) if p.len() == 4 => [p[0], p[1], p[2], p[3]],
        Some(p) => return Err(format!("pads {p:?} not supported")),
    };
    Ok((two("strides", strides)?, two("dilations", dilations)?, pads))
}

impl<'g> Matcher<'g> {
    /// `DQ(x) → GlobalAveragePool → Q` anchored at `ni` (see [`GlobalAvgPoolStep`]).
    pub(super) fn global_avg_pool(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let (dqx, xq, qx, qi, qy) = self.sandwich(n)?;
        let dq = &self.g.nodes[dqx];
        let probe = match qx.dtype {
            DType::U8 => Tensor::new(vec![256], Data::U8((0..=255).collect())),
            _ => Tensor::new(vec![256], Data::I8((0..=255u8).map(|b| b as i8).collect())),
        }
        .map_err(|e| e.to_string())?;
        let f = ops::lookup(&dq.domain, &dq.op_type).ok_or("no DequantizeLinear")?;
        let mut args: Vec<Option<&Tensor>> = vec![Some(&probe)];
        for i in &dq.inputs[1..] {
            args.push(if i.is_empty() { None } else { self.init(i) });
        }
        let ctx = OpCtx {
            node: dq,
            opset: self.opset,
        };
        let v = f(&ctx, &args)
            .map_err(|e| format!("`{}`: {e}", dq.name))?
            .first()
            .ok_or("no output")?
            .to_f32_vec();
        let table: [f32; 256] = v.try_into().map_err(|_| "DQ is not element-wise")?;
        let desc = format!("global_avg_pool {}→{}", qx.dtype, qy.dtype);
        Ok(Matched {
            kernel: Box::new(GlobalAvgPoolStep {
                dq: Box::new(table),
                x_dtype: qx.dtype,
                scale: qy.scale,
                zp: qy.zp,
                out: qy.dtype,
            }),
            inputs: vec![xq],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed: vec![qi],
            through: vec![dqx],
            kernel_desc: desc,
        })
    }
}
