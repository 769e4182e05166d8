//! The float input prologue: a chain of `Add`/`Sub`/`Mul`/`Div` nodes with constant
//! operands ending in a `QuantizeLinear` (the input normalisation of image models) becomes
//! one [`PrologueStep`].

use super::helpers::{Matcher, Why};
use super::Matched;
use crate::steps::{ChainNode, ConstOp, GraphOp, PrologueStep, MAX_OPS};
use quantkit_graph::ops::{self, binary::Arith};
use quantkit_graph::OpKind;
use quantkit_graph::{DType, Node};

/// The operator of an element-wise arithmetic node the prologue takes.
fn arith(n: &Node) -> Option<Arith> {
    Some(match n.kind()? {
        OpKind::Add => Arith::Add,
        OpKind::Sub => Arith::Sub,
        OpKind::Mul => Arith::Mul,
        OpKind::Div => Arith::Div,
        _ => return None,
    })
}

impl<'g> Matcher<'g> {
    /// `n` as `value op c` (or `c op value`) with a constant f32 `c` of one element or one
    /// per channel (`[C, 1, 1]`, `[1, C, 1, 1]`).
    fn const_op(&self, n: &Node, value: &str) -> Why<ConstOp> {
        let op =
            arith(n).ok_or_else(|| format!("{} `{}` is not Add/Sub/Mul/Div", n.op_type, n.name))?;
        let (const_first, c) = match (n.inputs.as_slice(), n.outputs.as_slice()) {
            ([a, b], [o]) if !o.is_empty() && a == value && b != value => (false, b),
            ([a, b], [o]) if !o.is_empty() && b == value && a != value => (true, a),
            _ => return Err(format!("`{}` is not a binary op on `{value}`", n.name)),
        };
        let t = self
            .init(c)
            .filter(|t| t.dtype == DType::F32)
            .ok_or_else(|| format!("`{}`: operand `{c}` is not a constant f32", n.name))?;
        let per_channel = matches!(t.shape.as_slice(), [_, 1, 1] | [1, _, 1, 1]);
        if t.len() != 1 && !per_channel {
            return Err(format!(
                "`{}`: operand `{c}` of shape {:?} is neither one value nor per channel",
                n.name, t.shape
            ));
        }
        Ok(ConstOp {
            op,
            const_first,
            values: t.to_f32_vec(),
            shape: t.shape.clone(),
        })
    }

    /// The node as a [`ChainNode`] for the step's fallback, the running value at `pos`.
    fn chain_node(&self, n: &Node, pos: usize) -> Why<ChainNode> {
        let f = ops::lookup(&n.domain, &n.op_type)
            .ok_or_else(|| format!("no implementation of {}", n.op_type))?;
        let mut args = Vec::with_capacity(n.inputs.len());
        for (i, v) in n.inputs.iter().enumerate() {
            args.push(if i == pos || v.is_empty() {
                None
            } else {
                Some(
                    self.init(v)
                        .cloned()
                        .ok_or_else(|| format!("`{}`: input `{v}` is not a constant", n.name))?,
                )
            });
        }
        Ok(ChainNode {
            op: GraphOp {
                node: n.clone(),
                opset: self.opset,
                f,
            },
            pos,
            args,
        })
    }

    /// `x → (Add | Sub | Mul | Div with a constant)+ → QuantizeLinear` anchored at the first
    /// arithmetic node `ni`; every intermediate value has that chain node as sole reader.
    pub(super) fn prologue(&self, ni: usize) -> Why<Matched> {
        let nodes = &self.g.nodes;
        let x = nodes[ni]
            .inputs
            .iter()
            .find(|v| self.init(v).is_none())
            .ok_or("no non-constant input")?
            .clone();
        let mut ops = Vec::new();
        let mut chain = Vec::new();
        let mut absorbed = Vec::new();
        let (mut cur, mut value) = (ni, x.clone());
        let q = loop {
            let n = &nodes[cur];
            let op = self.const_op(n, &value)?;
            chain.push(self.chain_node(n, usize::from(op.const_first))?);
            ops.push(op);
            if ops.len() > MAX_OPS {
                return Err(format!(
                    "more than {MAX_OPS} operations before the QuantizeLinear"
                ));
            }
            value = n.outputs[0].clone();
            let r = self.sole_reader(&value)?;
            let next = &nodes[r];
            if next.is(OpKind::QuantizeLinear) {
                if next.inputs[0] != value {
                    return Err(format!("`{value}` is not the input of `{}`", next.name));
                }
                break r;
            }
            if arith(next).is_none() {
                return Err(format!(
                    "the result feeds {} `{}`, not a QuantizeLinear",
                    next.op_type, next.name
                ));
            }
            absorbed.push(r);
            cur = r;
        };
        let qn = &nodes[q];
        let qp = self.qparams(qn)?;
        if qn.attr_int("block_size", 0).map_err(|e| e.to_string())? != 0 {
            return Err(format!("`{}`: blocked quantization", qn.name));
        }
        chain.push(self.chain_node(qn, 0)?);
        absorbed.push(q);
        if absorbed.iter().any(|&a| a < ni) {
            return Err("the chain is not in node order".into());
        }
        let channels: Vec<usize> = ops
            .iter()
            .map(|o| o.values.len())
            .filter(|&c| c > 1)
            .collect();
        if channels.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!("per-channel constants of {channels:?} channels"));
        }
        let names: Vec<String> = ops
            .iter()
            .map(|o| {
                let name = format!("{:?}", o.op).to_lowercase();
                if o.values.len() > 1 {
                    format!("{name} per-channel")
                } else {
                    name
                }
            })
            .collect();
        let desc = format!(
            "{}, quantize f32→{} in one pass",
            names.join(", "),
            qp.dtype
        );
        Ok(Matched {
            kernel: Box::new(PrologueStep {
                ops,
                scale: qp.scale,
                zp: qp.zp,
                dtype: qp.dtype,
                fallback: chain,
                desc: desc.clone(),
            }),
            inputs: vec![x],
            output: qn.outputs[0].clone(),
            absorbed,
            through: Vec::new(),
            kernel_desc: desc,
        })
    }
}
