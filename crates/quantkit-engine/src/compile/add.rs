//! The Add pattern → [`AddStep`] (`steps/add.rs`): `DQ(a) + DQ(b) [→ Relu | Clip] → Q` as
//! QLinearAdd.

use super::helpers::{Matcher, Tail, Why};
use super::quant::Qp;
use super::Matched;
use crate::steps::{AddStep, GraphOp};
use quantkit_graph::ops;
use quantkit_graph::Node;

impl<'g> Matcher<'g> {
    /// `DQ(a) + DQ(b) [→ Relu | Clip] → Q` anchored at the Add `ni`: both operands 8-bit codes
    /// of one type with per-tensor parameters.
    pub(super) fn add(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        if n.inputs.len() != 2 {
            return Err("Add needs two inputs".into());
        }
        let (dqa, aq, qa) = self.act_input(n)?;
        let dqb = self.dq_of(&n.inputs[1])?;
        let qb = self.qparams(&self.g.nodes[dqb])?;
        let bq = self.g.nodes[dqb].inputs[0].clone();
        let Tail {
            absorbed,
            clamp,
            q: qi,
            qp: qy,
        } = self.tail(&n.outputs[0])?;
        if qa.dtype != qb.dtype || qa.dtype != qy.dtype {
            return Err(format!(
                "mixed code types {} + {} → {}: the kernel takes one",
                qa.dtype, qb.dtype, qy.dtype
            ));
        }
        let lookup = |node: &Node| -> Why<GraphOp> {
            Ok(GraphOp {
                node: node.clone(),
                opset: self.opset,
                f: ops::lookup(&node.domain, &node.op_type)
                    .ok_or_else(|| format!("no implementation of {}", node.op_type))?,
            })
        };
        // The fallback for broadcasting operands: exactly the QDQ graph's nodes.
        let mut chain = vec![dqa, dqb, ni];
        chain.extend(absorbed.iter().copied());
        let mut float_path = Vec::new();
        let mut float_args = Vec::new();
        for &k in &chain {
            let node = &self.g.nodes[k];
            float_path.push(lookup(node)?);
            let skip = if k == ni { 2 } else { 1 };
            let mut args = Vec::new();
            for v in node.inputs.iter().skip(skip) {
                args.push(if v.is_empty() {
                    None
                } else {
                    Some(
                        self.init(v).cloned().ok_or_else(|| {
                            format!("`{}`: input `{v}` is not a constant", node.name)
                        })?,
                    )
                });
            }
            float_args.push(args);
        }
        let p = |q: Qp| quantkit_kernels::eltwise::QParams {
            scale: q.scale,
            zero_point: q.zp,
        };
        let desc = format!("add {}", qa.dtype);
        Ok(Matched {
            kernel: Box::new(AddStep {
                qa: p(qa),
                qb: p(qb),
                qy: p(qy),
                dtype: qa.dtype,
                clamp,
                float_path,
                float_args,
            }),
            inputs: vec![aq, bq],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed,
            through: vec![dqa, dqb],
            kernel_desc: desc,
        })
    }
}
