//! `ArgMin`: the int64 index of the smallest element along `axis` (default 0), keeping
//! that axis as size 1 when `keepdims` (default 1); ties give the first index, or the last
//! with `select_last_index` (opset 12). A NaN counts as an extremum (the first NaN wins,
//! as in NumPy). An empty reduced axis is an error. Shares
//! [`super::arg_max::arg_extremum`] with `ArgMax`.

use super::arg_max::{arg_extremum, infer};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `ArgMin`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    arg_extremum(ctx, inputs, false)
}

/// `ArgMin` in the operator registry (an index output: no facts).
pub const DEF: super::OpDef = super::OpDef::onnx("ArgMin", 1, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn first_smallest_along_axis_0() {
        let x = Tensor::from_f32(&[2, 2], vec![1.0, 5.0, 1.0, 4.0]);
        let n = Node::new("a", "ArgMin", &["x"], &["y"]);
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_i64(&[1, 2], vec![0, 1]));
    }
}
