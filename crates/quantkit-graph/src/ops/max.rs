//! `Max`: element-wise maximum of one or more inputs with numpy broadcasting (opset 8; 6
//! required equal shapes, which broadcasting covers; 12 added the integer types). A NaN
//! operand gives NaN, as numpy's `maximum`. Also the shared evaluation of `Min`.

use super::binary::broadcast;
use super::sum::infer;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// The element-wise maximum (`max = true`) or minimum of two tensors of one type.
fn pair(a: &Tensor, b: &Tensor, index: usize, max: bool) -> Result<Tensor, OpError> {
    // `p != p` is the generic NaN test (false for every integer).
    #[allow(clippy::eq_op)]
    fn pick<T: PartialOrd + Copy>(max: bool) -> impl Fn(T, T) -> T {
        move |p, q| {
            if p != p {
                p
            } else if q != q || (max && q > p) || (!max && q < p) {
                q
            } else {
                p
            }
        }
    }
    macro_rules! go {
        ($($v:ident),*) => {
            match (&a.data, &b.data) {
                $((Data::$v(x), Data::$v(y)) => {
                    let (s, v) = broadcast(x, &a.shape, y, &b.shape, pick(max))?;
                    (s, Data::$v(v))
                })*
                _ => {
                    return Err(OpError::DType {
                        index,
                        expected: a.dtype.to_string(),
                        got: b.dtype.to_string(),
                    })
                }
            }
        };
    }
    let (shape, data) = go!(F32, F64, F16, I8, U8, I16, U16, I32, U32, I64, U64);
    make(a.dtype, shape, data)
}

/// Folds every input with the pairwise maximum (`max = true`) or minimum.
pub fn extremum(inputs: &[Option<&Tensor>], max: bool) -> Result<Vec<Tensor>, OpError> {
    let mut acc = input(inputs, 0)?.clone();
    if matches!(acc.data, Data::Bool(_)) {
        return Err(OpError::DType {
            index: 0,
            expected: "numeric".into(),
            got: acc.dtype.to_string(),
        });
    }
    for i in 1..inputs.len() {
        acc = pair(&acc, input(inputs, i)?, i, max)?;
    }
    Ok(vec![acc])
}

/// Evaluates `Max`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    extremum(inputs, true)
}

/// `Max` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Max", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE)
    .bf16_widen();
