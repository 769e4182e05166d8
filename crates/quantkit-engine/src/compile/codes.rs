//! Patterns on 8-bit codes → [`CodeStep`] (`steps/codes.rs`): `DQ(x) → op → Q` for an
//! element-wise op (a 256-entry table) or a layout op (the graph operator on the codes, plus
//! a table when the parameters change), and a layout op reading codes another step wrote
//! (QOperator models).

use super::helpers::{Matcher, Why};
use super::Matched;
use crate::steps::{CodeStep, GraphOp};
use quantkit_graph::ops;
use quantkit_graph::{DType, Node};

/// Element-wise operators whose QDQ sandwich becomes a 256-entry table (the registry's
/// `Facts::unary`: Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Gelu, Erf,
/// Sqrt, Identity).
pub(super) fn is_table_op(n: &Node) -> bool {
    n.facts().unary
}

/// Operators that only move codes (the registry's `Facts::layout`: Flatten, Reshape,
/// Transpose, Squeeze, Unsqueeze); their QDQ sandwich runs on the codes.
pub(super) fn is_layout_op(n: &Node) -> bool {
    n.facts().layout
}

impl<'g> Matcher<'g> {
    /// `DQ(x) → op → Q` anchored at `ni`, the other inputs constant: a layout op (`layout`) on
    /// the codes, or an element-wise op as a table.
    pub(super) fn codes(&self, ni: usize, layout: bool) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        for v in n.inputs.iter().skip(1).filter(|v| !v.is_empty()) {
            if self.init(v).is_none() {
                return Err(format!("input `{v}` is not a constant"));
            }
        }
        let (dqx, xq, qx, qi, qy) = self.sandwich(n)?;
        let table = self.table(
            &self.g.nodes[dqx],
            (!layout).then_some(n),
            &self.g.nodes[qi],
        )?;
        let layout_op = if layout {
            Some(GraphOp {
                node: n.clone(),
                opset: self.opset,
                f: ops::lookup(&n.domain, &n.op_type).ok_or("no implementation")?,
            })
        } else {
            None
        };
        let desc = format!(
            "{} on {} codes{}",
            n.op_type,
            qx.dtype,
            match (&table, layout) {
                (Some(_), true) => " + requant table",
                (Some(_), false) => " (table)",
                (None, _) => "",
            }
        );
        let mut inputs = vec![xq];
        inputs.extend(n.inputs.iter().skip(1).cloned());
        debug_assert!(matches!(qy.dtype, DType::U8 | DType::I8));
        Ok(Matched {
            kernel: Box::new(CodeStep {
                layout: layout_op,
                table,
                x_dtype: qx.dtype,
                desc: desc.clone(),
            }),
            inputs,
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed: vec![qi],
            through: vec![dqx],
            kernel_desc: desc,
        })
    }

    /// A layout operator (Flatten, Reshape, ...) on codes another step produced: the graph
    /// operator on the 8-bit tensor, with constant other inputs.
    pub(super) fn layout_codes(&self, ni: usize, dtype: DType) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        for v in n.inputs.iter().skip(1).filter(|v| !v.is_empty()) {
            if self.init(v).is_none() {
                return Err(format!("input `{v}` is not a constant"));
            }
        }
        let x = Self::codes_input(n)?;
        let output = Self::sole_output(n)?;
        let f = ops::lookup(&n.domain, &n.op_type).ok_or("no implementation")?;
        let desc = format!("{} on {dtype} codes", n.op_type);
        let mut inputs = vec![x];
        inputs.extend(n.inputs.iter().skip(1).cloned());
        Ok(Matched {
            kernel: Box::new(CodeStep {
                layout: Some(GraphOp {
                    node: n.clone(),
                    opset: self.opset,
                    f,
                }),
                table: None,
                x_dtype: dtype,
                desc: desc.clone(),
            }),
            inputs,
            output,
            absorbed: Vec::new(),
            through: Vec::new(),
            kernel_desc: desc,
        })
    }
}
