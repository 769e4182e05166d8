//! Compilation of a graph into a [`Plan`]: the patterns that turn the QDQ layout (and
//! QOperator nodes) into integer steps, then the passes that make the steps a plan.
//!
//! # Patterns
//!
//! Nodes are visited in graph order. A node an earlier step absorbed is skipped; any other
//! node is tried as the anchor of the pattern its operator selects in
//! [`Matcher::try_match`], in this order (each matcher sits beside the step it produces):
//!
//! | anchor | matcher (`compile/`) | step (`steps/`) |
//! |---|---|---|
//! | com.microsoft `QGemm` | `gemm.rs` `qgemm` | `gemm.rs` `GemmStep` |
//! | `Conv` | `conv.rs` `conv` (+ a following MaxPool: `max_pool_after`) | `conv.rs` `ConvStep` |
//! | `Gemm`, `MatMul` | `gemm.rs` `gemm` (+ a Flatten in front: `flatten_gemm.rs`) | `gemm.rs` `GemmStep` (+ `flatten_gemm.rs` `FlatInput`) |
//! | `QLinearConv` | `conv.rs` `qlinear_conv` | `conv.rs` `ConvStep` |
//! | `QLinearMatMul` | `gemm.rs` `qlinear_matmul` | `gemm.rs` `GemmStep` |
//! | `MaxPool` | `pool.rs` `max_pool_codes` on codes, else `max_pool` | `pool.rs` `MaxPoolStep` |
//! | `ConvInteger`, `MatMulInteger` | `dynamic.rs` `dynamic` | `dynamic.rs` `DynamicStep` |
//! | `Add` | `add.rs` `add`, else `prologue.rs` `prologue` | `add.rs` `AddStep`, `prologue.rs` `PrologueStep` |
//! | `Sub`, `Mul`, `Div` | `prologue.rs` `prologue` | `prologue.rs` `PrologueStep` |
//! | layout ops (`LAYOUT_OPS`) | `codes.rs` `layout_codes` on codes, else `codes` | `codes.rs` `CodeStep` |
//! | element-wise ops (`TABLE_OPS`) | `codes.rs` `codes` | `codes.rs` `CodeStep` |
//!
//! A node no pattern takes, or whose pattern's preconditions fail (the reason goes into the
//! report), becomes a step running the graph crate's operator (`steps/graph_op.rs`): a float
//! island or a Q/DQ conversion. The matchers share `helpers.rs` (graph queries, the
//! `DQ → op → Q` sandwich, the `[Relu | Clip] → Q` tail) and `quant.rs` (quantization
//! parameters, weights, bias, output stage, code tables).
//!
//! # Adding a pattern
//!
//! 1. `compile/NAME.rs`: a method `fn NAME(&self, ni: usize) -> Why<Matched>` in an
//!    `impl Matcher` block, returning why not when a precondition fails; `mod NAME;` below.
//! 2. `steps/NAME.rs`: the step, a struct implementing `Kernel`; `mod NAME;` and
//!    `pub(crate) use` in `steps/mod.rs`.
//! 3. One line in [`Matcher::try_match`]'s table sending the anchor's operator to `NAME`.

use crate::error::{EngineError, Result};
use crate::steps::{GraphOp, Kernel};
use crate::value::Val;
use crate::{EngineOptions, NodeReport, Placement, Plan, Step};
use codes::{LAYOUT_OPS, TABLE_OPS};
use helpers::{is_default_domain, Matcher, Why, MS_DOMAIN};
use quantkit_graph::ops;
use quantkit_graph::Graph;
use std::collections::{HashMap, HashSet};

mod add;
mod codes;
mod conv;
mod dynamic;
mod flatten_gemm;
mod gemm;
pub(crate) mod helpers;
mod pool;
mod prologue;
mod quant;

/// A matched pattern: one integer step standing for several nodes.
struct Matched {
    kernel: Box<dyn Kernel>,
    /// Value names the step reads (input 0 is the 8-bit codes).
    inputs: Vec<String>,
    /// The value it writes (the final QuantizeLinear's output).
    output: String,
    /// Nodes it absorbs besides the anchor (activation, QuantizeLinear).
    absorbed: Vec<usize>,
    /// DequantizeLinear nodes it reads through (dropped when nothing else reads them).
    through: Vec<usize>,
    kernel_desc: String,
}

/// A step before slots are assigned: anchor node, kernel, input and output names.
struct Pending {
    node: usize,
    kernel: Box<dyn Kernel>,
    inputs: Vec<String>,
    outputs: Vec<String>,
}

impl<'g> Matcher<'g> {
    /// Tries the integer pattern anchored at node `ni`.
    fn try_match(&self, ni: usize) -> Option<Why<Matched>> {
        let n = &self.g.nodes[ni];
        let op = n.op_type.as_str();
        // Codes straight from another step (QOperator models): MaxPool and layout ops.
        let codes = || n.inputs.first().and_then(|x| self.code_dtype(x));
        let m = if n.domain == MS_DOMAIN {
            match op {
                "QGemm" => self.qgemm(ni),
                _ => return None,
            }
        } else if !is_default_domain(n) {
            return None;
        } else {
            match op {
                "Conv" => self.conv(ni),
                "Gemm" | "MatMul" => self.gemm(ni),
                "QLinearConv" => self.qlinear_conv(ni),
                "QLinearMatMul" => self.qlinear_matmul(ni),
                "MaxPool" => match codes() {
                    Some(dt) => self.max_pool_codes(ni, dt),
                    None => self.max_pool(ni),
                },
                "ConvInteger" | "MatMulInteger" => self.dynamic(ni),
                // QLinearAdd of two quantized operands, else a float input prologue.
                "Add" => self.add(ni).or_else(|e| self.prologue(ni).map_err(|_| e)),
                "Sub" | "Mul" | "Div" => self.prologue(ni),
                _ if LAYOUT_OPS.contains(&op) => match codes() {
                    Some(dt) => self.layout_codes(ni, dt),
                    None => self.codes(ni, true),
                },
                _ if TABLE_OPS.contains(&op) => self.codes(ni, false),
                _ => return None,
            }
        };
        Some(if self.opts.keep_float.iter().any(|k| k == &n.name) {
            Err("kept in float by EngineOptions::keep_float".into())
        } else {
            m
        })
    }
}

/// Compiles a graph into an integer plan. Patterns whose preconditions fail (and operators
/// without an integer kernel) become float islands; only an operator that neither the
/// kernels nor the graph crate implement is an error.
pub fn compile(g: &Graph, opts: &EngineOptions) -> Result<Plan> {
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

    // Drop steps whose outputs nobody needs (the DQs an integer step reads through).
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
    let mut steps: Vec<Step> = Vec::new();
    for (p, keep) in pending.into_iter().zip(keep) {
        let Pending {
            node: ni,
            kernel,
            inputs: ins,
            outputs: outs,
        } = p;
        let n = &g.nodes[ni];
        if !keep {
            if placement[ni].is_none() {
                placement[ni] = Some(match through_of.get(&ni) {
                    Some(a) => Placement::Fused { into: a.clone() },
                    None => Placement::Constant,
                });
            }
            continue;
        }
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
        // Fold a float step whose inputs are all constants (a weight's DQ when its conv
        // stayed float): it would compute the same tensor on every run.
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
        if placement[ni].is_none() {
            placement[ni] = Some(match n.op_type.as_str() {
                "QuantizeLinear" | "DequantizeLinear" => Placement::Convert,
                op => Placement::Float {
                    reason: reasons
                        .remove(&ni)
                        .unwrap_or_else(|| format!("no integer kernel for {op}")),
                },
            });
        }
        steps.push(step);
    }
    let outputs: Vec<(String, usize)> = g
        .outputs
        .iter()
        .map(|o| (o.name.clone(), slot_of(&o.name, &mut consts)))
        .collect();
    let mut last_use = vec![0usize; consts.len()];
    for (i, s) in steps.iter().enumerate() {
        for &v in s.inputs.iter().flatten() {
            last_use[v] = i;
        }
    }
    for (_, s) in &outputs {
        last_use[*s] = usize::MAX;
    }
    let report = g
        .nodes
        .iter()
        .zip(placement)
        .map(|(n, p)| NodeReport {
            node: n.name.clone(),
            op_type: n.op_type.clone(),
            placement: p.unwrap_or(Placement::Constant),
        })
        .collect();
    Ok(Plan {
        steps,
        consts,
        inputs,
        outputs,
        last_use,
        report,
    })
}
