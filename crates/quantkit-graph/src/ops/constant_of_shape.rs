//! `ConstantOfShape`: a tensor of the shape given by the 1-D int64 input, every element the
//! one-element tensor attribute `value` (default float 0). Opset 9 introduced it; 20 and
//! 21 only widened the allowed `value` types (bfloat16, float8, 4-bit), which the IR stores
//! where it has the type. An empty shape gives a scalar.
//!
//! Shape values must be non-negative, and the output is capped at [`max_elements()`] elements
//! so a corrupt or hostile shape gives an error instead of exhausting memory.

use super::{input, make, OpCtx};
use super::max_elements;
use crate::error::OpError;
use crate::ir::AttrValue;
use crate::map_data;
use crate::tensor::{DType, Data, Tensor};


/// The fill value: the `value` attribute, or float 0.
fn fill(ctx: &OpCtx) -> Result<Tensor, OpError> {
    match ctx.node.attr("value") {
        None => Ok(Tensor::scalar_f32(0.0)),
        Some(AttrValue::Tensor(t)) if t.len() == 1 => Ok(t.clone()),
        Some(AttrValue::Tensor(t)) => Err(OpError::attr(
            "value",
            format!("expected a one-element tensor, got shape {:?}", t.shape),
        )),
        Some(AttrValue::Raw(_)) => Err(OpError::Unsupported(
            "ConstantOfShape value of an element type the IR lacks".into(),
        )),
        Some(other) => Err(OpError::attr(
            "value",
            format!("expected a tensor, got {other:?}"),
        )),
    }
}

/// The output shape from the shape input's values: each non-negative, at most
/// [`max_elements()`] elements in all.
fn out_shape(dims: &[i64]) -> Result<Vec<usize>, OpError> {
    let mut n: usize = 1;
    let mut shape = Vec::with_capacity(dims.len());
    for &d in dims {
        let d = usize::try_from(d).map_err(|_| {
            OpError::Invalid(format!("ConstantOfShape: negative dimension in shape {dims:?}"))
        })?;
        n = n.checked_mul(d).filter(|&n| n <= max_elements()).ok_or_else(|| {
            OpError::Invalid(format!(
                "ConstantOfShape: shape {dims:?} has more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
            ))
        })?;
        shape.push(d);
    }
    Ok(shape)
}

/// Evaluates `ConstantOfShape`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let s = input(inputs, 0)?;
    if s.rank() != 1 || !matches!(s.dtype, DType::I64) {
        return Err(OpError::shape(
            format!("a 1-D int64 shape (got {})", s.dtype),
            &s.shape,
        ));
    }
    let shape = out_shape(&s.to_i64_vec())?;
    let v = fill(ctx)?;
    let n: usize = shape.iter().product();
    let data: Data = map_data!(&v.data, x => vec![x[0]; n]);
    make(v.dtype, shape, data).map(|t| vec![t])
}

/// Static shape rule: known when the shape input is a constant.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let s = inp.konst(ctx, 0)?;
    let shape = out_shape(&s.to_i64_vec()).ok()?;
    Some(vec![(fill(ctx).ok()?.dtype, shape)])
}

/// `ConstantOfShape` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("ConstantOfShape", 9, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    fn run(node: &Node, dims: &[i64]) -> Result<Vec<Tensor>, OpError> {
        let s = Tensor::from_i64(&[dims.len()], dims.to_vec());
        eval(&OpCtx { node, opset: 21 }, &[Some(&s)])
    }

    #[test]
    fn fills_with_the_value_attribute_or_float_zero() {
        let n = Node::new("c", "ConstantOfShape", &["s"], &["y"]);
        let y = run(&n, &[2, 3]).unwrap().remove(0);
        assert_eq!(y, Tensor::from_f32(&[2, 3], vec![0.0; 6]));
        assert_eq!(run(&n, &[]).unwrap()[0], Tensor::scalar_f32(0.0));
        let n = n.with_attr("value", AttrValue::Tensor(Tensor::from_i64(&[1], vec![7])));
        assert_eq!(run(&n, &[0, 4]).unwrap()[0], Tensor::from_i64(&[0, 4], vec![]));
        assert_eq!(run(&n, &[2]).unwrap()[0], Tensor::from_i64(&[2], vec![7, 7]));
    }

    #[test]
    fn rejects_negative_and_absurd_shapes() {
        let n = Node::new("c", "ConstantOfShape", &["s"], &["y"]);
        let e = run(&n, &[2, -1]).unwrap_err().to_string();
        assert!(e.contains("negative dimension"), "{e}");
        let e = run(&n, &[1 << 20, 1 << 20]).unwrap_err().to_string();
        assert!(e.contains("more than"), "{e}");
        let e = run(&n, &[i64::MAX, i64::MAX, 0]).unwrap_err().to_string();
        assert!(e.contains("more than"), "{e}");
        let n = n.with_attr("value", AttrValue::Tensor(Tensor::from_f32(&[2], vec![1.0, 2.0])));
        assert!(matches!(run(&n, &[2]), Err(OpError::Attribute { .. })));
    }
}
