//! `NonZero` (opset 9; 13 only adds bfloat16): the coordinates of the non-zero elements in
//! row-major order, as int64 `[rank, count]` (numpy `nonzero` stacked). A NaN is non-zero.
//! A scalar gives `[0, count]`, as the spec's shape rule and the ONNX reference say (ONNX
//! Runtime returns `[1, count]` there).

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, DType, Tensor};
use crate::with_data;

/// Evaluates `NonZero`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let nz: Vec<usize> = with_data!(&x.data, v => v
        .iter()
        .enumerate()
        .filter(|(_, e)| crate::tensor::Element::to_f64(**e) != 0.0)
        .map(|(i, _)| i)
        .collect());
    let r = x.rank();
    let count = nz.len();
    let mut out = vec![0i64; r * count];
    for (c, &flat) in nz.iter().enumerate() {
        let mut rem = flat;
        for d in (0..r).rev() {
            out[d * count + c] = (rem % x.shape[d]) as i64;
            rem /= x.shape[d];
        }
    }
    make(DType::I64, vec![r, count], Data::I64(out)).map(|t| vec![t])
}

/// `NonZero` in the operator registry (the count depends on the values: no shape rule).
pub const DEF: super::OpDef = super::OpDef::onnx("NonZero", 9, eval);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn coordinates_of_nonzeros() {
        let n = Node::new("n", "NonZero", &["x"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 13 };
        let x = Tensor::from_f32(&[2, 2], vec![1.0, 0.0, f32::NAN, 3.0]);
        let y = eval(&ctx, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_i64(&[2, 3], vec![0, 1, 1, 0, 0, 1]));
        let s = Tensor::from_f32(&[], vec![2.0]);
        assert_eq!(eval(&ctx, &[Some(&s)]).unwrap()[0].shape, [0, 1]);
        let e = Tensor::zeros(DType::Bool, &[3, 0]);
        assert_eq!(eval(&ctx, &[Some(&e)]).unwrap()[0].shape, [2, 0]);
    }
}
