//! The passes of [`super::compile`], in the order it runs them: match, remove dead steps,
//! allocate slots, fold constants, report, liveness. Each pass keeps the graph's node order
//! for the steps, so the plan runs them as the graph would.

use super::helpers::Matcher;
use crate::error::{EngineError, Result};
use crate::steps::{ControlOp, GraphOp, Kernel};
use crate::value::Val;
use crate::{EngineOptions, NodeReport, Placement, Step};
use quantkit_graph::ops;
use quantkit_graph::OpKind;
use quantkit_graph::{Graph, ValueInfo};
use std::collections::{HashMap, HashSet};

/// A step before slots are assigned: anchor node, kernel, input and output names.
pub(super) struct Pending {
    node: usize,
    kernel: Box<dyn Kernel>,
    inputs: Vec<String>,
    outputs: Vec<String>,
}

/// What the passes decided about each graph node so far.
pub(super) struct Placed {
    /// Each node's placement; `None` until a pass decides it.
    pub(super) placement: Vec<Option<Placement>>,
    /// A DequantizeLinear an integer step reads through: the name of that step's anchor.
    through_of: HashMap<usize, String>,
    /// Why the pattern anchored at a node did not match.
    reasons: HashMap<usize, String>,
}

/// Match: tries every node not yet absorbed, in graph order, as the anchor of a pattern
/// ([`Matcher::try_match`]). A match is one integer step; its anchor is placed `Integer` and
/// the nodes it absorbs `Fused`. Every other node becomes a step running the graph crate's
/// operator, with the reason its pattern failed kept for the report. Guarantees one pending
/// step per node not absorbed, in node order; the only error is an operator neither the
/// kernels nor the graph crate implement.
pub(super) fn match_patterns(g: &Graph, opts: &EngineOptions) -> Result<(Vec<Pending>, Placed)> {
    let m = Matcher::new(g, opts);
    let opset = g.opset();
    let mut placement: Vec<Option<Placement>> = vec![None; g.nodes.len()];
    let mut through_of: HashMap<usize, String> = HashMap::new();
    // Steps as (anchor node index, kernel, input names, output names).
    let mut pending: Vec<Pending> = Vec::new();
    let mut reasons: HashMap<usize, String> = HashMap::new();
    for i in 0..g.nodes.len() {
        if placement[i].is_some() {
            continue;
        }
        let n = &g.nodes[i];
        match m.try_match(i) {
            Some(Ok(mt)) => {
                placement[i] = Some(Placement::Integer {
                    kernel: mt.kernel_desc.clone(),
                });
                for &a in &mt.absorbed {
                    placement[a] = Some(Placement::Fused {
                        into: n.name.clone(),
                    });
                }
                for &t in &mt.through {
                    through_of.entry(t).or_insert_with(|| n.name.clone());
                }
                pending.push(Pending {
                    node: i,
                    kernel: mt.kernel,
                    inputs: mt.inputs,
                    outputs: vec![mt.output],
                });
                continue;
            }
            Some(Err(why)) => {
                reasons.insert(i, why);
            }
            None => {}
        }
        let f = ops::lookup(&n.domain, &n.op_type).ok_or_else(|| EngineError::UnknownOp {
            node: n.name.clone(),
            op_type: n.op_type.clone(),
            domain: if n.domain.is_empty() {
                "ai.onnx".into()
            } else {
                n.domain.clone()
            },
        })?;
        if n.has_subgraphs() {
            // The values its subgraphs read are inputs of the step, so liveness keeps them
            // and dead-step removal keeps their producers.
            let outer: Vec<String> = n.outer_reads().into_iter().map(str::to_string).collect();
            let mut inputs = n.inputs.clone();
            inputs.extend(outer.iter().cloned());
            pending.push(Pending {
                node: i,
                kernel: Box::new(ControlOp {
                    node: n.clone(),
                    opset,
                    outer,
                }),
                inputs,
                outputs: n.outputs.clone(),
            });
            continue;
        }
        pending.push(Pending {
            node: i,
            kernel: Box::new(GraphOp {
                node: n.clone(),
                opset,
                f,
            }),
            inputs: n.inputs.clone(),
            outputs: n.outputs.clone(),
        });
    }
    Ok((
        pending,
        Placed {
            placement,
            through_of,
            reasons,
        },
    ))
}

/// Remove dead steps: keeps only the steps some graph output needs, directly or through
/// later steps; the rest (the DequantizeLinear nodes an integer step reads through, a
/// weight's DQ) are dropped and placed `Fused` into the step that reads through them, else
/// `Constant`. A dropped anchor of an integer step keeps its `Integer` placement.
pub(super) fn remove_dead_steps(
    g: &Graph,
    pending: Vec<Pending>,
    placed: &mut Placed,
) -> Vec<Pending> {
    let mut needed: HashSet<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
    let mut keep = vec![false; pending.len()];
    for (k, p) in pending.iter().enumerate().rev() {
        if p.outputs.iter().any(|o| needed.contains(o.as_str())) {
            keep[k] = true;
            needed.extend(
                p.inputs
                    .iter()
                    .filter(|v| !v.is_empty())
                    .map(String::as_str),
            );
        }
    }
    pending
        .into_iter()
        .zip(keep)
        .filter_map(|(p, keep)| {
            let ni = p.node;
            if !keep {
                if placed.placement[ni].is_none() {
                    placed.placement[ni] = Some(match placed.through_of.get(&ni) {
                        Some(a) => Placement::Fused { into: a.clone() },
                        None => Placement::Constant,
                    });
                }
                return None;
            }
            Some(p)
        })
        .collect()
}

/// The plan's value slots, numbered by [`allocate_slots`].
pub(super) struct Slots {
    /// Graph inputs and their slots.
    pub(super) inputs: Vec<(ValueInfo, usize)>,
    /// The steps in order, each with its anchor node.
    pub(super) steps: Vec<(usize, Step)>,
    /// Graph outputs and their slots.
    pub(super) outputs: Vec<(String, usize)>,
    /// Constant value of each slot: the initializers (the other slots are `None`).
    pub(super) consts: Vec<Option<Val>>,
}

/// Allocate slots: one slot per value name, numbered in order of first use — graph inputs,
/// then each step's inputs and outputs in step order, then graph outputs — and the step
/// itself over those slots (an empty name, an omitted input or unused output, has none).
/// A slot holding an initializer starts out as that constant.
pub(super) fn allocate_slots(g: &Graph, pending: Vec<Pending>) -> Slots {
    let mut slots: HashMap<String, usize> = HashMap::new();
    let mut consts: Vec<Option<Val>> = Vec::new();
    let mut slot_of = |name: &str, consts: &mut Vec<Option<Val>>| -> usize {
        if let Some(&s) = slots.get(name) {
            return s;
        }
        let s = consts.len();
        consts.push(g.initializers.get(name).cloned().map(Val::nchw));
        slots.insert(name.to_string(), s);
        s
    };
    let inputs: Vec<_> = g
        .inputs
        .iter()
        .map(|vi| (vi.clone(), slot_of(&vi.name, &mut consts)))
        .collect();
    let mut steps = Vec::with_capacity(pending.len());
    for p in pending {
        let Pending {
            node: ni,
            kernel,
            inputs: ins,
            outputs: outs,
        } = p;
        let n = &g.nodes[ni];
        let in_slots: Vec<Option<usize>> = ins
            .iter()
            .map(|v| (!v.is_empty()).then(|| slot_of(v, &mut consts)))
            .collect();
        let out_slots: Vec<Option<usize>> = outs
            .iter()
            .map(|v| (!v.is_empty()).then(|| slot_of(v, &mut consts)))
            .collect();
        let step = Step {
            node: n.name.clone(),
            op_type: n.op_type.clone(),
            inputs: in_slots,
            outputs: out_slots,
            kernel,
        };
        steps.push((ni, step));
    }
    let outputs: Vec<(String, usize)> = g
        .outputs
        .iter()
        .map(|o| (o.name.clone(), slot_of(&o.name, &mut consts)))
        .collect();
    Slots {
        inputs,
        steps,
        outputs,
        consts,
    }
}

/// Fold constants: runs each float step (a node no pattern placed) whose inputs are all
/// constants once, now, in step order (so a folded value can feed a later fold), e.g. a
/// weight's DQ when its conv stayed float: it would compute the same tensor on every run.
/// Its outputs become constants, its node `Constant`, and the step leaves the plan; integer
/// steps are never folded.
pub(super) fn fold_constants(
    steps: Vec<(usize, Step)>,
    consts: &mut [Option<Val>],
    placement: &mut [Option<Placement>],
) -> Result<Vec<(usize, Step)>> {
    let mut kept = Vec::with_capacity(steps.len());
    for (ni, step) in steps {
        let all_const = placement[ni].is_none()
            && step
                .inputs
                .iter()
                .all(|s| s.is_none_or(|s| consts[s].is_some()));
        if all_const {
            let args: Vec<Option<&Val>> = step
                .inputs
                .iter()
                .map(|s| s.and_then(|s| consts[s].as_ref()))
                .collect();
            let outs = step.kernel.run(&step, &args)?;
            for (s, v) in step.outputs.iter().zip(outs) {
                if let Some(s) = s {
                    consts[*s] = Some(v);
                }
            }
            placement[ni] = Some(Placement::Constant);
            continue;
        }
        kept.push((ni, step));
    }
    Ok(kept)
}

/// Report: every graph node with its placement, in graph order. The nodes of the remaining
/// graph-operator steps are placed here: QuantizeLinear/DequantizeLinear `Convert`, any
/// other `Float` with the reason its pattern failed (or that there is no integer kernel);
/// a node no pass placed is `Constant`.
pub(super) fn report(g: &Graph, placed: Placed, steps: &[(usize, Step)]) -> Vec<NodeReport> {
    let Placed {
        mut placement,
        mut reasons,
        ..
    } = placed;
    for &(ni, _) in steps {
        let n = &g.nodes[ni];
        if placement[ni].is_none() {
            placement[ni] = Some(
                if n.is(OpKind::QuantizeLinear) || n.is(OpKind::DequantizeLinear) {
                    Placement::Convert
                } else {
                    Placement::Float {
                        reason: reasons
                            .remove(&ni)
                            .unwrap_or_else(|| format!("no integer kernel for {}", n.op_type)),
                    }
                },
            );
        }
    }
    g.nodes
        .iter()
        .zip(placement)
        .map(|(n, p)| NodeReport {
            node: n.name.clone(),
            op_type: n.op_type.clone(),
            placement: p.unwrap_or(Placement::Constant),
        })
        .collect()
}

/// Liveness: for each of the `slots` slots the index of the last step reading it, after
/// which the plan frees the value; graph outputs get `usize::MAX` and are never freed.
pub(super) fn liveness(steps: &[Step], slots: usize, outputs: &[(String, usize)]) -> Vec<usize> {
    let mut last_use = vec![0usize; slots];
    for (i, s) in steps.iter().enumerate() {
        for &v in s.inputs.iter().flatten() {
            last_use[v] = i;
        }
    }
    for (_, s) in outputs {
        last_use[*s] = usize::MAX;
    }
    last_use
}

/// Chains of table steps: a table-only step ([`Kernel::as_table_step`]) reading the one
/// output of another table-only step, when nothing else reads that value and it is not a
/// graph output, becomes one step whose table is the composition (exact: each table maps a
/// code to a code; e.g. HardSwish written `x·relu6(x + 3)` → Q → DQ → `/6` → Q, two tables,
/// one pass over the tensor instead of two). Likewise a table-only step or a computed
/// per-channel PRelu reading the one output of a step that can map its own output
/// ([`Kernel::absorb`]: a conv) goes into that step: no step, no new buffer, the codes
/// mapped while in cache. The absorbed step's node keeps its placement.
pub(super) fn fuse_tables(
    steps: Vec<(usize, Step)>,
    outputs: &[(String, usize)],
) -> Vec<(usize, Step)> {
    let mut readers: HashMap<usize, usize> = HashMap::new();
    for (_, s) in &steps {
        for &v in s.inputs.iter().flatten() {
            *readers.entry(v).or_default() += 1;
        }
    }
    let graph_outputs: HashSet<usize> = outputs.iter().map(|&(_, s)| s).collect();
    let mut kept: Vec<(usize, Step)> = Vec::with_capacity(steps.len());
    // Slot → index in `kept` of the step with one output writing it.
    let mut writer: HashMap<usize, usize> = HashMap::new();
    for (ni, step) in steps {
        let single_input = match step.inputs.as_slice() {
            [Some(v)] => Some(*v),
            _ => None,
        };
        let prev = single_input
            .filter(|v| readers.get(v) == Some(&1) && !graph_outputs.contains(v))
            .and_then(|v| writer.get(&v).copied());
        if let Some(k) = prev {
            let composed = match (
                kept[k].1.kernel.as_table_step(),
                step.kernel.as_table_step(),
            ) {
                (Some(first), Some(next)) => first.then(next),
                _ => None,
            };
            let fused = match composed {
                Some(c) => {
                    kept[k].1.kernel = Box::new(c);
                    true
                }
                None => {
                    let next = step.kernel.as_ref();
                    (next.as_table_step().is_some() || next.as_channel_table().is_some())
                        && kept[k].1.kernel.absorb(next)
                }
            };
            if fused {
                let prev = &mut kept[k].1;
                prev.outputs = step.outputs;
                if let [Some(o)] = prev.outputs.as_slice() {
                    writer.insert(*o, k);
                }
                continue;
            }
        }
        if let [Some(o)] = step.outputs.as_slice() {
            writer.insert(*o, kept.len());
        }
        kept.push((ni, step));
    }
    kept
}
