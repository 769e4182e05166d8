//! Patterns on 8-bit codes → [`CodeStep`] (`steps/codes.rs`): `DQ(x) → op → Q` for an
//! element-wise op (a 256-entry table) or a layout op (the graph operator on the codes, plus
//! a table when the parameters change), and a layout op reading codes another step wrote
//! (QOperator models).

use super::helpers::{Matcher, Why};
use super::Matched;
use crate::steps::{CodeStep, GraphOp};
use quantkit_graph::ops;
use quantkit_graph::{DType, Data, Node, OpKind, Tensor};

/// Element-wise operators whose QDQ sandwich becomes a 256-entry table (the registry's
/// `Facts::unary`: Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Gelu, Erf,
/// Sqrt, Identity).
pub(super) fn is_table_op(n: &Node) -> bool {
    n.facts().unary
}

/// Operators that only move codes (the registry's `Facts::layout`: Flatten, Reshape,
/// Transpose, Squeeze, Unsqueeze); their QDQ sandwich runs on the codes.
pub(super) fn is_layout_op(n: &Node) -> bool {
    n.facts().layout
}

/// Other one-input operators whose `DQ → op → Q` runs on the codes: those that only move,
/// select or repeat values (`Facts::moves_values` with one data input and one output:
/// Slice, Gather, Tile, Expand, DepthToSpace, SpaceToDepth, ...), `Resize` in nearest mode
/// (it copies input values) and `Pad` in constant mode (the pad value becomes the code that
/// dequantizes to it). Concat (several data inputs) and Split (several outputs) have their
/// own steps; MaxPool has its own.
pub(super) fn is_move_op(n: &Node) -> bool {
    match n.kind() {
        Some(OpKind::Concat | OpKind::Split | OpKind::MaxPool) => false,
        Some(OpKind::Resize) => n
            .attr_string("mode", "nearest")
            .is_ok_and(|m| m == "nearest"),
        Some(OpKind::Pad) => n
            .attr_string("mode", "constant")
            .is_ok_and(|m| m == "constant"),
        _ => n.facts().moves_values,
    }
}

impl<'g> Matcher<'g> {
    /// `DQ(x) → op → Q` anchored at `ni`, the other inputs constant: a layout op (`layout`) on
    /// the codes, or an element-wise op as a table.
    pub(super) fn codes(&self, ni: usize, layout: bool) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        for v in n.inputs.iter().skip(1).filter(|v| !v.is_empty()) {
            if self.init(v).is_none() {
                return Err(format!("input `{v}` is not a constant"));
            }
        }
        if n.outputs.iter().skip(1).any(|o| !o.is_empty()) {
            return Err("more than one output".into());
        }
        let (dqx, xq, qx, qi, qy) = self.sandwich(n)?;
        let nearest = n.is(OpKind::Resize);
        let consts = if n.is(OpKind::Pad) {
            vec![(2, self.pad_code(n, &self.g.nodes[dqx], qx.dtype)?)]
        } else {
            Vec::new()
        };
        let table = self.table(
            &self.g.nodes[dqx],
            (!layout).then_some(n),
            &self.g.nodes[qi],
        )?;
        let layout_op = if layout {
            Some(GraphOp {
                node: n.clone(),
                opset: self.opset,
                f: ops::lookup(&n.domain, &n.op_type).ok_or("no implementation")?,
            })
        } else {
            None
        };
        let desc = format!(
            "{} on {} codes{}",
            n.op_type,
            qx.dtype,
            match (&table, layout) {
                (Some(_), true) => " + requant table",
                (Some(_), false) => " (table)",
                (None, _) => "",
            }
        );
        let mut inputs = vec![xq];
        inputs.extend(n.inputs.iter().skip(1).cloned());
        debug_assert!(matches!(qy.dtype, DType::U8 | DType::I8));
        Ok(Matched {
            kernel: Box::new(CodeStep {
                layout: layout_op,
                table,
                x_dtype: qx.dtype,
                consts,
                nearest,
                desc: desc.clone(),
            }),
            inputs,
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed: vec![qi],
            through: vec![dqx],
            kernel_desc: desc,
        })
    }

    /// `DQ(x) → op → Relu | Clip → Q` for an element-wise `op`: one table
    /// `Q(clip(op(DQ(code))))`. A clamp in front of the QuantizeLinear is how a model states
    /// codes narrower than their 8-bit type (`quantkit qat --activation-bits 4`: u8 codes in
    /// [0, 15]), so the table is the whole sandwich, exact as any table.
    pub(super) fn codes_clamped(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        if !is_table_op(n) || n.outputs.iter().skip(1).any(|o| !o.is_empty()) {
            return Err(format!("`{}` is not an element-wise operator", n.name));
        }
        for v in n.inputs.iter().skip(1).filter(|v| !v.is_empty()) {
            if self.init(v).is_none() {
                return Err(format!("input `{v}` is not a constant"));
            }
        }
        let (dqx, xq, qx) = self.act_input(n)?;
        let ci = self.sole_reader(&n.outputs[0])?;
        let c = &self.g.nodes[ci];
        if !c.facts().clamp || c.inputs.first() != n.outputs.first() {
            return Err(format!(
                "the result feeds {} `{}`, not a Relu/Clip",
                c.op_type, c.name
            ));
        }
        self.clip_range(c)?;
        let qi = self.sole_reader(&c.outputs[0])?;
        let q = &self.g.nodes[qi];
        if !q.is(OpKind::QuantizeLinear) || q.inputs[0] != c.outputs[0] {
            return Err(format!("`{}` does not feed a QuantizeLinear", c.name));
        }
        let qy = self.qparams(q)?;
        let table = self.table_chain(&self.g.nodes[dqx], &[n, c], q)?;
        let desc = format!(
            "{} + {} on {} codes (table)",
            n.op_type, c.op_type, qx.dtype
        );
        let mut inputs = vec![xq];
        inputs.extend(n.inputs.iter().skip(1).cloned());
        debug_assert!(matches!(qy.dtype, DType::U8 | DType::I8));
        Ok(Matched {
            kernel: Box::new(CodeStep {
                layout: None,
                table,
                x_dtype: qx.dtype,
                consts: Vec::new(),
                nearest: false,
                desc: desc.clone(),
            }),
            inputs,
            output: q.outputs[0].clone(),
            absorbed: vec![ci, qi],
            through: vec![dqx],
            kernel_desc: desc,
        })
    }

    /// A layout operator (Flatten, Reshape, ...) on codes another step produced: the graph
    /// operator on the 8-bit tensor, with constant other inputs.
    pub(super) fn layout_codes(&self, ni: usize, dtype: DType) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        for v in n.inputs.iter().skip(1).filter(|v| !v.is_empty()) {
            if self.init(v).is_none() {
                return Err(format!("input `{v}` is not a constant"));
            }
        }
        let x = Self::codes_input(n)?;
        let output = Self::sole_output(n)?;
        let f = ops::lookup(&n.domain, &n.op_type).ok_or("no implementation")?;
        let desc = format!("{} on {dtype} codes", n.op_type);
        let mut inputs = vec![x];
        inputs.extend(n.inputs.iter().skip(1).cloned());
        Ok(Matched {
            kernel: Box::new(CodeStep {
                layout: Some(GraphOp {
                    node: n.clone(),
                    opset: self.opset,
                    f,
                }),
                table: None,
                x_dtype: dtype,
                consts: Vec::new(),
                nearest: false,
                desc: desc.clone(),
            }),
            inputs,
            output,
            absorbed: Vec::new(),
            through: Vec::new(),
            kernel_desc: desc,
        })
    }

    /// Pad's constant value as a code of `x`: the code `c` with `DQ(c)` equal to the value
    /// (0 → the zero point), so padding the codes and dequantizing equals padding the
    /// dequantized tensor. Opset ≥ 11 (the value is input 2).
    fn pad_code(&self, n: &Node, dq: &Node, dtype: DType) -> Why<Tensor> {
        if self.opset < 11 {
            return Err("Pad before opset 11 (value attribute)".into());
        }
        let value = match n.inputs.get(2).filter(|v| !v.is_empty()) {
            None => 0.0f32,
            Some(v) => {
                let t = self.init(v).ok_or("pad value is not a constant")?;
                if t.dtype != DType::F32 || t.len() != 1 {
                    return Err("pad value is not one f32".into());
                }
                t.to_f32_vec()[0]
            }
        };
        let qp = self.qparams(dq)?;
        let code = match dtype {
            DType::U8 => (0..=255i32).find(|&c| {
                quantkit_core::dequantize_value(c as i64, qp.scale, qp.zp as i64) == value
            }),
            _ => (-128..=127i32).find(|&c| {
                quantkit_core::dequantize_value(c as i64, qp.scale, qp.zp as i64) == value
            }),
        }
        .ok_or_else(|| format!("pad value {value} is not a code of `{}`", dq.name))?;
        match dtype {
            DType::U8 => Tensor::new(vec![], Data::U8(vec![code as u8])),
            _ => Tensor::new(vec![], Data::I8(vec![code as i8])),
        }
        .map_err(|e| e.to_string())
    }
}
