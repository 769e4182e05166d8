//! The PRelu pattern → [`ChannelTableStep`] (`steps/prelu.rs`): `DQ(x) → PRelu(slope) → Q`
//! with a constant slope of one value or one per channel (axis 1): a 256-entry table per
//! channel, evaluated with the graph's own DequantizeLinear, PRelu and QuantizeLinear on all
//! codes of every channel, so it equals the QDQ graph bit for bit.

use super::helpers::{Matcher, Why};
use super::Matched;
use crate::steps::ChannelTableStep;
use quantkit_graph::ops::{self, OpCtx};
use quantkit_graph::{DType, Data, Node, Tensor};
use quantkit_kernels::prelu::PreluCodes;

/// Channels and input rank when `slope` broadcasts along axis 1 only: `[C, 1, …]` (input
/// rank = slope rank + 1) or `[1, C, 1, …]` (same rank); one value: 1 channel, rank 0
/// (any rank).
fn channel_layout(slope: &[usize]) -> Option<(usize, usize)> {
    let n: usize = slope.iter().product();
    if n == 1 {
        return Some((1, 0));
    }
    if slope.first() == Some(&n) {
        return Some((n, slope.len() + 1));
    }
    if slope.len() >= 2 && slope[0] == 1 && slope[1] == n {
        return Some((n, slope.len()));
    }
    None
}

impl<'g> Matcher<'g> {
    /// `DQ(x) → PRelu(slope) → Q` anchored at the PRelu `ni`.
    pub(super) fn prelu(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let slope = self.const_input(n, 1, "slope")?;
        let (c, rank) = channel_layout(&slope.shape)
            .ok_or_else(|| format!("slope {:?} is not per channel", slope.shape))?;
        let (dqx, xq, qx, qi, qy) = self.sandwich(n)?;
        // Probe: [256, C, 1, …] holding code k at (k, c).
        let probe_rank = rank.max(2);
        let mut shape = vec![256, c];
        shape.resize(probe_rank, 1);
        let data = match qx.dtype {
            DType::U8 => Data::U8(
                (0..=255u8)
                    .flat_map(|k| std::iter::repeat_n(k, c))
                    .collect(),
            ),
            _ => Data::I8(
                (0..=255u8)
                    .flat_map(|k| std::iter::repeat_n(k as i8, c))
                    .collect(),
            ),
        };
        let probe = Tensor::new(shape.clone(), data).map_err(|e| e.to_string())?;
        let run = |node: &Node, x: &Tensor| -> Why<Tensor> {
            let f = ops::lookup(&node.domain, &node.op_type)
                .ok_or_else(|| format!("no implementation of {}", node.op_type))?;
            let mut args: Vec<Option<&Tensor>> = vec![Some(x)];
            for v in &node.inputs[1..] {
                args.push(if v.is_empty() { None } else { self.init(v) });
            }
            let ctx = OpCtx {
                node,
                opset: self.opset,
            };
            f(&ctx, &args)
                .map_err(|e| format!("`{}`: {e}", node.name))?
                .into_iter()
                .next()
                .ok_or_else(|| format!("`{}` produced nothing", node.name))
        };
        let v = run(&self.g.nodes[dqx], &probe)?;
        let v = run(n, &v)?;
        if v.shape != shape {
            return Err(format!(
                "`{}`: slope does not broadcast per channel",
                n.name
            ));
        }
        let y = run(&self.g.nodes[qi], &v)?;
        let bytes: Vec<u8> = match &y.data {
            Data::U8(d) => d.clone(),
            Data::I8(d) => d.iter().map(|&b| b as u8).collect(),
            _ => return Err("the QuantizeLinear does not produce 8-bit codes".into()),
        };
        // bytes[k·C + ch] → tables[ch·256 + k]
        let mut tables = vec![0u8; c * 256];
        for k in 0..256 {
            for ch in 0..c {
                tables[ch * 256 + k] = bytes[k * c + ch];
            }
        }
        // u8 → u8 with an f32 slope: computed per channel in f32 when that reproduces every
        // table entry (it is the same arithmetic; checked, not assumed), else the tables.
        let arith = (qx.dtype == DType::U8 && qy.dtype == DType::U8 && slope.dtype == DType::F32)
            .then(|| PreluCodes::new(slope.to_f32_vec(), qx.scale, qx.zp, qy.scale, qy.zp))
            .flatten()
            .filter(|p| {
                p.channels() == c
                    && (0..c).all(|ch| {
                        (0..=255u8).all(|k| p.code(k, ch) == tables[ch * 256 + k as usize])
                    })
            });
        let desc = format!(
            "PRelu on {} codes ({c} channel {})",
            qx.dtype,
            if arith.is_some() {
                "slopes, computed"
            } else {
                "tables"
            }
        );
        let kernel: Box<dyn crate::steps::Kernel> = if c == 1 {
            Box::new(crate::steps::CodeStep {
                layout: None,
                table: Some(crate::steps::Table {
                    bytes: tables,
                    out: qy.dtype,
                }),
                x_dtype: qx.dtype,
                consts: Vec::new(),
                nearest: false,
                desc: desc.clone(),
            })
        } else {
            Box::new(ChannelTableStep {
                tables,
                channels: c,
                rank,
                arith,
                x_dtype: qx.dtype,
                out: qy.dtype,
                desc: desc.clone(),
            })
        };
        Ok(Matched {
            kernel,
            inputs: vec![xq],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed: vec![qi],
            through: vec![dqx],
            kernel_desc: desc,
        })
    }
}
