//! Static shape inference: each operator's own shape rule ([`crate::ops::OpDef::infer`]),
//! which reuses the operator's geometry code (ConvGeom, PoolGeom, matmul_shapes, Reshape's
//! resolver...) so inference and evaluation agree.

use crate::ir::Node;
use crate::ops::{InferIn, OpCtx, OpKind};
use crate::tensor::Tensor;
use std::collections::BTreeMap;

pub use crate::ops::Info;

/// Output dtypes and shapes of `node` given known input infos, or `None` if unknown
/// (shapes that depend on input values — Resize, Pad, Slice, Gather... — and operators
/// without a rule).
pub fn infer(
    node: &Node,
    opset: i64,
    ins: &[Option<&Info>],
    consts: &BTreeMap<String, Tensor>,
) -> Option<Vec<Info>> {
    let rule = OpKind::of(&node.domain, &node.op_type)?.def().infer?;
    rule(&OpCtx { node, opset }, &InferIn { ins, consts })
}
