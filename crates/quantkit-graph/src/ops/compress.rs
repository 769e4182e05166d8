//! `Compress` (opset 9; 11 allows a negative axis; 28 only adds types): keeps the slices
//! along `axis` whose entry of the 1-D bool `condition` is true (numpy `compress`); without
//! `axis` the input is flattened first. A condition shorter than the axis drops the slices
//! past its end; a longer one may only be false there (numpy raises on a true beyond the
//! axis, and so does this: an error, not a read out of bounds).

use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `Compress`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let c = input(inputs, 1)?;
    let Data::Bool(cond) = &c.data else {
        return Err(OpError::DType {
            index: 1,
            expected: "bool".into(),
            got: c.dtype.to_string(),
        });
    };
    if c.rank() != 1 {
        return Err(OpError::shape("a 1-D condition", &c.shape));
    }
    let (shape, axis) = match ctx.node.attr("axis") {
        None => (vec![x.len()], 0),
        Some(_) if x.rank() == 0 => return Err(OpError::shape("rank ≥ 1 with an axis", &x.shape)),
        Some(_) => (x.shape.clone(), norm_axis(ctx.node.attr_int("axis", 0)?, x.rank())?),
    };
    let n = shape[axis];
    if let Some(i) = cond.iter().skip(n).position(|&b| b) {
        return Err(OpError::Invalid(format!(
            "Compress: condition is true at {} beyond the axis size {n}",
            n + i
        )));
    }
    let keep: Vec<usize> = (0..n.min(cond.len())).filter(|&i| cond[i]).collect();
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut idx = Vec::with_capacity(outer * keep.len() * inner);
    for o in 0..outer {
        for &k in &keep {
            let base = (o * n + k) * inner;
            idx.extend(base..base + inner);
        }
    }
    let mut out = shape;
    out[axis] = keep.len();
    make(x.dtype, out, x.data.gather(&idx)).map(|t| vec![t])
}

/// `Compress` in the operator registry: it only selects input values (the output size
/// depends on the condition's values: no shape rule).
pub const DEF: super::OpDef = super::OpDef::onnx("Compress", 9, eval).facts(super::Facts {
    moves_values: true,
    ..super::Facts::NONE
})
    .bf16_codes();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn axis_flattened_short_and_long_conditions() {
        let x = Tensor::from_f32(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let cond = |v: Vec<bool>| Tensor::new(vec![v.len()], Data::Bool(v)).unwrap();
        let n = Node::new("c", "Compress", &["x", "c"], &["y"]).with_attr("axis", AttrValue::Int(-1));
        let ctx = OpCtx { node: &n, opset: 11 };
        let y = eval(&ctx, &[Some(&x), Some(&cond(vec![true, false]))]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2, 1], vec![1.0, 4.0]));
        assert!(eval(&ctx, &[Some(&x), Some(&cond(vec![false, true, false, false]))]).is_ok());
        assert!(eval(&ctx, &[Some(&x), Some(&cond(vec![false, true, false, true]))]).is_err());
        let flat = Node::new("c", "Compress", &["x", "c"], &["y"]);
        let c = cond(vec![false, true, false, false, true]);
        let y = eval(&OpCtx { node: &flat, opset: 11 }, &[Some(&x), Some(&c)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2], vec![2.0, 5.0]));
        let bad = Node::new("c", "Compress", &["x", "c"], &["y"]).with_attr("axis", AttrValue::Int(2));
        assert!(eval(&OpCtx { node: &bad, opset: 11 }, &[Some(&x), Some(&c)]).is_err());
        let ints = Tensor::from_i64(&[2], vec![1, 0]);
        assert!(eval(&ctx, &[Some(&x), Some(&ints)]).is_err());
    }
}
