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
}
