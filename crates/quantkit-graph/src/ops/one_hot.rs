//! `OneHot` (opset 9; 11 allows negative indices and axis; 28 only adds types): the output
//! has the indices' shape with a new axis of size `depth` inserted at `axis` (default -1,
//! range `[-r-1, r]`), holding `values[1]` (on) where the coordinate along it equals the
//! index and `values[0]` (off) elsewhere. Indices and depth may be any numeric type (floats
//! truncate toward zero); an index in `[-depth, -1]` counts from the end, and one outside
//! `[-depth, depth-1]` gives an all-off row, as the spec says. The output type is
//! `values`'.

use super::index::numel;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// `depth` (a scalar or one-element tensor, non-negative).
fn depth_of(t: &Tensor) -> Result<usize, OpError> {
    let &[d] = t.to_f64_vec().as_slice() else {
        return Err(OpError::shape("a one-element depth", &t.shape));
    };
    let d = d.trunc();
    if !(0.0..=(usize::MAX as f64)).contains(&d) {
        return Err(OpError::Invalid(format!("OneHot: depth {d} is not a valid size")));
    }
    Ok(d as usize)
}

/// The output shape: `indices` with `depth` inserted at `axis`, and the normalized axis.
fn out_shape(ctx: &OpCtx, ind: &[usize], depth: usize) -> Result<(Vec<usize>, usize), OpError> {
    let r = ind.len() as i64;
    let axis = ctx.node.attr_int("axis", -1)?;
    let a = if axis < 0 { axis + r + 1 } else { axis };
    if !(0..=r).contains(&a) {
        return Err(OpError::attr(
            "axis",
            format!("{axis} out of range [-{}, {r}]", r + 1),
        ));
    }
    let mut out = ind.to_vec();
    out.insert(a as usize, depth);
    numel(&out, "OneHot")?;
    Ok((out, a as usize))
}

/// Evaluates `OneHot`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let ind = input(inputs, 0)?;
    let depth = depth_of(input(inputs, 1)?)?;
    let values = input(inputs, 2)?;
    if values.len() != 2 {
        return Err(OpError::shape("two values [off, on]", &values.shape));
    }
    let (out, axis) = out_shape(ctx, &ind.shape, depth)?;
    let outer: usize = ind.shape[..axis].iter().product();
    let inner: usize = ind.shape[axis..].iter().product();
    let d = depth as i64;
    // Position in the depth axis of each index, or None for an out-of-range one.
    let hot: Vec<Option<usize>> = ind
        .to_f64_vec()
        .into_iter()
        .map(|v| {
            let i = v.trunc();
            let i = if i < 0.0 { i + d as f64 } else { i };
            (i >= 0.0 && i < d as f64).then_some(i as usize)
        })
        .collect();
    let mut pick = Vec::with_capacity(outer * depth * inner);
    for o in 0..outer {
        for k in 0..depth {
            let row = &hot[o * inner..(o + 1) * inner];
            pick.extend(row.iter().map(|&h| usize::from(h == Some(k))));
        }
    }
    make(values.dtype, out, values.data.gather(&pick)).map(|t| vec![t])
}

/// Static shape rule: known when `depth` is a constant.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (_, shape) = inp.get(0)?;
    let (dtype, _) = inp.get(2)?;
    let depth = depth_of(inp.konst(ctx, 1)?).ok()?;
    Some(vec![(*dtype, out_shape(ctx, shape, depth).ok()?.0)])
}

/// `OneHot` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("OneHot", 9, eval).infer(infer)
    .bf16_codes();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn axes_negative_and_out_of_range_indices() {
        let n = Node::new("o", "OneHot", &["i", "d", "v"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 11 };
        let i = Tensor::from_i64(&[3], vec![0, -1, 7]);
        let d = Tensor::from_f32(&[], vec![3.0]);
        let v = Tensor::from_f32(&[2], vec![-1.0, 5.0]);
        let y = eval(&ctx, &[Some(&i), Some(&d), Some(&v)]).unwrap();
        assert_eq!(y[0].shape, [3, 3]);
        let on_off = [5.0, -1.0, -1.0, -1.0, -1.0, 5.0, -1.0, -1.0, -1.0];
        assert_eq!(y[0].as_f32().unwrap(), on_off);
        let n0 = Node::new("o", "OneHot", &["i", "d", "v"], &["y"]).with_attr("axis", AttrValue::Int(0));
        let y = eval(&OpCtx { node: &n0, opset: 11 }, &[Some(&i), Some(&d), Some(&v)]).unwrap();
        assert_eq!(y[0].as_f32().unwrap(), [5.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 5.0, -1.0]);
        let bad = Node::new("o", "OneHot", &["i", "d", "v"], &["y"]).with_attr("axis", AttrValue::Int(2));
        assert!(eval(&OpCtx { node: &bad, opset: 11 }, &[Some(&i), Some(&d), Some(&v)]).is_err());
        let huge = Tensor::from_i64(&[], vec![1 << 40]);
        assert!(eval(&ctx, &[Some(&i), Some(&huge), Some(&v)]).is_err());
        let neg = Tensor::from_i64(&[], vec![-2]);
        assert!(eval(&ctx, &[Some(&i), Some(&neg), Some(&v)]).is_err());
        let v3 = Tensor::from_f32(&[3], vec![0.0; 3]);
        assert!(eval(&ctx, &[Some(&i), Some(&d), Some(&v3)]).is_err());
    }
}
