//! `Where`: element-wise `condition ? X : Y` with numpy broadcasting of all three inputs
//! (opset 9; 16 added bfloat16, which the IR lacks). `condition` is bool; `X` and `Y` share
//! any type.

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{broadcast_index, broadcast_shapes, Data, Tensor};

/// Evaluates `Where`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let c = input(inputs, 0)?;
    let x = input(inputs, 1)?;
    let y = input(inputs, 2)?;
    let Data::Bool(cv) = &c.data else {
        return Err(OpError::DType {
            index: 0,
            expected: "bool".into(),
            got: c.dtype.to_string(),
        });
    };
    if x.dtype != y.dtype {
        return Err(OpError::DType {
            index: 2,
            expected: x.dtype.to_string(),
            got: y.dtype.to_string(),
        });
    }
    let out = broadcast_shapes(&c.shape, &x.shape)
        .and_then(|s| broadcast_shapes(&s, &y.shape))
        .ok_or_else(|| OpError::ShapeMismatch {
            expected: "broadcastable shapes".into(),
            got: format!("{:?}, {:?} and {:?}", c.shape, x.shape, y.shape),
        })?;
    let ic = broadcast_index(&c.shape, &out);
    let ix = broadcast_index(&x.shape, &out);
    let iy = broadcast_index(&y.shape, &out);
    macro_rules! go {
        ($($v:ident),*) => {
            match (&x.data, &y.data) {
                $((Data::$v(a), Data::$v(b)) => Data::$v(
                    ic.iter()
                        .zip(ix.iter().zip(&iy))
                        .map(|(&k, (&i, &j))| if cv[k] { a[i] } else { b[j] })
                        .collect(),
                ),)*
                _ => {
                    return Err(OpError::DType {
                        index: 2,
                        expected: x.dtype.to_string(),
                        got: y.dtype.to_string(),
                    })
                }
            }
        };
    }
    let data = go!(F32, F64, F16, I8, U8, I16, U16, I32, U32, I64, U64, Bool);
    Ok(vec![make(x.dtype, out, data)?])
}

/// Static shape rule: the type of `X`, the broadcast of the three shapes.
pub fn infer(_ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (c, x, y) = (inp.get(0)?, inp.get(1)?, inp.get(2)?);
    let s = broadcast_shapes(&broadcast_shapes(&c.1, &x.1)?, &y.1)?;
    Some(vec![(x.0, s)])
}

/// `Where` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Where", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE)
    .bf16_codes();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    #[test]
    fn selects_with_three_way_broadcasting_and_rejects_bad_operands() {
        let c = Tensor::new(vec![2, 1], Data::Bool(vec![true, false])).unwrap();
        let x = Tensor::from_f32(&[2], vec![1.0, 2.0]);
        let y = Tensor::from_f32(&[1], vec![9.0]);
        let ins = [Some(&c), Some(&x), Some(&y)];
        let node = crate::ir::Node::new("w", "Where", &["c", "x", "y"], &["z"]);
        let ctx = OpCtx { node: &node, opset: 21 };
        let out = eval(&ctx, &ins).unwrap().remove(0);
        assert_eq!(out.shape, vec![2, 2]);
        assert_eq!(out.data, Data::F32(vec![1.0, 2.0, 9.0, 9.0]));
        let i = Tensor::from_i64(&[1], vec![9]);
        assert!(matches!(
            eval(&ctx, &[Some(&c), Some(&x), Some(&i)]),
            Err(OpError::DType { index: 2, .. })
        ));
        assert!(matches!(
            eval(&ctx, &[Some(&x), Some(&x), Some(&x)]),
            Err(OpError::DType { index: 0, .. })
        ));
        let z = Tensor::zeros(DType::F32, &[3]);
        assert!(matches!(
            eval(&ctx, &[Some(&c), Some(&x), Some(&z)]),
            Err(OpError::ShapeMismatch { .. })
        ));
    }
}
