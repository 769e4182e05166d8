//! `And`: element-wise logical and of two bool tensors with numpy broadcasting (opset 7).
//! Also the shared evaluation of `Or` and `Xor`.

use super::binary::broadcast;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Applies `f` to two bool tensors with numpy broadcasting.
pub fn logic(inputs: &[Option<&Tensor>], f: fn(bool, bool) -> bool) -> Result<Vec<Tensor>, OpError> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    let (x, y) = match (&a.data, &b.data) {
        (Data::Bool(x), Data::Bool(y)) => (x, y),
        _ => {
            let index = usize::from(matches!(a.data, Data::Bool(_)));
            let got = if index == 0 { a.dtype } else { b.dtype };
            return Err(OpError::DType {
                index,
                expected: "bool".into(),
                got: got.to_string(),
            });
        }
    };
    let (shape, v) = broadcast(x, &a.shape, y, &b.shape, f)?;
    Ok(vec![make(DType::Bool, shape, Data::Bool(v))?])
}

/// Evaluates `And`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    logic(inputs, |p, q| p && q)
}

/// `And` in the operator registry (shape rule: bool of the broadcast shape, as the
/// comparisons).
pub const DEF: super::OpDef = super::OpDef::onnx("And", 1, eval)
    .infer(super::equal::infer)
    .facts(super::Facts::ELEMENTWISE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasts_bools_and_rejects_numbers() {
        let a = Tensor::new(vec![2, 2], Data::Bool(vec![true, false, true, true])).unwrap();
        let b = Tensor::new(vec![2], Data::Bool(vec![true, false])).unwrap();
        let y = logic(&[Some(&a), Some(&b)], |p, q| p && q).unwrap().remove(0);
        assert_eq!(y.shape, vec![2, 2]);
        assert_eq!(y.data, Data::Bool(vec![true, false, true, false]));
        let f = Tensor::from_f32(&[2], vec![1.0, 0.0]);
        let e = logic(&[Some(&a), Some(&f)], |p, q| p || q).unwrap_err();
        assert!(matches!(e, OpError::DType { index: 1, .. }));
        let c = Tensor::new(vec![3], Data::Bool(vec![true; 3])).unwrap();
        assert!(matches!(
            logic(&[Some(&a), Some(&c)], |p, q| p ^ q),
            Err(OpError::ShapeMismatch { .. })
        ));
    }
}
