//! ConvTranspose pattern → [`ConvTransposeStep`] (`steps/conv_transpose.rs`): the QDQ
//! sandwich `DQ(x) → ConvTranspose(DQ(w) [, DQ(b)]) [→ Relu | Clip] → Q`, 2-D, any groups,
//! strides, dilations, pads, output_padding, and `auto_pad` / `output_shape` (the pads then
//! follow from the input's size, resolved per run by the executor's own rule).

use super::helpers::{Matcher, Tail, Why};
use super::Matched;
use crate::steps::ConvTransposeStep;
use quantkit_graph::ops::conv_transpose::{ConvTransposeAttrs, DeconvAutoPad};
use quantkit_graph::Node;
use quantkit_kernels::conv::ConvParams;
use quantkit_kernels::deconv::DeconvWeights;

impl<'g> Matcher<'g> {
    /// `DQ(x) → ConvTranspose(DQ(w) [, DQ(b)]) [→ Relu | Clip] → Q` anchored at `ni`.
    /// Weights `[C_in, C_out/group, kh, kw]`, per-tensor or per output channel (DQ axis 1,
    /// `C_out/group` scales, shared by the groups as ONNX's per-axis rule makes them).
    pub(super) fn conv_transpose(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let (dqx, xq, qx) = self.act_input(n)?;
        let wname = n.inputs.get(1).ok_or("no weight")?;
        let w = self.weight(wname, 1)?;
        if w.shape.len() != 4 {
            return Err(format!(
                "{}-D weight: the kernel is 2-D ConvTranspose only",
                w.shape.len()
            ));
        }
        let a = deconv_attrs(n, &w.shape)?;
        let group = a.params.groups;
        let (c_in, cog) = (w.shape[0], w.shape[1]);
        let c_out = cog
            .checked_mul(group)
            .ok_or_else(|| format!("group {group} is too large"))?;
        // Per-axis parameters along axis 1 have C_out/group entries: output channel
        // g·(C_out/group) + j uses entry j.
        let per_out = |v: &[f32]| -> Vec<f32> {
            if v.len() == 1 {
                v.to_vec()
            } else {
                (0..c_out).map(|c| v[c % cog]).collect()
            }
        };
        let s_w = per_out(&w.scales);
        let z_w: Vec<i32> = if w.zero_points.len() == 1 {
            w.zero_points.clone()
        } else {
            (0..c_out).map(|c| w.zero_points[c % cog]).collect()
        };
        let mut through = vec![dqx, w.dq];
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
        let weights = DeconvWeights::new(&w.values, c_in, c_out, a.params, a.output_padding, &z_w)
            .map_err(|e| format!("packing weights: {e}"))?;
        let desc = format!(
            "deconv2d {}→{} {}x{} s{}x{}{} {} ({})",
            qx.dtype,
            qy.dtype,
            w.shape[2],
            w.shape[3],
            a.params.stride[0],
            a.params.stride[1],
            if group > 1 {
                format!(" group {group}")
            } else {
                String::new()
            },
            if w.scales.len() > 1 {
                "per-channel"
            } else {
                "per-tensor"
            },
            weights.algorithm().name(),
        );
        Ok(Matched {
            kernel: Box::new(ConvTransposeStep {
                weights,
                attrs: a.attrs,
                stage,
                x_dtype: qx.dtype,
                x_zp: qx.zp,
                y_dtype: qy.dtype,
                desc: desc.clone(),
            }),
            inputs: vec![xq],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed,
            through,
            kernel_desc: desc,
        })
    }
}

/// A 2-D ConvTranspose's kernel parameters (the explicit pads, zero when they depend on the
/// input's size), its output padding, and the parsed attributes the step resolves the pads
/// by per run.
struct DeconvAttrs {
    params: ConvParams,
    output_padding: [usize; 2],
    attrs: ConvTransposeAttrs,
}

/// Reads a ConvTranspose node's attributes through the registry's [`ConvTransposeAttrs`]
/// (the executor's own parse) for weight shape `wshape`.
fn deconv_attrs(n: &Node, wshape: &[usize]) -> Why<DeconvAttrs> {
    let a = ConvTransposeAttrs::parse(n, 2).map_err(|e| e.to_string())?;
    if let Some(k) = &a.kernel_shape {
        if k.len() != 2 || k[0] != wshape[2] || k[1] != wshape[3] {
            return Err(format!("kernel_shape {k:?} differs from the weight"));
        }
    }
    let fixed = match (&a.pads, &a.output_shape, a.auto_pad) {
        (Some(p), None, DeconvAutoPad::NotSet) => {
            if p.iter().any(|&v| v < 0) {
                return Err(format!("negative pads {p:?}"));
            }
            [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize]
        }
        _ => [0; 4],
    };
    Ok(DeconvAttrs {
        params: ConvParams {
            kernel: [wshape[2], wshape[3]],
            stride: [a.strides[0], a.strides[1]],
            dilation: [a.dilations[0], a.dilations[1]],
            pads: fixed,
            groups: a.group,
        },
        output_padding: [a.output_padding[0], a.output_padding[1]],
        attrs: a,
    })
}
