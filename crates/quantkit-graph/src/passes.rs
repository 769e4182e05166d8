//! Graph passes run at import: topological sort, constant folding and shape inference.

use crate::error::{GraphError, Result};
use crate::ir::{Dim, Graph, ValueInfo};
use crate::ops::{self, OpCtx, OpKind};
use crate::tensor::Tensor;
use std::collections::{HashMap, HashSet};

/// Sorts nodes so every value is produced before it is read (stable: keeps file order
/// where it is already valid). Errors name the first node reading an undefined value.
pub fn topo_sort(graph: &mut Graph) -> Result<()> {
    topo_sort_in(graph, &HashSet::new())
}

/// [`topo_sort`] of a subgraph whose enclosing graphs define `outer`. A node holding a
/// subgraph is placed after the producers of the outer values its subgraph reads.
pub fn topo_sort_in(graph: &mut Graph, outer: &HashSet<String>) -> Result<()> {
    let mut avail: HashSet<String> = graph.inputs.iter().map(|v| v.name.clone()).collect();
    avail.extend(outer.iter().cloned());
    avail.extend(graph.initializers.keys().cloned());
    let produced: HashSet<&str> = graph
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter().map(String::as_str))
        .collect();
    for n in &graph.nodes {
        for i in n.reads() {
            if !avail.contains(i) && !produced.contains(i) {
                return Err(GraphError::MissingValue {
                    node: n.name.clone(),
                    op_type: n.op_type.clone(),
                    value: i.to_string(),
                });
            }
        }
    }
    let mut pending: Vec<crate::ir::Node> = std::mem::take(&mut graph.nodes);
    let mut sorted = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let before = pending.len();
        let mut rest = Vec::new();
        for n in pending {
            if n.reads().iter().all(|i| avail.contains(*i)) {
                avail.extend(n.outputs.iter().cloned());
                sorted.push(n);
            } else {
                rest.push(n);
            }
        }
        if rest.len() == before {
            return Err(GraphError::Structure(format!(
                "cycle through node `{}`",
                rest[0].name
            )));
        }
        pending = rest;
    }
    graph.nodes = sorted;
    Ok(())
}

/// Whether a registered node may be folded: its output must depend only on its inputs
/// (not `Facts::random`). `DequantizeLinear` is deterministic too but stays: folding the DQ
/// of an int8 weight would turn a QDQ model back into a float one on load, and the integer
/// engine compiles exactly that pattern.
/// A node holding a subgraph (If, Loop, Scan) runs only in the executor, which gives it the
/// outer scope, so it is not folded either.
fn foldable(node: &crate::ir::Node) -> bool {
    !node.facts().random && !node.is(OpKind::DequantizeLinear) && !node.has_subgraphs()
}

/// Folds nodes whose inputs are all initializers into initializers, and `Shape` nodes whose
/// input has a fully known static shape (so shape arithmetic such as
/// Shape→Gather→Concat→Reshape collapses into a constant). Folded nodes are removed;
/// graph outputs are never folded away. Unknown ops are left for the executor to report.
pub fn fold_constants(graph: &mut Graph) -> Result<()> {
    let opset = graph.opset();
    let outputs: HashSet<String> = graph.outputs.iter().map(|o| o.name.clone()).collect();
    let mut shapes: HashMap<String, Vec<usize>> = HashMap::new();
    for v in graph.inputs.iter().chain(graph.value_info.values()) {
        if let Some(s) = v.static_shape() {
            shapes.insert(v.name.clone(), s);
        }
    }
    let mut kept = Vec::with_capacity(graph.nodes.len());
    for node in std::mem::take(&mut graph.nodes) {
        let Some(f) = ops::lookup(&node.domain, &node.op_type) else {
            kept.push(node);
            continue;
        };
        if node.outputs.iter().any(|o| outputs.contains(o)) || !foldable(&node) {
            kept.push(node);
            continue;
        }
        let ctx = OpCtx { node: &node, opset };
        let result = if node.is(OpKind::Shape) {
            node.inputs
                .first()
                .and_then(|i| {
                    graph
                        .initializers
                        .get(i)
                        .map(|t| t.shape.clone())
                        .or_else(|| shapes.get(i).cloned())
                })
                .map(|s| ops::shape::shape_of(&s, &ctx).map(|t| vec![t]))
        } else if node
            .inputs
            .iter()
            .all(|i| i.is_empty() || graph.initializers.contains_key(i))
        {
            let args: Vec<Option<&Tensor>> = node
                .inputs
                .iter()
                .map(|i| {
                    if i.is_empty() {
                        None
                    } else {
                        graph.initializers.get(i)
                    }
                })
                .collect();
            Some(crate::exec::narrow_check(&node, &args).and_then(|()| f(&ctx, &args)))
        } else {
            None
        };
        match result {
            Some(Ok(outs)) => {
                for (name, t) in node.outputs.iter().zip(outs) {
                    if !name.is_empty() {
                        graph.initializers.insert(name.clone(), t);
                    }
                }
            }
            Some(Err(source)) => {
                return Err(GraphError::Op {
                    node: node.name.clone(),
                    op_type: node.op_type.clone(),
                    source,
                });
            }
            None => kept.push(node),
        }
    }
    graph.nodes = kept;
    // Drop initializers nobody reads any more (folded intermediates, Constant chains).
    graph.prune_initializers();
    Ok(())
}

/// Infers static shapes and dtypes of intermediate values by propagating the declared
/// input shapes through every node (see [`infer_value_infos`]); results go to
/// `graph.value_info`. Values whose shape cannot be determined are left out.
pub fn infer_shapes(graph: &mut Graph) {
    if let Ok(infos) = infer_value_infos(graph) {
        for v in infos {
            graph.value_info.insert(v.name.clone(), v);
        }
    }
}

/// Shape inference by abstract execution on zero-size-free placeholder tensors is too
/// costly for big models, so this propagates shapes with each operator's own rules for the
/// operators whose output shape depends only on input shapes and attributes.
pub fn infer_value_infos(graph: &Graph) -> Result<Vec<ValueInfo>> {
    let mut known: HashMap<String, (crate::DType, Vec<usize>)> = HashMap::new();
    for v in &graph.inputs {
        if let (Some(dt), Some(s)) = (v.dtype, v.static_shape()) {
            known.insert(v.name.clone(), (dt, s));
        }
    }
    for (k, t) in &graph.initializers {
        known.insert(k.clone(), (t.dtype, t.shape.clone()));
    }
    let mut out = Vec::new();
    for node in &graph.nodes {
        let ins: Vec<Option<&(crate::DType, Vec<usize>)>> = node
            .inputs
            .iter()
            .map(|i| if i.is_empty() { None } else { known.get(i) })
            .collect();
        let Some(res) = crate::shape_infer::infer(node, graph.opset(), &ins, &graph.initializers)
        else {
            continue;
        };
        for (name, (dt, s)) in node.outputs.iter().zip(res) {
            if name.is_empty() {
                continue;
            }
            out.push(ValueInfo {
                name: name.clone(),
                dtype: Some(dt),
                onnx_elem_type: dt.onnx_code(),
                shape: Some(s.iter().map(|&d| Dim::Known(d)).collect()),
            });
            known.insert(name.clone(), (dt, s));
        }
    }
    Ok(out)
}
