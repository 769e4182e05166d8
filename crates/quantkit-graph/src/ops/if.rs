//! `If` (opsets 1–24): runs `then_branch` or `else_branch`, by the one-element boolean
//! condition, and returns that branch's outputs. The branches take no inputs and read the
//! enclosing graphs' values by name; the executor runs them through [`run`] (with the scope
//! and the observer), so `eval` alone only reports that. Sequence- and optional-typed
//! branch outputs (opsets 16+) are not values the IR holds.

use super::OpCtx;
use crate::error::{GraphError, OpError};
use crate::exec::ControlCtx;
use crate::tensor::{DType, Tensor};

/// `If` needs the enclosing scope: the executor calls [`run`] instead.
pub fn eval(_ctx: &OpCtx, _inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    Err(OpError::Unsupported(
        "If runs its branches in the executor, which gives them the enclosing scope".into(),
    ))
}

/// The condition of a control-flow node: a bool tensor of exactly one element (`what`
/// names it in the error).
pub(crate) fn condition(t: &Tensor, what: &str) -> Result<bool, OpError> {
    if t.dtype != DType::Bool {
        return Err(OpError::Invalid(format!(
            "{what} must be bool, got {}",
            t.dtype
        )));
    }
    if t.len() != 1 {
        return Err(OpError::shape(format!("{what}: one element"), &t.shape));
    }
    Ok(t.to_i64_vec()[0] != 0)
}

/// Runs the branch the condition selects.
pub fn run(ctx: &mut ControlCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, GraphError> {
    let node = ctx.node;
    let cond = super::input(inputs, 0)
        .and_then(|c| condition(c, "the condition"))
        .map_err(|e| ctx.err(e))?;
    let branch = if cond { "then_branch" } else { "else_branch" };
    let g = node.attr_graph(branch).map_err(|e| ctx.err(e))?;
    if g.outputs.len() != node.outputs.len() {
        return Err(ctx.err(OpError::Invalid(format!(
            "{branch} has {} outputs, the node {}",
            g.outputs.len(),
            node.outputs.len()
        ))));
    }
    ctx.run(g, Vec::new())
}

/// Output infos when both branches declare the same static types and shapes.
pub fn infer(ctx: &OpCtx, _inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let then = ctx.node.attr_graph("then_branch").ok()?;
    let other = ctx.node.attr_graph("else_branch").ok()?;
    let infos = |g: &crate::ir::Graph| -> Option<Vec<super::Info>> {
        g.outputs
            .iter()
            .map(|o| Some((o.dtype?, o.static_shape()?)))
            .collect()
    };
    let a = infos(then)?;
    (a == infos(other)? && a.len() == ctx.node.outputs.len()).then_some(a)
}

/// `If` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("If", 1, eval)
    .infer(infer)
    .control(run);
