//! `Split`: cuts the input along `axis` (default 0, negative from opset 11) into one
//! piece per output.
//!
//! The sizes come from `split`: an optional input at opset 1, the attribute from opset 2,
//! the optional int64 input again from opset 13. Without it the axis is cut into equal
//! pieces, one per output, and must divide evenly; from opset 18 the attribute
//! `num_outputs` may ask for `n` pieces of `⌈len/n⌉` with a smaller last one. The sizes
//! must be non-negative, one per output, and sum to the axis length.

use super::{input, ints_of, make, norm_axis, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// The piece sizes along an axis of length `len`, given the `split` values if any.
fn sizes(ctx: &OpCtx, split: Option<Vec<i64>>, len: usize) -> Result<Vec<usize>, OpError> {
    let outputs = ctx.node.outputs.len();
    if let Some(s) = split.filter(|s| !s.is_empty()) {
        if s.len() != outputs {
            return Err(OpError::Invalid(format!(
                "Split: {} sizes {s:?} for {outputs} outputs",
                s.len()
            )));
        }
        let sizes = s
            .iter()
            .map(|&v| usize::try_from(v))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| OpError::Invalid(format!("Split: negative size in {s:?}")))?;
        if sizes.iter().sum::<usize>() != len {
            return Err(OpError::Invalid(format!(
                "Split: sizes {s:?} do not sum to the axis length {len}"
            )));
        }
        return Ok(sizes);
    }
    let num = ctx.node.attr_int("num_outputs", 0)?;
    if ctx.opset >= 18 && ctx.node.attr("num_outputs").is_some() {
        if num < 1 || num as usize != outputs {
            return Err(OpError::attr(
                "num_outputs",
                format!("{num} for a node with {outputs} outputs"),
            ));
        }
        let n = num as usize;
        let chunk = len.div_ceil(n);
        let rest = len.checked_sub(chunk * (n - 1)).ok_or_else(|| {
            OpError::attr(
                "num_outputs",
                format!("{n} pieces of {chunk} overrun the axis length {len}"),
            )
        })?;
        let mut s = vec![chunk; n];
        s[n - 1] = rest;
        return Ok(s);
    }
    if outputs == 0 || !len.is_multiple_of(outputs) {
        return Err(OpError::Invalid(format!(
            "Split: axis length {len} does not split evenly into {outputs} outputs"
        )));
    }
    Ok(vec![len / outputs; outputs])
}

/// The `split` sizes as written: input 1 at opset 1 and from opset 13, else the attribute.
fn split_of(ctx: &OpCtx, split_input: Option<&Tensor>) -> Result<Option<Vec<i64>>, OpError> {
    if ctx.opset >= 13 || (ctx.opset < 2 && split_input.is_some()) {
        Ok(split_input.map(ints_of))
    } else {
        ctx.node.attr_ints("split")
    }
}

/// Evaluates `Split`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if x.rank() == 0 {
        return Err(OpError::shape("an input of rank ≥ 1", &x.shape));
    }
    let axis = norm_axis(ctx.node.attr_int("axis", 0)?, x.rank())?;
    let len = x.shape[axis];
    let sizes = sizes(ctx, split_of(ctx, opt_input(inputs, 1))?, len)?;
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for &s in &sizes {
        let mut idx = Vec::with_capacity(outer * s * inner);
        for o in 0..outer {
            let base = (o * len + start) * inner;
            idx.extend(base..base + s * inner);
        }
        let mut shape = x.shape.clone();
        shape[axis] = s;
        out.push(make(x.dtype, shape, x.data.gather(&idx))?);
        start += s;
    }
    Ok(out)
}

/// Static shape rule: known when the sizes are an attribute, a constant or implied.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dtype, shape) = inp.get(0)?;
    let axis = norm_axis(ctx.node.attr_int("axis", 0).ok()?, shape.len()).ok()?;
    let split_input = inp.konst(ctx, 1);
    if split_input.is_none() && ctx.node.inputs.get(1).is_some_and(|n| !n.is_empty()) {
        return None; // sizes computed at run time
    }
    let sizes = sizes(ctx, split_of(ctx, split_input).ok()?, *shape.get(axis)?).ok()?;
    Some(
        sizes
            .into_iter()
            .map(|s| {
                let mut sh = shape.clone();
                sh[axis] = s;
                (*dtype, sh)
            })
            .collect(),
    )
}

/// `Split` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Split", 1, eval)
    .infer(infer)
    .facts(super::Facts {
        moves_values: true,
        ..super::Facts::NONE
    })
    .bf16_codes();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn x() -> Tensor {
        Tensor::from_f32(&[2, 5], (0..10).map(|v| v as f32).collect())
    }

    #[test]
    fn split_attribute_before_13_and_input_from_13() {
        let n = Node::new("s", "Split", &["x"], &["a", "b"])
            .with_attr("axis", AttrValue::Int(-1))
            .with_attr("split", AttrValue::Ints(vec![2, 3]));
        let out = eval(&OpCtx { node: &n, opset: 11 }, &[Some(&x())]).unwrap();
        assert_eq!(out[0], Tensor::from_f32(&[2, 2], vec![0.0, 1.0, 5.0, 6.0]));
        assert_eq!(out[1].shape, [2, 3]);
        let n = Node::new("s", "Split", &["x", "sp"], &["a", "b"]).with_attr("axis", AttrValue::Int(1));
        let sp = Tensor::from_i64(&[2], vec![4, 1]);
        let out = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x()), Some(&sp)]).unwrap();
        assert_eq!(out[1], Tensor::from_f32(&[2, 1], vec![4.0, 9.0]));
    }

    #[test]
    fn num_outputs_from_18_allows_a_short_last_piece() {
        let n = Node::new("s", "Split", &["x"], &["a", "b", "c"])
            .with_attr("axis", AttrValue::Int(1))
            .with_attr("num_outputs", AttrValue::Int(3));
        let out = eval(&OpCtx { node: &n, opset: 18 }, &[Some(&x())]).unwrap();
        let shapes: Vec<_> = out.iter().map(|t| t.shape.clone()).collect();
        assert_eq!(shapes, [vec![2, 2], vec![2, 2], vec![2, 1]]);
        // Without num_outputs the pieces must be equal.
        let n = Node::new("s", "Split", &["x"], &["a", "b", "c"]).with_attr("axis", AttrValue::Int(1));
        let e = eval(&OpCtx { node: &n, opset: 18 }, &[Some(&x())]).unwrap_err();
        assert!(e.to_string().contains("evenly"), "{e}");
    }

    #[test]
    fn bad_sizes_are_errors() {
        let n = Node::new("s", "Split", &["x", "sp"], &["a", "b"]).with_attr("axis", AttrValue::Int(1));
        let ctx = OpCtx { node: &n, opset: 13 };
        for (sp, what) in [(vec![2, 2], "sum"), (vec![6, -1], "negative"), (vec![5], "outputs")] {
            let sp = Tensor::from_i64(&[sp.len()], sp);
            let e = eval(&ctx, &[Some(&x()), Some(&sp)]).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        }
        let n = Node::new("s", "Split", &["x"], &["a", "b"]).with_attr("axis", AttrValue::Int(2));
        assert!(eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x())]).is_err());
    }
}
