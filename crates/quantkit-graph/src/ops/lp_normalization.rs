//! `LpNormalization` (opset 1; 22 only adds bfloat16): y = x / ‖x‖ₚ along `axis`
//! (default −1), `p` 1 or 2 (default 2). A zero norm gives 0 (not NaN), as the ONNX
//! reference and ONNX Runtime do. The 1-norm sums |x| (the ONNX reference's
//! `power(x, 1).sum()` omits the absolute value; ONNX Runtime and the definition of a norm
//! take it).

use super::norm::require_float;
use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `LpNormalization`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    require_float(x, 0)?;
    let p = ctx.node.attr_int("p", 2)?;
    if p != 1 && p != 2 {
        return Err(OpError::attr("p", format!("expected 1 or 2, got {p}")));
    }
    let axis = norm_axis(ctx.node.attr_int("axis", -1)?, x.rank())?;
    if x.rank() == 0 {
        return Err(OpError::shape("an input of rank ≥ 1", &x.shape));
    }
    let n = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let xv = x.to_f64_vec();
    let mut y = vec![0f64; xv.len()];
    let outer = xv.len().checked_div(n * inner).unwrap_or(0);
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| o * n * inner + k * inner + i;
            let norm = if p == 1 {
                (0..n).map(|k| xv[at(k)].abs()).sum::<f64>()
            } else {
                (0..n).map(|k| xv[at(k)] * xv[at(k)]).sum::<f64>().sqrt()
            };
            for k in 0..n {
                y[at(k)] = if norm == 0.0 { 0.0 } else { xv[at(k)] / norm };
            }
        }
    }
    Ok(vec![
        make(DType::F64, x.shape.clone(), Data::F64(y))?.cast(x.dtype)
    ])
}

/// `LpNormalization` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("LpNormalization", 1, eval).infer(super::registry::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn one_and_two_norms_zero_rows_and_bad_p() {
        let x = Tensor::from_f32(&[2, 2], vec![3.0, -4.0, 0.0, 0.0]);
        let n = Node::new("l", "LpNormalization", &["x"], &["y"]);
        let y = eval(&OpCtx { node: &n, opset: 1 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].as_f32().unwrap(), &[0.6, -0.8, 0.0, 0.0]);
        let n1 = n.clone().with_attr("p", AttrValue::Int(1));
        let y = eval(&OpCtx { node: &n1, opset: 1 }, &[Some(&x)]).unwrap();
        let v = y[0].as_f32().unwrap();
        assert!((v[0] - 3.0 / 7.0).abs() < 1e-6 && (v[1] + 4.0 / 7.0).abs() < 1e-6);
        let n0 = n.clone().with_attr("axis", AttrValue::Int(0));
        let y = eval(&OpCtx { node: &n0, opset: 1 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].as_f32().unwrap(), &[1.0, -1.0, 0.0, 0.0]);
        let n3 = n.with_attr("p", AttrValue::Int(3));
        assert!(matches!(
            eval(&OpCtx { node: &n3, opset: 1 }, &[Some(&x)]),
            Err(OpError::Attribute { .. })
        ));
    }
}
