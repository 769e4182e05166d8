//! Graph passes run at import: topological sort, constant folding and shape inference.

use crate::error::{GraphError, Result};
use crate::ir::{Dim, Graph, ValueInfo};
use crate::ops::{self, OpCtx, OpKind};
use crate::tensor::Tensor;
use std::collections::{HashMap, HashSet};

/// Sorts nodes so every value is produced before it is read (stable: keeps file order
/// where it is already valid). Errors name the first node reading an undefined value, a
/// value written by two nodes (or a node overwriting a graph input or initializer), and a
/// node on a cycle.
///
/// Kahn's algorithm over reader lists: each node waits for a count of inputs produced by
/// other nodes and is released when the last one is; the ready node with the smallest
/// file position goes first, so a valid order is kept as is. O((nodes + edges) · log nodes)
/// (a chain stored in reverse order was quadratic with the former repeated scans).
pub fn topo_sort(graph: &mut Graph) -> Result<()> {
    topo_sort_in(graph, &HashSet::new())
}

/// [`topo_sort`] of a subgraph whose enclosing graphs define `outer`. A node holding a
/// subgraph is placed after the producers of the outer values its subgraph reads.
pub fn topo_sort_in(graph: &mut Graph, outer: &HashSet<String>) -> Result<()> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let inputs: HashSet<&str> = graph.inputs.iter().map(|v| v.name.as_str()).collect();
    let avail =
        |i: &str| inputs.contains(i) || graph.initializers.contains_key(i) || outer.contains(i);
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (ni, n) in graph.nodes.iter().enumerate() {
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            if avail(o) {
                return Err(GraphError::Structure(format!(
                    "node `{}` ({}) writes `{o}`, which is a graph input or initializer",
                    n.name, n.op_type
                )));
            }
            if let Some(&first) = producer.get(o.as_str()) {
                return Err(GraphError::Structure(format!(
                    "value `{o}` is written by two nodes: `{}` ({}) and `{}` ({})",
                    graph.nodes[first].name, graph.nodes[first].op_type, n.name, n.op_type
                )));
            }
            producer.insert(o.as_str(), ni);
        }
    }
    // waiting[ni]: inputs of node ni still to be produced (counted once per occurrence, and
    // released once per occurrence); readers[p]: nodes reading an output of node p.
    let mut waiting = vec![0usize; graph.nodes.len()];
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); graph.nodes.len()];
    for (ni, n) in graph.nodes.iter().enumerate() {
        // Subgraph reads of outer values count like inputs (each distinct name once).
        for i in n.reads() {
            match producer.get(i) {
                Some(&p) => {
                    waiting[ni] += 1;
                    readers[p].push(ni);
                }
                None if avail(i) => {}
                None => {
                    return Err(GraphError::MissingValue {
                        node: n.name.clone(),
                        op_type: n.op_type.clone(),
                        value: i.to_string(),
                    })
                }
            }
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> = (0..graph.nodes.len())
        .filter(|&ni| waiting[ni] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::with_capacity(graph.nodes.len());
    while let Some(Reverse(ni)) = ready.pop() {
        order.push(ni);
        for &r in &readers[ni] {
            waiting[r] -= 1;
            if waiting[r] == 0 {
                ready.push(Reverse(r));
            }
        }
    }
    if order.len() < graph.nodes.len() {
        let stuck = (0..graph.nodes.len())
            .find(|&ni| waiting[ni] > 0)
            .unwrap_or(0);
        return Err(GraphError::Structure(format!(
            "cycle through node `{}`",
            graph.nodes[stuck].name
        )));
    }
    let mut slots: Vec<Option<crate::ir::Node>> = std::mem::take(&mut graph.nodes)
        .into_iter()
        .map(Some)
        .collect();
    graph.nodes = order
        .into_iter()
        .filter_map(|ni| slots[ni].take())
        .collect();
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
            Some(crate::exec::eval_narrow(&node, &args, |a| f(&ctx, a)))
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

#[cfg(test)]
mod tests {
    use super::topo_sort;
    use crate::error::GraphError;
    use crate::ir::{Graph, Node, ValueInfo};
    use crate::tensor::DType;

    fn graph(nodes: Vec<Node>) -> Graph {
        Graph {
            nodes,
            inputs: vec![ValueInfo::new("x", DType::F32, &[1])],
            ..Graph::default()
        }
    }

    fn names(g: &Graph) -> Vec<&str> {
        g.nodes.iter().map(|n| n.name.as_str()).collect()
    }

    /// `x → r0 → v1 → r1 → ... → v{n}`, stored last node first.
    fn reversed_chain(n: usize) -> Graph {
        let nodes = (0..n)
            .rev()
            .map(|i| {
                let input = if i == 0 {
                    "x".to_string()
                } else {
                    format!("v{i}")
                };
                Node::new(
                    &format!("r{i}"),
                    "Relu",
                    &[&input],
                    &[&format!("v{}", i + 1)],
                )
            })
            .collect();
        graph(nodes)
    }

    #[test]
    fn topo_sort_orders_a_reversed_chain() {
        let mut g = reversed_chain(50);
        topo_sort(&mut g).unwrap();
        let want: Vec<String> = (0..50).map(|i| format!("r{i}")).collect();
        assert_eq!(names(&g), want);
    }

    #[test]
    fn topo_sort_keeps_a_valid_order_and_sorts_a_diamond() {
        // x → a → {b, c} → d, stored as d, c, b, a: sorted a, b, c, d (the ready node
        // earliest in the file goes first, so b and c keep their relative file order c, b).
        let d = Node::new("d", "Add", &["b_out", "c_out"], &["d_out"]);
        let c = Node::new("c", "Neg", &["a_out"], &["c_out"]);
        let b = Node::new("b", "Relu", &["a_out"], &["b_out"]);
        let a = Node::new("a", "Relu", &["x"], &["a_out"]);
        let mut g = graph(vec![d.clone(), c.clone(), b.clone(), a.clone()]);
        topo_sort(&mut g).unwrap();
        assert_eq!(names(&g), ["a", "c", "b", "d"]);
        let mut valid = graph(vec![a, b, c, d]);
        topo_sort(&mut valid).unwrap();
        assert_eq!(names(&valid), ["a", "b", "c", "d"]);
        // A node reading the same value twice waits for it once per read and is released.
        let mut twice = graph(vec![
            Node::new("sq", "Mul", &["r_out", "r_out"], &["y"]),
            Node::new("r", "Relu", &["x"], &["r_out"]),
        ]);
        topo_sort(&mut twice).unwrap();
        assert_eq!(names(&twice), ["r", "sq"]);
    }

    #[test]
    fn topo_sort_names_cycles_missing_values_and_duplicate_writers() {
        let mut cycle = graph(vec![
            Node::new("p", "Add", &["x", "q_out"], &["p_out"]),
            Node::new("q", "Relu", &["p_out"], &["q_out"]),
        ]);
        let e = topo_sort(&mut cycle).unwrap_err().to_string();
        assert!(e.contains("cycle") && e.contains("`p`"), "{e}");
        let mut missing = graph(vec![Node::new("m", "Relu", &["nowhere"], &["y"])]);
        assert!(matches!(
            topo_sort(&mut missing),
            Err(GraphError::MissingValue { ref node, ref value, .. }) if node == "m" && value == "nowhere"
        ));
        let mut dup = graph(vec![
            Node::new("first", "Relu", &["x"], &["y"]),
            Node::new("second", "Neg", &["x"], &["y"]),
        ]);
        let e = topo_sort(&mut dup).unwrap_err().to_string();
        assert!(
            e.contains("`y`") && e.contains("`first`") && e.contains("`second`"),
            "{e}"
        );
        let mut overwrite = graph(vec![Node::new("w", "Relu", &["x"], &["x"])]);
        let e = topo_sort(&mut overwrite).unwrap_err().to_string();
        assert!(e.contains("`w`") && e.contains("graph input"), "{e}");
    }

    /// Benchmark-style (run with `--ignored`): the former pass took 6 s on this chain.
    #[test]
    #[ignore]
    fn topo_sort_of_a_20k_reversed_chain_is_fast() {
        let mut g = reversed_chain(20_000);
        let t = std::time::Instant::now();
        topo_sort(&mut g).unwrap();
        assert!(t.elapsed().as_secs_f64() < 1.0, "{:?}", t.elapsed());
        assert_eq!(g.nodes[19_999].name, "r19999");
    }
}
