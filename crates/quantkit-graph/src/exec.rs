//! The float executor: runs a [`Graph`] node by node, in topological order, freeing each
//! value after its last use. An observer callback sees every graph input and every value a
//! node produces (calibration observers hook in here).

use crate::error::{GraphError, Result};
use crate::ir::{Dim, Graph};
use crate::ops::{self, EvalFn, OpCtx, OpKind};
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
///
/// Without an observer nothing outside can see intermediate values, so a `Conv` whose
/// only reader is a `Relu` runs as one fused step (the same values, one pass fewer).
pub fn execute(graph: &Graph, inputs: Vec<(String, Tensor)>) -> Result<Vec<(String, Tensor)>> {
    run(graph, inputs, None)
}

/// Like [`execute`], calling `observer(value_name, tensor)` for each graph input and for
/// every output of every node, right after it is computed.
pub fn execute_with(
    graph: &Graph,
    inputs: Vec<(String, Tensor)>,
    mut observer: impl FnMut(&str, &Tensor),
) -> Result<Vec<(String, Tensor)>> {
    run(graph, inputs, Some(&mut observer))
}

/// For each node index, the index of a `Relu` that is the only reader of its `Conv` output
/// (and that output is not a graph output), so the pair can run fused.
fn conv_relu_pairs(graph: &Graph) -> HashMap<usize, usize> {
    let uses = crate::ir::Uses::new(graph);
    let mut pairs = HashMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        if !n.is(OpKind::Conv) || n.outputs.len() != 1 {
            continue;
        }
        if let Some(j) = uses.sole_reader(&n.outputs[0]) {
            let r = &graph.nodes[j];
            if r.is(OpKind::Relu) && r.inputs.len() == 1 && j > i {
                pairs.insert(i, j);
            }
        }
    }
    pairs
}

/// A caller's view of every value as it is produced.
type Observer<'a> = &'a mut dyn FnMut(&str, &Tensor);

fn run(
    graph: &Graph,
    inputs: Vec<(String, Tensor)>,
    mut observer: Option<Observer<'_>>,
) -> Result<Vec<(String, Tensor)>> {
    let fns = plan(graph)?;
    let fused = if observer.is_none() {
        conv_relu_pairs(graph)
    } else {
        HashMap::new()
    };
    let fused_relus: std::collections::HashSet<usize> = fused.values().copied().collect();
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
        if let Some(obs) = observer.as_mut() {
            obs(&vi.name, &t);
        }
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
        if fused_relus.contains(&i) {
            // Its output was written by the fused Conv.
            continue;
        }
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
        let relu = fused.get(&i).map(|&j| &graph.nodes[j]);
        let outs = narrow_check(node, &args)
            .and_then(|()| match relu {
                Some(_) => ops::conv::eval_fused(&ctx, &args, true),
                None => f(&ctx, &args),
            })
            .map_err(|source| GraphError::Op {
                node: node.name.clone(),
                op_type: node.op_type.clone(),
                source,
            })?;
        let names = relu.map_or(&node.outputs, |r| &r.outputs);
        for (name, t) in names.iter().zip(outs) {
            if name.is_empty() {
                continue;
            }
            if let Some(obs) = observer.as_mut() {
                obs(name, &t);
            }
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

/// Refuses narrow-type inputs (bfloat16, float8, float4, 2-bit) to an operator that does
/// not declare it handles them ([`ops::OpDef::check_inputs`]).
pub(crate) fn narrow_check(
    node: &crate::ir::Node,
    args: &[Option<&Tensor>],
) -> std::result::Result<(), crate::error::OpError> {
    if !args.iter().flatten().any(|t| t.dtype.is_narrow()) {
        return Ok(());
    }
    match node.kind() {
        Some(k) => k.def().check_inputs(args),
        None => Ok(()),
    }
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
