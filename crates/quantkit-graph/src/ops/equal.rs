//! `Equal`: element-wise `a == b` with numpy broadcasting, bool output (opset 7; 11 added
//! the integer types and bool, 19 strings, which the IR lacks). Also the shared evaluation
//! and shape rule of `Less`, `LessOrEqual`, `Greater` and `GreaterOrEqual`. A NaN operand
//! compares false (and unequal), as IEEE and numpy.

use super::binary::broadcast;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{broadcast_shapes, DType, Data, Tensor};

/// The five comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// a == b (any type, bool included)
    Eq,
    /// a < b
    Lt,
    /// a <= b
    Le,
    /// a > b
    Gt,
    /// a >= b
    Ge,
}

impl Cmp {
    fn test<T: PartialOrd>(self, p: T, q: T) -> bool {
        match self {
            Cmp::Eq => p == q,
            Cmp::Lt => p < q,
            Cmp::Le => p <= q,
            Cmp::Gt => p > q,
            Cmp::Ge => p >= q,
        }
    }
}

/// Evaluates a comparison of two tensors of one numeric type (bool too for `Eq`).
pub fn compare(op: Cmp, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    if a.dtype != b.dtype {
        return Err(OpError::DType {
            index: 1,
            expected: a.dtype.to_string(),
            got: b.dtype.to_string(),
        });
    }
    let (sa, sb) = (&a.shape, &b.shape);
    macro_rules! go {
        ($($v:ident),*) => {
            match (&a.data, &b.data) {
                $((Data::$v(x), Data::$v(y)) => broadcast(x, sa, y, sb, |p, q| op.test(p, q))?,)*
                (Data::Bool(x), Data::Bool(y)) if op == Cmp::Eq => {
                    broadcast(x, sa, y, sb, |p, q| p == q)?
                }
                _ => {
                    return Err(OpError::DType {
                        index: 0,
                        expected: if op == Cmp::Eq { "numeric or bool" } else { "numeric" }.into(),
                        got: a.dtype.to_string(),
                    })
                }
            }
        };
    }
    let (shape, v) = go!(F32, F64, F16, I8, U8, I16, U16, I32, U32, I64, U64);
    Ok(vec![make(DType::Bool, shape, Data::Bool(v))?])
}

/// Static shape rule of the comparisons: a bool tensor of the broadcast shape.
pub fn infer(_ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (a, b) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(DType::Bool, broadcast_shapes(&a.1, &b.1)?)])
}

/// Evaluates `Equal`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    compare(Cmp::Eq, inputs)
}

/// `Equal` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Equal", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE)
    .bf16_widen();

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: Cmp, a: &Tensor, b: &Tensor) -> Result<Vec<Tensor>, OpError> {
        compare(op, &[Some(a), Some(b)])
    }

    #[test]
    fn broadcasts_and_rejects_bad_operands() {
        let a = Tensor::from_f32(&[2, 2], vec![1.0, 2.0, f32::NAN, 4.0]);
        let b = Tensor::from_f32(&[2], vec![1.0, 3.0]);
        let y = run(Cmp::Le, &a, &b).unwrap().remove(0);
        assert_eq!(y.dtype, DType::Bool);
        assert_eq!(y.data, Data::Bool(vec![true, true, false, false]));
        let c = Tensor::from_f32(&[3], vec![0.0; 3]);
        assert!(matches!(run(Cmp::Eq, &a, &c), Err(OpError::ShapeMismatch { .. })));
        let i = Tensor::from_i64(&[2], vec![1, 2]);
        assert!(matches!(run(Cmp::Eq, &a, &i), Err(OpError::DType { .. })));
        let t = Tensor::new(vec![2], Data::Bool(vec![true, false])).unwrap();
        assert!(run(Cmp::Eq, &t, &t).is_ok());
        assert!(matches!(run(Cmp::Lt, &t, &t), Err(OpError::DType { .. })));
    }
}
