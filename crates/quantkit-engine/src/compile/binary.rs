//! Element-wise Add/Sub/Mul/Div on quantized operands:
//!
//! - **A function of one tensor's codes** → [`CodeStep`] with one 256-entry table: both
//!   operands are computed from the same codes `x` through DequantizeLinear, unary
//!   element-wise operators (`Facts::unary`) and Q/DQ pairs, e.g. SiLU/Swish
//!   `DQ(x) · Sigmoid(DQ(x)) → Q`, also with the Sigmoid's output itself quantized
//!   (`Sigmoid → Q → DQ → Mul`), or HardSwish written as `x · HardSigmoid(x)`. Every output
//!   code is then a function of one input code, so the table, evaluated once with the graph
//!   crate's own operators on all 256 codes, equals the QDQ graph bit for bit.
//! - **Two quantized tensors** → [`BinaryStep`] (`steps/binary.rs`):
//!   `DQ(a) ∘ DQ(b) [→ Relu | Clip] → Q` with the reference's exact f32 arithmetic.

use super::helpers::{Matcher, Tail, Why};
use super::Matched;
use crate::steps::{BinaryStep, CodeStep, GraphOp, Table};
use quantkit_graph::ops::binary::Arith;
use quantkit_graph::ops::{self, OpCtx};
use quantkit_graph::{DType, Data, Node, OpKind, Tensor};
use std::collections::{BTreeSet, HashMap};

/// The arithmetic an anchor performs.
fn arith(n: &Node) -> Option<Arith> {
    Some(match n.kind()? {
        OpKind::Add => Arith::Add,
        OpKind::Sub => Arith::Sub,
        OpKind::Mul => Arith::Mul,
        OpKind::Div => Arith::Div,
        _ => return None,
    })
}

/// The 256 codes of an 8-bit type, in byte order (`probe[b]` is the code whose byte is `b`).
pub(super) fn probe(dtype: DType) -> Why<Tensor> {
    match dtype {
        DType::U8 => Tensor::new(vec![256], Data::U8((0..=255).collect())),
        _ => Tensor::new(vec![256], Data::I8((0..=255u8).map(|b| b as i8).collect())),
    }
    .map_err(|e| e.to_string())
}

impl<'g> Matcher<'g> {
    /// Walks back from `value` through DequantizeLinear, QuantizeLinear and unary
    /// element-wise nodes with one-element constant parameters; returns the deepest codes
    /// a DequantizeLinear on the way reads, and the nodes from there to `value`.
    fn code_origin(&self, value: &str) -> Option<(String, Vec<usize>)> {
        let mut v = value.to_string();
        let mut nodes = Vec::new();
        let mut origin: Option<(String, usize)> = None;
        for _ in 0..=self.g.nodes.len() {
            let Some(pi) = self.uses.producer(&v) else {
                break;
            };
            let p = &self.g.nodes[pi];
            if p.outputs.first() != Some(&v) || p.outputs.iter().skip(1).any(|o| !o.is_empty()) {
                break;
            }
            // Arithmetic with a one-element constant (x + 3 in HardSwish written out).
            if arith(p).is_some() && p.inputs.len() == 2 {
                let data = match (
                    self.const_scalar(&p.inputs[0]),
                    self.const_scalar(&p.inputs[1]),
                ) {
                    (None, Some(c)) => Some((0, c)),
                    (Some(c), None) => Some((1, c)),
                    _ => None,
                };
                let Some((k, consts)) = data else {
                    // Both operands computed from the same codes, before any
                    // DequantizeLinear on the way (a HardSwish written `x·clip(x + 3)` inside
                    // a longer unquantized chain): the union of both walks.
                    if origin.is_some() {
                        break;
                    }
                    let (xa, na) = self.code_origin(&p.inputs[0])?;
                    let (xb, nb) = self.code_origin(&p.inputs[1])?;
                    if xa != xb {
                        return None;
                    }
                    nodes.push(pi);
                    for k in na.into_iter().chain(nb) {
                        if !nodes.contains(&k) {
                            nodes.push(k);
                        }
                    }
                    return Some((xa, nodes));
                };
                nodes.push(pi);
                nodes.extend(consts);
                v = p.inputs[k].clone();
                continue;
            }
            let q_or_dq = p.is(OpKind::QuantizeLinear) || p.is(OpKind::DequantizeLinear);
            if !(q_or_dq || p.facts().unary) {
                break;
            }
            if q_or_dq && self.qparams(p).is_err() {
                break;
            }
            // Other inputs: one-element constants (the table is per element).
            let scalar_consts = p
                .inputs
                .iter()
                .skip(1)
                .filter(|i| !i.is_empty())
                .all(|i| self.init(i).is_some_and(|t| t.len() == 1));
            if !scalar_consts || p.inputs.first().is_none_or(|i| i.is_empty()) {
                break;
            }
            nodes.push(pi);
            v = p.inputs[0].clone();
            if p.is(OpKind::DequantizeLinear) {
                origin = Some((v.clone(), nodes.len()));
            }
        }
        let (codes, len) = origin?;
        nodes.truncate(len);
        Some((codes, nodes))
    }

    /// The nodes computing `value` when it is a one-element constant: none for an
    /// initializer, the DequantizeLinear for a quantized constant (all inputs initializers).
    fn const_scalar(&self, value: &str) -> Option<Vec<usize>> {
        if let Some(t) = self.init(value) {
            return (t.len() == 1).then(Vec::new);
        }
        let pi = self.uses.producer(value)?;
        let p = &self.g.nodes[pi];
        let all_const = p
            .inputs
            .iter()
            .all(|i| i.is_empty() || self.init(i).is_some());
        let one = p
            .inputs
            .first()
            .and_then(|i| self.init(i))
            .is_some_and(|t| t.len() == 1);
        (p.is(OpKind::DequantizeLinear) && all_const && one).then(|| vec![pi])
    }

    /// An Add/Sub/Mul/Div whose operands are both functions of the same codes `x` (SiLU:
    /// `DQ(x) · Sigmoid(DQ(x))`), followed by unary ops and a QuantizeLinear: one table.
    pub(super) fn code_function(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        if n.inputs.len() != 2 || arith(n).is_none() {
            return Err("not a binary arithmetic node".into());
        }
        // Each operand: computed from codes, or a one-element constant (x / 6).
        let side = |v: &str| -> Option<(Option<String>, Vec<usize>)> {
            match self.code_origin(v) {
                Some((x, nodes)) => Some((Some(x), nodes)),
                None => self.const_scalar(v).map(|nodes| (None, nodes)),
            }
        };
        let (oa, pa) =
            side(&n.inputs[0]).ok_or("operand 0 is not computed from quantized codes")?;
        let (ob, pb) =
            side(&n.inputs[1]).ok_or("operand 1 is not computed from quantized codes")?;
        let xa = match (oa, ob) {
            (Some(a), Some(b)) if a == b => a,
            (Some(a), None) | (None, Some(a)) => a,
            (Some(a), Some(b)) => {
                return Err(format!("operands come from different codes (`{a}`, `{b}`)"))
            }
            (None, None) => return Err("both operands are constants".into()),
        };
        // Forward: unary element-wise nodes, then the QuantizeLinear.
        let mut tail = Vec::new();
        let mut v = n.outputs[0].clone();
        let q = loop {
            let r = self.sole_reader(&v)?;
            let rn = &self.g.nodes[r];
            if rn.is(OpKind::QuantizeLinear) {
                self.qparams(rn)?;
                break r;
            }
            let scalar_consts = rn
                .inputs
                .iter()
                .skip(1)
                .filter(|i| !i.is_empty())
                .all(|i| self.init(i).is_some_and(|t| t.len() == 1));
            // Arithmetic with a one-value constant continues the chain (`· c + d` after a
            // HardSwish written out).
            let scalar_arith = arith(rn).is_some()
                && rn.inputs.len() == 2
                && rn.inputs.iter().any(|i| i == &v)
                && rn
                    .inputs
                    .iter()
                    .any(|i| i != &v && self.init(i).is_some_and(|t| t.len() == 1));
            if !(scalar_arith || rn.facts().unary && scalar_consts) || rn.outputs.len() != 1 {
                return Err(format!(
                    "the result feeds {} `{}`, not a QuantizeLinear",
                    rn.op_type, rn.name
                ));
            }
            tail.push(r);
            v = rn.outputs[0].clone();
        };
        let mut order: BTreeSet<usize> = pa.iter().chain(&pb).copied().collect();
        order.insert(ni);
        order.extend(tail.iter().copied());
        order.insert(q);
        // The code type of x: the zero point of a DequantizeLinear reading it.
        let first_dq = order
            .iter()
            .map(|&k| &self.g.nodes[k])
            .find(|d| d.is(OpKind::DequantizeLinear) && d.inputs[0] == xa)
            .ok_or("no DequantizeLinear reads the codes")?;
        let x_dtype = self.qparams(first_dq)?.dtype;
        let mut env: HashMap<&str, Tensor> = HashMap::new();
        env.insert(xa.as_str(), probe(x_dtype)?);
        let mut last = None;
        for &k in &order {
            let node = &self.g.nodes[k];
            let f = ops::lookup(&node.domain, &node.op_type)
                .ok_or_else(|| format!("no implementation of {}", node.op_type))?;
            let mut args: Vec<Option<&Tensor>> = Vec::new();
            for i in &node.inputs {
                if i.is_empty() {
                    args.push(None);
                } else if let Some(t) = env.get(i.as_str()) {
                    args.push(Some(t));
                } else {
                    args.push(Some(self.init(i).ok_or_else(|| {
                        format!(
                            "`{}`: input `{i}` is neither constant nor from `{xa}`",
                            node.name
                        )
                    })?));
                }
            }
            let ctx = OpCtx {
                node,
                opset: self.opset,
            };
            let y = f(&ctx, &args)
                .map_err(|e| format!("`{}`: {e}", node.name))?
                .into_iter()
                .next()
                .ok_or_else(|| format!("`{}` produced nothing", node.name))?;
            let constant = node
                .inputs
                .iter()
                .all(|i| i.is_empty() || self.init(i).is_some());
            if !constant && y.shape != [256] {
                return Err(format!("`{}` is not element-wise", node.name));
            }
            env.insert(node.outputs[0].as_str(), y);
            last = Some(k);
        }
        let y = &env[self.g.nodes[last.ok_or("empty")?].outputs[0].as_str()];
        if y.shape != [256] {
            return Err("the result is not element-wise".into());
        }
        let bytes: Vec<u8> = match &y.data {
            Data::U8(d) => d.clone(),
            Data::I8(d) => d.iter().map(|&b| b as u8).collect(),
            _ => return Err("the QuantizeLinear does not produce 8-bit codes".into()),
        };
        let ops_desc: Vec<&str> = order
            .iter()
            .map(|&k| &self.g.nodes[k])
            .filter(|d| !d.is(OpKind::QuantizeLinear) && !d.is(OpKind::DequantizeLinear))
            .map(|d| d.op_type.as_str())
            .collect();
        let desc = format!("{} of {x_dtype} codes (table)", ops_desc.join("∘"));
        let mut absorbed = tail;
        absorbed.push(q);
        let through: Vec<usize> = pa.iter().chain(&pb).copied().collect();
        Ok(Matched {
            kernel: Box::new(CodeStep {
                layout: None,
                table: Some(Table {
                    bytes,
                    out: y.dtype,
                }),
                x_dtype,
                consts: Vec::new(),
                nearest: false,
                desc: desc.clone(),
            }),
            inputs: vec![xa.clone()],
            output: self.g.nodes[q].outputs[0].clone(),
            absorbed,
            through,
            kernel_desc: desc,
        })
    }

    /// `DQ(a) ∘ DQ(b) [→ Relu | Clip] → Q` anchored at an Add/Sub/Mul/Div: two 8-bit code
    /// tensors with constant per-tensor parameters.
    pub(super) fn binary_codes(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let op = arith(n).ok_or("not Add/Sub/Mul/Div")?;
        if n.inputs.len() != 2 {
            return Err(format!("{} needs two inputs", n.op_type));
        }
        let dqa = self.dq_of(&n.inputs[0])?;
        let dqb = self.dq_of(&n.inputs[1])?;
        let (na, nb) = (&self.g.nodes[dqa], &self.g.nodes[dqb]);
        let (qa, qb) = (self.qparams(na)?, self.qparams(nb)?);
        let Tail {
            absorbed,
            clamp,
            q: qi,
            qp: qy,
        } = self.tail(&n.outputs[0])?;
        let desc = format!(
            "{} of {} and {} codes → {} (exact f32)",
            n.op_type, qa.dtype, qb.dtype, qy.dtype
        );
        Ok(Matched {
            kernel: Box::new(BinaryStep {
                op,
                da: self.dq_table(na, qa.dtype)?,
                db: self.dq_table(nb, qb.dtype)?,
                a_dtype: qa.dtype,
                b_dtype: qb.dtype,
                scale: qy.scale,
                zp: qy.zp,
                out: qy.dtype,
                clamp,
                pairs: Default::default(),
                graph_op: GraphOp {
                    node: n.clone(),
                    opset: self.opset,
                    f: ops::lookup(&n.domain, &n.op_type).ok_or("no implementation")?,
                },
            }),
            inputs: vec![na.inputs[0].clone(), nb.inputs[0].clone()],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed,
            through: vec![dqa, dqb],
            kernel_desc: desc,
        })
    }
}
