//! The graph crate's operator as a step: float islands, the Q/DQ conversions at the plan's
//! edges, and every node no pattern takes.

use super::Kernel;
use crate::error::{EngineError, Result};
use crate::value::Val;
use crate::Step;
use quantkit_graph::ops::{EvalFn, OpCtx};
use quantkit_graph::OpKind;
use quantkit_graph::{Node, Tensor};

/// The graph crate's implementation of a node, on ONNX-ordered tensors.
pub(crate) struct GraphOp {
    pub node: Node,
    pub opset: i64,
    pub f: EvalFn,
}

impl GraphOp {
    pub fn eval(&self, args: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let ctx = OpCtx {
            node: &self.node,
            opset: self.opset,
        };
        (self.f)(&ctx, args).map_err(|source| EngineError::Op {
            node: self.node.name.clone(),
            op_type: self.node.op_type.clone(),
            source,
        })
    }
}

impl Kernel for GraphOp {
    fn per_image(&self, consts: &[Option<&Tensor>]) -> bool {
        crate::batch::graph_op_per_image(&self.node, consts)
    }
    fn run(&self, _step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let owned: Vec<Option<std::borrow::Cow<'_, Tensor>>> =
            inputs.iter().map(|v| v.map(Val::to_nchw)).collect();
        let args: Vec<Option<&Tensor>> = owned.iter().map(|c| c.as_deref()).collect();
        Ok(self.eval(&args)?.into_iter().map(Val::nchw).collect())
    }
    fn describe(&self) -> String {
        format!("{} (graph op)", self.node.op_type)
    }
    fn forwards_input(&self) -> bool {
        self.node.is(OpKind::Identity)
    }
    fn kind(&self) -> crate::StepKind {
        // Q/DQ convert between codes and floats; Identity only hands a value on.
        match self.node.kind() {
            Some(
                OpKind::QuantizeLinear
                | OpKind::DequantizeLinear
                | OpKind::DynamicQuantizeLinear
                | OpKind::Identity,
            ) => crate::StepKind::Convert,
            _ => crate::StepKind::Float,
        }
    }
}

/// A control-flow node (If, Loop, Scan) as a float island: the graph crate's executor runs
/// its subgraphs, which read the enclosing values `outer` (the step's inputs after the
/// node's own, in ONNX order). The values computed inside stay float (Q/DQ pairs inside a
/// subgraph run as the graph operators define them).
pub(crate) struct ControlOp {
    pub node: Node,
    pub opset: i64,
    /// Names of the enclosing values its subgraphs read ([`Node::outer_reads`]).
    pub outer: Vec<String>,
}

impl Kernel for ControlOp {
    fn run(&self, _step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let owned: Vec<Option<std::borrow::Cow<'_, Tensor>>> =
            inputs.iter().map(|v| v.map(Val::to_nchw)).collect();
        let k = self.node.inputs.len();
        let args: Vec<Option<&Tensor>> = owned[..k].iter().map(|c| c.as_deref()).collect();
        let mut outer = std::collections::HashMap::new();
        for (name, v) in self.outer.iter().zip(&owned[k..]) {
            if let Some(t) = v {
                outer.insert(name.as_str(), t.clone().into_owned());
            }
        }
        let outs = quantkit_graph::exec::eval_node(&self.node, self.opset, &args, &outer).map_err(
            |e| EngineError::Control {
                node: self.node.name.clone(),
                source: Box::new(e),
            },
        )?;
        Ok(outs.into_iter().map(Val::nchw).collect())
    }
    fn kind(&self) -> crate::StepKind {
        crate::StepKind::Float
    }
    fn describe(&self) -> String {
        format!(
            "{} (graph op, subgraphs on the float executor)",
            self.node.op_type
        )
    }
}
