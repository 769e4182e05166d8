//! The float executor: runs a [`Graph`] node by node, in topological order, freeing each
//! value after its last use. An observer callback sees every graph input and every value a
//! node produces (calibration observers hook in here).

use crate::error::{GraphError, Result};
use crate::ir::{Dim, Graph};
use crate::ops::{self, EvalFn, OpCtx};
use crate::tensor::Tensor;
use std::collections::HashMap;

/// Checks that every node has an implementation; returns them in node order.
pub fn plan(graph: &Graph) -> Result<Vec<EvalFn>> {
    graph
        .nodes
        .iter()
        .map(|n| {
            ops::lookup(&n.domain, &n.op_type).ok_or_else(|| GraphError::UnknownOp {
                node: n.name.clone(),
                op_type: n.op_type.clone(),
                domain: if n.domain.is_empty() {
                    "ai.onnx".into()
                } else {
                    n.domain.clone()
                },
            })
        })
        .collect()
}

/// Runs the graph on named inputs and returns the graph outputs in declaration order.
pub fn execute(graph: &Graph, inputs: Vec<(String, Tensor)>) -> Result<Vec<(String, Tensor)>> {
    execute_with(graph, inputs, |_, _| {})
}

/// Like [`execute`], calling `observer(value_name, tensor)` for each graph input and for
/// every output of every node, right after it is computed.
pub fn execute_with(
    graph: &Graph,
    inputs: Vec<(String, Tensor)>,
    mut observer: impl FnMut(&str, &Tensor),
) -> Result<Vec<(String, Tensor)>> {
    let fns = plan(graph)?;
    let mut env: HashMap<&str, Tensor> = HashMap::new();
    let known = || {
        graph
            .inputs
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut given: HashMap<String, Tensor> = HashMap::new();
    for (name, t) in inputs {
        if !graph.inputs.iter().any(|i| i.name == name) {
            return Err(GraphError::UnknownInput {
                name,
                known: known(),
            });
        }
        given.insert(name, t);
    }
    for vi in &graph.inputs {
        let t = given
            .remove(&vi.name)
            .ok_or_else(|| GraphError::MissingInput {
                name: vi.name.clone(),
            })?;
        check_input(vi, &t)?;
        observer(&vi.name, &t);
        env.insert(vi.name.as_str(), t);
    }
    // Last node index reading each value, so it can be dropped afterwards.
    let mut last_use: HashMap<&str, usize> = HashMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        for v in &n.inputs {
            last_use.insert(v.as_str(), i);
        }
    }
    for o in &graph.outputs {
        last_use.insert(o.name.as_str(), usize::MAX);
    }
    let opset = graph.opset();
    for (i, (node, f)) in graph.nodes.iter().zip(&fns).enumerate() {
        let mut args: Vec<Option<&Tensor>> = Vec::with_capacity(node.inputs.len());
        for name in &node.inputs {
            if name.is_empty() {
                args.push(None);
                continue;
            }
            let t = env
                .get(name.as_str())
                .or_else(|| graph.initializers.get(name))
                .ok_or_else(|| GraphError::MissingValue {
                    node: node.name.clone(),
                    op_type: node.op_type.clone(),
                    value: name.clone(),
                })?;
            args.push(Some(t));
        }
        let ctx = OpCtx { node, opset };
        let outs = f(&ctx, &args).map_err(|source| GraphError::Op {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            source,
        })?;
        for (name, t) in node.outputs.iter().zip(outs) {
            if name.is_empty() {
                continue;
            }
            observer(name, &t);
            env.insert(name.as_str(), t);
        }
        for name in &node.inputs {
            if last_use.get(name.as_str()) == Some(&i) {
                env.remove(name.as_str());
            }
        }
    }
    graph
        .outputs
        .iter()
        .map(|o| {
            let t = env
                .get(o.name.as_str())
                .or_else(|| graph.initializers.get(&o.name))
                .cloned()
                .ok_or_else(|| {
                    GraphError::Structure(format!("output `{}` is never produced", o.name))
                })?;
            Ok((o.name.clone(), t))
        })
        .collect()
}

fn check_input(vi: &crate::ir::ValueInfo, t: &Tensor) -> Result<()> {
    let bad = || GraphError::InputMismatch {
        name: vi.name.clone(),
        expected: vi.describe(),
        got: format!("{}{:?}", t.dtype, t.shape),
    };
    if let Some(dt) = vi.dtype {
        if dt != t.dtype {
            return Err(bad());
        }
    }
    if let Some(shape) = &vi.shape {
        if shape.len() != t.rank() {
            return Err(bad());
        }
        for (d, &n) in shape.iter().zip(&t.shape) {
            if let Dim::Known(k) = d {
                if *k != n {
                    return Err(bad());
                }
            }
        }
    }
    Ok(())
}
