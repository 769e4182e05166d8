//! `Trilu` (opset 14): keeps the upper (`upper = 1`, default) or lower triangle of the last
//! two axes `[*, N, M]` and zeroes the rest. The optional input `k` (an int64 scalar,
//! default 0) shifts the diagonal: upper keeps `j − i ≥ k`, lower keeps `j − i ≤ k`.

use super::index::scalar_of;
use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Trilu`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    if r < 2 {
        return Err(OpError::shape("rank ≥ 2", &x.shape));
    }
    let k = opt_input(inputs, 1).map_or(Ok(0), |t| scalar_of(t, 1))?;
    let upper = ctx.node.attr_int("upper", 1)? != 0;
    let (n, m) = (x.shape[r - 2], x.shape[r - 1]);
    let keep = |i: usize, j: usize| {
        let d = j as i128 - i as i128;
        if upper {
            d >= k as i128
        } else {
            d <= k as i128
        }
    };
    let idx: Vec<Option<usize>> = (0..x.len())
        .map(|p| {
            let (i, j) = ((p / m.max(1)) % n.max(1), p % m.max(1));
            keep(i, j).then_some(p)
        })
        .collect();
    make(x.dtype, x.shape.clone(), x.data.gather_or(&idx, 0.0)).map(|t| vec![t])
}

/// `Trilu` in the operator registry: same type and shape as the input.
pub const DEF: super::OpDef = super::OpDef::onnx("Trilu", 14, eval).infer(super::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn upper_lower_shifted_and_rank_check() {
        let x = Tensor::from_f32(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let n = Node::new("t", "Trilu", &["x", "k"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 14 };
        let y = eval(&ctx, &[Some(&x)]).unwrap();
        assert_eq!(y[0].as_f32().unwrap(), [1.0, 2.0, 3.0, 0.0, 5.0, 6.0]);
        let k = Tensor::from_i64(&[], vec![1]);
        let y = eval(&ctx, &[Some(&x), Some(&k)]).unwrap();
        assert_eq!(y[0].as_f32().unwrap(), [0.0, 2.0, 3.0, 0.0, 0.0, 6.0]);
        let lo = Node::new("t", "Trilu", &["x", "k"], &["y"]).with_attr("upper", AttrValue::Int(0));
        let k = Tensor::from_i64(&[], vec![-1]);
        let y = eval(&OpCtx { node: &lo, opset: 14 }, &[Some(&x), Some(&k)]).unwrap();
        assert_eq!(y[0].as_f32().unwrap(), [0.0, 0.0, 0.0, 4.0, 0.0, 0.0]);
        let big = Tensor::from_i64(&[], vec![i64::MIN]);
        assert!(eval(&ctx, &[Some(&x), Some(&big)]).is_ok());
        let v = Tensor::from_f32(&[3], vec![1.0; 3]);
        assert!(eval(&ctx, &[Some(&v)]).is_err());
        let k2 = Tensor::from_i64(&[2], vec![0, 1]);
        assert!(eval(&ctx, &[Some(&x), Some(&k2)]).is_err());
    }
}
