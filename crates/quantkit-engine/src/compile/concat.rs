//! The Concat pattern → [`ConcatStep`] (`steps/concat.rs`): `DQ(x_i)… → Concat → Q`, every
//! input 8-bit codes with constant per-tensor parameters (QLinearConcat).

use super::helpers::{Matcher, Why};
use super::Matched;
use crate::steps::{ConcatStep, GraphOp};
use quantkit_graph::ops;
use quantkit_graph::OpKind;

impl<'g> Matcher<'g> {
    /// `DQ(x_i)… → Concat → Q` anchored at the Concat `ni`.
    pub(super) fn concat(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        if n.inputs.is_empty() || n.inputs.iter().any(|i| i.is_empty()) {
            return Err("Concat with an omitted input".into());
        }
        let qi = self.sole_reader(&n.outputs[0])?;
        let q = &self.g.nodes[qi];
        if !q.is(OpKind::QuantizeLinear) {
            return Err(format!(
                "the result feeds {} `{}`, not a QuantizeLinear",
                q.op_type, q.name
            ));
        }
        let qy = self.qparams(q)?;
        let mut parts = Vec::new();
        let mut inputs = Vec::new();
        let mut through = Vec::new();
        for v in &n.inputs {
            let dq = self.dq_of(v)?;
            let dqn = &self.g.nodes[dq];
            let qx = self.qparams(dqn)?;
            parts.push((qx.dtype, self.table(dqn, None, q)?));
            inputs.push(dqn.inputs[0].clone());
            through.push(dq);
        }
        let axis = n.attr_int("axis", 0).map_err(|e| e.to_string())?;
        let copies = parts.iter().filter(|p| p.1.is_none()).count();
        let desc = format!(
            "concat of {} {} code tensors ({copies} copied)",
            parts.len(),
            qy.dtype
        );
        Ok(Matched {
            kernel: Box::new(ConcatStep {
                parts,
                axis,
                out: qy.dtype,
                graph_op: GraphOp {
                    node: n.clone(),
                    opset: self.opset,
                    f: ops::lookup(&n.domain, &n.op_type).ok_or("no implementation")?,
                },
            }),
            inputs,
            output: q.outputs[0].clone(),
            absorbed: vec![qi],
            through,
            kernel_desc: desc,
        })
    }
}
