//! The float executor: runs a [`Graph`] node by node, in topological order, freeing each
//! value after its last use. An observer callback sees every graph input and every value a
//! node produces (calibration observers hook in here).

use crate::error::{GraphError, OpError, Result};
use crate::ir::{Dim, Graph, Node};
use crate::ops::{self, EvalFn, OpCtx, OpKind};
use crate::tensor::{DType, Tensor};
use std::collections::{BTreeMap, HashMap};

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
/// (and that output is not a graph output), so the pair can run fused. `reads` is each
/// node's [`node_reads`].
fn conv_relu_pairs(graph: &Graph, reads: &[Vec<&str>]) -> HashMap<usize, usize> {
    let mut pairs = HashMap::new();
    if !graph.nodes.iter().any(|n| n.is(OpKind::Conv)) {
        return pairs;
    }
    // Readers of each value: how many, and the last one.
    let mut readers: HashMap<&str, (usize, usize)> = HashMap::new();
    for (i, r) in reads.iter().enumerate() {
        for v in &graph.nodes[i].inputs {
            if !v.is_empty() {
                let e = readers.entry(v.as_str()).or_insert((0, i));
                *e = (e.0 + 1, i);
            }
        }
        // A subgraph's read makes its node one more reader.
        for &v in r
            .iter()
            .filter(|v| !graph.nodes[i].inputs.iter().any(|x| x == *v))
        {
            let e = readers.entry(v).or_insert((0, i));
            *e = (e.0 + 1, i);
        }
    }
    for (i, n) in graph.nodes.iter().enumerate() {
        if !n.is(OpKind::Conv) || n.outputs.len() != 1 {
            continue;
        }
        let out = n.outputs[0].as_str();
        if graph.outputs.iter().any(|o| o.name == out) {
            continue;
        }
        if let Some(&(1, j)) = readers.get(out) {
            let r = &graph.nodes[j];
            if r.is(OpKind::Relu) && r.inputs.len() == 1 && j > i {
                pairs.insert(i, j);
            }
        }
    }
    pairs
}

/// Every value `node` reads, as [`crate::ir::Node::reads`] gives them (inputs without `""`
/// and its subgraphs' outer reads), without building a set for the common node that has
/// no subgraph (a name may then appear twice, which no caller minds).
fn node_reads(node: &crate::ir::Node) -> Vec<&str> {
    if node.subgraphs().next().is_some() {
        return node.reads().into_iter().collect();
    }
    node.inputs
        .iter()
        .filter(|v| !v.is_empty())
        .map(String::as_str)
        .collect()
}

/// A caller's view of every value as it is produced.
pub type Observer<'a> = &'a mut dyn FnMut(&str, &Tensor);

/// The values a subgraph can read from its enclosing graphs: each graph's live values and
/// initializers, innermost first.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    values: &'a HashMap<&'a str, Tensor>,
    consts: Option<&'a BTreeMap<String, Tensor>>,
    parent: Option<&'a Scope<'a>>,
}

impl<'a> Scope<'a> {
    /// A scope of named values (e.g. the integer engine's outer values of a control-flow
    /// node), with no enclosing scope.
    pub fn of(values: &'a HashMap<&'a str, Tensor>) -> Scope<'a> {
        Scope {
            values,
            consts: None,
            parent: None,
        }
    }
    /// The value called `name` in this scope or an enclosing one.
    pub fn get(&self, name: &str) -> Option<&'a Tensor> {
        self.values
            .get(name)
            .or_else(|| self.consts.and_then(|c| c.get(name)))
            .or_else(|| self.parent.and_then(|p| p.get(name)))
    }
}

/// What a control-flow operator (If, Loop, Scan: [`crate::ops::OpDef::control`]) sees: its
/// node, the opset, the enclosing scope its subgraphs read, and the observer, which sees
/// every value its subgraphs compute (on every iteration) like any other node's.
pub struct ControlCtx<'a, 'o> {
    /// The node (attributes hold the subgraphs).
    pub node: &'a Node,
    /// Version of the default ONNX operator set.
    pub opset: i64,
    /// Values of the enclosing graphs.
    pub scope: Scope<'a>,
    /// The caller's observer, if any.
    pub observer: Option<Observer<'o>>,
}

impl ControlCtx<'_, '_> {
    /// Runs subgraph `g` with its inputs bound positionally to `inputs` (their count must
    /// match) and returns its outputs in order.
    pub fn run(&mut self, g: &Graph, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        if inputs.len() != g.inputs.len() {
            return Err(GraphError::Op {
                node: self.node.name.clone(),
                op_type: self.node.op_type.clone(),
                source: OpError::Invalid(format!(
                    "subgraph `{}` declares {} inputs, {} given",
                    g.name,
                    g.inputs.len(),
                    inputs.len()
                )),
            });
        }
        let bound = g
            .inputs
            .iter()
            .map(|v| v.name.as_str())
            .zip(inputs)
            .collect();
        let obs: Option<Observer<'_>> = match self.observer.as_mut() {
            Some(o) => Some(&mut **o),
            None => None,
        };
        run_body(g, self.opset, bound, Some(&self.scope), obs)
    }
    /// An error of this node.
    pub fn err(&self, source: OpError) -> GraphError {
        GraphError::Op {
            node: self.node.name.clone(),
            op_type: self.node.op_type.clone(),
            source,
        }
    }
}

/// Signature of a control-flow operator's evaluation.
pub type ControlFn = fn(&mut ControlCtx, &[Option<&Tensor>]) -> Result<Vec<Tensor>>;

/// Evaluates one control-flow node outside a graph run (the integer engine's float island
/// for If/Loop/Scan): `args` are its inputs, `outer` the enclosing values its subgraphs
/// read ([`Node::outer_reads`]). Any other node is evaluated by its registry function.
pub fn eval_node(
    node: &Node,
    opset: i64,
    args: &[Option<&Tensor>],
    outer: &HashMap<&str, Tensor>,
) -> Result<Vec<Tensor>> {
    let kind = node.kind().ok_or_else(|| GraphError::UnknownOp {
        node: node.name.clone(),
        op_type: node.op_type.clone(),
        domain: node.domain.clone(),
    })?;
    match kind.def().control {
        Some(f) => f(
            &mut ControlCtx {
                node,
                opset,
                scope: Scope::of(outer),
                observer: None,
            },
            args,
        ),
        None => eval_narrow(node, args, |a| (kind.def().eval)(&OpCtx { node, opset }, a)).map_err(
            |source| GraphError::Op {
                node: node.name.clone(),
                op_type: node.op_type.clone(),
                source,
            },
        ),
    }
}

fn run(
    graph: &Graph,
    inputs: Vec<(String, Tensor)>,
    mut observer: Option<Observer<'_>>,
) -> Result<Vec<(String, Tensor)>> {
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
    let mut env: HashMap<&str, Tensor> = HashMap::new();
    for vi in &graph.inputs {
        let t = given
            .remove(&vi.name)
            .ok_or_else(|| GraphError::MissingInput {
                name: vi.name.clone(),
            })?;
        check_input(vi, &t)?;
        env.insert(vi.name.as_str(), t);
    }
    let outs = run_body(
        graph,
        graph.opset(),
        env,
        None,
        observer.as_mut().map(|o| &mut **o as Observer<'_>),
    )?;
    Ok(graph
        .outputs
        .iter()
        .map(|o| o.name.clone())
        .zip(outs)
        .collect())
}

/// Runs `graph`'s nodes with its inputs bound in `env` (the observer sees them first), the
/// enclosing values in `parent`, and returns its outputs in order.
fn run_body<'g>(
    graph: &'g Graph,
    opset: i64,
    mut env: HashMap<&'g str, Tensor>,
    parent: Option<&Scope<'_>>,
    mut observer: Option<Observer<'_>>,
) -> Result<Vec<Tensor>> {
    let fns = plan(graph)?;
    let reads: Vec<Vec<&str>> = graph.nodes.iter().map(node_reads).collect();
    let fused = if observer.is_none() {
        conv_relu_pairs(graph, &reads)
    } else {
        HashMap::new()
    };
    let fused_relus: std::collections::HashSet<usize> = fused.values().copied().collect();
    if let Some(obs) = observer.as_mut() {
        for vi in &graph.inputs {
            if let Some(t) = env.get(vi.name.as_str()) {
                obs(&vi.name, t);
            }
        }
    }
    // Last node index reading each value (its subgraphs' reads included), so it can be
    // dropped afterwards.
    let mut last_use: HashMap<&str, usize> = HashMap::new();
    for (i, r) in reads.iter().enumerate() {
        for &v in r {
            last_use.insert(v, i);
        }
    }
    for o in &graph.outputs {
        last_use.insert(o.name.as_str(), usize::MAX);
    }
    for (i, (node, f)) in graph.nodes.iter().zip(&fns).enumerate() {
        if fused_relus.contains(&i) {
            // Its output was written by the fused Conv.
            continue;
        }
        let mut args: Vec<Option<&Tensor>> = Vec::with_capacity(node.inputs.len());
        let lookup = |name: &str| {
            env.get(name)
                .or_else(|| graph.initializers.get(name))
                .or_else(|| parent.and_then(|p| p.get(name)))
        };
        for name in &node.inputs {
            if name.is_empty() {
                args.push(None);
                continue;
            }
            let t = lookup(name).ok_or_else(|| GraphError::MissingValue {
                node: node.name.clone(),
                op_type: node.op_type.clone(),
                value: name.clone(),
            })?;
            args.push(Some(t));
        }
        let control = node.kind().and_then(|k| k.def().control);
        let outs = if let Some(run_control) = control {
            let scope = Scope {
                values: &env,
                consts: Some(&graph.initializers),
                parent,
            };
            let mut cctx = ControlCtx {
                node,
                opset,
                scope,
                observer: observer.as_mut().map(|o| &mut **o as Observer<'_>),
            };
            run_control(&mut cctx, &args)?
        } else {
            let ctx = OpCtx { node, opset };
            let relu = fused.get(&i).map(|&j| &graph.nodes[j]);
            eval_narrow(node, &args, |args| match relu {
                Some(_) => ops::conv::eval_fused(&ctx, args, true),
                None => f(&ctx, args),
            })
            .map_err(|source| GraphError::Op {
                node: node.name.clone(),
                op_type: node.op_type.clone(),
                source,
            })?
        };
        let relu = fused.get(&i).map(|&j| &graph.nodes[j]);
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
        for &name in &reads[i] {
            if last_use.get(name) == Some(&i) {
                env.remove(name);
            }
        }
    }
    graph
        .outputs
        .iter()
        .map(|o| {
            env.get(o.name.as_str())
                .or_else(|| graph.initializers.get(&o.name))
                .or_else(|| parent.and_then(|p| p.get(&o.name)))
                .cloned()
                .ok_or_else(|| {
                    GraphError::Structure(format!("output `{}` is never produced", o.name))
                })
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

/// Runs `eval` on `args` after `narrow_check`; for an operator whose bfloat16 rule is
/// [`ops::Bf16::Widen`], bfloat16 inputs are decoded to f32 first and the f32 outputs are
/// rounded to bfloat16 (to nearest even) after, the one rounding the reference makes.
pub fn eval_narrow(
    node: &crate::ir::Node,
    args: &[Option<&Tensor>],
    eval: impl FnOnce(&[Option<&Tensor>]) -> std::result::Result<Vec<Tensor>, crate::error::OpError>,
) -> std::result::Result<Vec<Tensor>, crate::error::OpError> {
    narrow_check(node, args)?;
    let widen = node.kind().is_some_and(|k| {
        let def = k.def();
        !def.narrow_types && def.bf16 == ops::Bf16::Widen
    });
    if !widen || !args.iter().flatten().any(|t| t.dtype == DType::BF16) {
        return eval(args);
    }
    let wide: Vec<Option<Tensor>> = args
        .iter()
        .map(|t| {
            t.filter(|t| t.dtype == DType::BF16)
                .map(|t| t.cast(DType::F32))
        })
        .collect();
    let refs: Vec<Option<&Tensor>> = args
        .iter()
        .zip(&wide)
        .map(|(t, w)| w.as_ref().or(*t))
        .collect();
    Ok(eval(&refs)?
        .into_iter()
        .map(|t| {
            if t.dtype == DType::F32 {
                t.cast(DType::BF16)
            } else {
                t
            }
        })
        .collect())
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
