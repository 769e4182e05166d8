//! `Expand` (opset 8; 13 only adds bfloat16): broadcasts the input to the 1-D int64
//! `shape` with numpy rules in both directions (a 1 in `shape` keeps the input's size, so
//! the output shape is the broadcast of both). Outputs above
//! [`super::max_elements()`] elements are errors.

use super::max_elements;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{broadcast_index, broadcast_shapes, Tensor};

/// The output shape of expanding `x` to the values of the shape input.
fn out_shape(x: &[usize], dims: &[i64]) -> Result<Vec<usize>, OpError> {
    let to = dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| OpError::Invalid(format!("Expand: negative dimension in {dims:?}")))?;
    let out = broadcast_shapes(x, &to).ok_or_else(|| {
        OpError::shape(format!("a shape broadcastable with {x:?}"), dims)
    })?;
    out.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d).filter(|&n| n <= max_elements()))
        .ok_or_else(|| {
            OpError::Invalid(format!("Expand: {out:?} has more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()))
        })?;
    Ok(out)
}

/// Evaluates `Expand`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let s = input(inputs, 1)?;
    if s.rank() != 1 {
        return Err(OpError::shape("a 1-D shape", &s.shape));
    }
    let out = out_shape(&x.shape, &s.to_i64_vec())?;
    let data = if out == x.shape {
        x.data.clone()
    } else {
        x.data.gather(&broadcast_index(&x.shape, &out))
    };
    make(x.dtype, out, data).map(|t| vec![t])
}

/// Static shape rule: known when the shape input is a constant.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dtype, shape) = inp.get(0)?;
    let out = out_shape(shape, &inp.konst(ctx, 1)?.to_i64_vec()).ok()?;
    Some(vec![(*dtype, out)])
}

/// `Expand` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Expand", 8, eval)
    .infer(infer)
    .facts(super::Facts {
        moves_values: true,
        ..super::Facts::NONE
    })
    .bf16_codes();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn broadcasts_both_ways_and_rejects_bad_shapes() {
        let n = Node::new("e", "Expand", &["x", "s"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 13 };
        let x = Tensor::from_f32(&[3, 1], vec![1.0, 2.0, 3.0]);
        let s = |v: Vec<i64>| Tensor::from_i64(&[v.len()], v);
        let y = eval(&ctx, &[Some(&x), Some(&s(vec![2, 1, 2]))]).unwrap();
        assert_eq!(y[0].shape, [2, 3, 2]);
        assert_eq!(&y[0].as_f32().unwrap()[..6], [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
        assert!(eval(&ctx, &[Some(&x), Some(&s(vec![2, 2]))]).is_err());
        assert!(eval(&ctx, &[Some(&x), Some(&s(vec![-1, 1]))]).is_err());
        assert!(eval(&ctx, &[Some(&x), Some(&s(vec![1 << 40, 1]))]).is_err());
    }
}
