//! Static shape rules per operator, reusing each operator's own geometry code (ConvGeom,
//! PoolGeom, matmul_shapes, Reshape's resolver...) so inference and evaluation agree.

use crate::ir::Node;
use crate::ops::{self, OpCtx};
use crate::tensor::{broadcast_shapes, DType, Tensor};
use std::collections::BTreeMap;

type Info = (DType, Vec<usize>);

/// Output dtypes and shapes of `node` given known input infos, or `None` if unknown.
pub fn infer(
    node: &Node,
    opset: i64,
    ins: &[Option<&Info>],
    consts: &BTreeMap<String, Tensor>,
) -> Option<Vec<Info>> {
    let ctx = OpCtx { node, opset };
    let first = ins.first().copied().flatten();
    let konst = |i: usize| node.inputs.get(i).and_then(|n| consts.get(n));
    Some(match node.op_type.as_str() {
        "Relu" | "LeakyRelu" | "PRelu" | "Clip" | "Sigmoid" | "Tanh" | "HardSigmoid"
        | "HardSwish" | "Softmax" | "Erf" | "Sqrt" | "Gelu" | "Identity" | "BatchNormalization"
        | "LayerNormalization" => {
            let f = first?;
            vec![f.clone()]
        }
        "Add" | "Sub" | "Mul" | "Div" | "Pow" => {
            let (a, b) = (first?, ins.get(1).copied().flatten()?);
            vec![(a.0, broadcast_shapes(&a.1, &b.1)?)]
        }
        "Conv" => {
            let (x, w) = (first?, ins.get(1).copied().flatten()?);
            let g = ops::conv::ConvGeom::new(&ctx, &x.1, &w.1).ok()?;
            let mut s = vec![g.n, g.m];
            s.extend(g.out_sp);
            vec![(x.0, s)]
        }
        "MaxPool" | "AveragePool" => {
            let x = first?;
            let g = ops::pool::PoolGeom::new(&ctx, &x.1).ok()?;
            let mut s = x.1[..2].to_vec();
            s.extend(g.out_sp);
            let mut v = vec![(x.0, s.clone())];
            if node.outputs.len() > 1 {
                v.push((DType::I64, s));
            }
            v
        }
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = first?;
            let mut s = x.1.clone();
            s[2..].iter_mut().for_each(|d| *d = 1);
            vec![(x.0, s)]
        }
        "MatMul" => {
            let (a, b) = (first?, ins.get(1).copied().flatten()?);
            vec![(a.0, ops::mat_mul::matmul_shapes(&a.1, &b.1).ok()?.0)]
        }
        "Gemm" => {
            let (a, b) = (first?, ins.get(1).copied().flatten()?);
            let m = if node.attr_int("transA", 0).ok()? != 0 {
                a.1[1]
            } else {
                a.1[0]
            };
            let n = if node.attr_int("transB", 0).ok()? != 0 {
                b.1[0]
            } else {
                b.1[1]
            };
            vec![(a.0, vec![m, n])]
        }
        "Reshape" => {
            let x = first?;
            let spec = konst(1)?.to_i64_vec();
            let allowzero = node.attr_int("allowzero", 0).ok()? != 0;
            vec![(x.0, ops::reshape::resolve(&x.1, &spec, allowzero).ok()?)]
        }
        "Flatten" => {
            let x = first?;
            let r = x.1.len() as i64;
            let mut a = node.attr_int("axis", 1).ok()?;
            if a < 0 {
                a += r;
            }
            let a = a.clamp(0, r) as usize;
            vec![(
                x.0,
                vec![x.1[..a].iter().product(), x.1[a..].iter().product()],
            )]
        }
        "Transpose" => {
            let x = first?;
            let perm: Vec<usize> = match node.attr_ints("perm").ok()? {
                Some(p) => p.iter().map(|&v| v as usize).collect(),
                None => (0..x.1.len()).rev().collect(),
            };
            vec![(
                x.0,
                perm.iter()
                    .map(|&p| x.1.get(p).copied())
                    .collect::<Option<Vec<_>>>()?,
            )]
        }
        "Concat" => {
            let all: Vec<&Info> = ins.iter().copied().collect::<Option<Vec<_>>>()?;
            let f = all.first()?;
            let a = ops::norm_axis(node.attr_int("axis", 0).ok()?, f.1.len()).ok()?;
            let mut s = f.1.clone();
            s[a] = all.iter().map(|i| i.1.get(a).copied().unwrap_or(0)).sum();
            vec![(f.0, s)]
        }
        "Shape" => {
            let x = first?;
            vec![(
                DType::I64,
                vec![ops::shape::shape_of(&x.1, &ctx).ok()?.len()],
            )]
        }
        "Cast" => {
            let x = first?;
            vec![(
                DType::from_onnx(node.attr_int("to", 0).ok()? as i32)?,
                x.1.clone(),
            )]
        }
        "QuantizeLinear" => {
            let x = first?;
            let dt = match ins.get(2).copied().flatten() {
                Some(z) => z.0,
                None => DType::from_onnx(node.attr_int("output_dtype", 2).ok()? as i32)?,
            };
            vec![(dt, x.1.clone())]
        }
        "DequantizeLinear" => {
            let (x, s) = (first?, ins.get(1).copied().flatten()?);
            vec![(s.0, x.1.clone())]
        }
        // Shapes that depend on input values (Resize, Pad, Slice, Gather...) or ops without
        // a rule are left unknown.
        _ => return None,
    })
}
