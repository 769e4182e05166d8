//! `CenterCropPad` (opset 18): crops or zero-pads each axis named by `axes` (default all;
//! negative counts from the end) to the size given in the 1-D int32/int64 `shape` input,
//! keeping the input centred. A crop starts at `⌊(in − out) / 2⌋` (the window leans left
//! when the difference is odd); a pad puts `⌊(out − in) / 2⌋` zeros first and the odd one
//! at the end. Other axes are unchanged. Repeated axes are errors (the spec leaves them
//! undefined).

use super::index::{indices_of, numel, separable};
use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, Tensor};

/// The output shape for an input of shape `x` and the `shape` input's values.
fn out_shape(ctx: &OpCtx, x: &[usize], sizes: &[i64]) -> Result<Vec<usize>, OpError> {
    let r = x.len();
    let axes: Vec<usize> = match ctx.node.attr_ints("axes")? {
        None => (0..r).collect(),
        Some(a) => a
            .iter()
            .map(|&a| norm_axis(a, r))
            .collect::<Result<_, _>>()?,
    };
    if axes.iter().enumerate().any(|(i, a)| axes[..i].contains(a)) || (r == 0 && !axes.is_empty()) {
        return Err(OpError::attr("axes", format!("{axes:?} repeats an axis or exceeds rank {r}")));
    }
    if sizes.len() != axes.len() {
        return Err(OpError::shape(
            format!("a shape input with one value per axis ({})", axes.len()),
            sizes,
        ));
    }
    let mut out = x.to_vec();
    for (&a, &s) in axes.iter().zip(sizes) {
        out[a] = usize::try_from(s)
            .map_err(|_| OpError::Invalid(format!("CenterCropPad: negative size {s}")))?;
    }
    numel(&out, "CenterCropPad")?;
    Ok(out)
}

/// Evaluates `CenterCropPad`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let s = input(inputs, 1)?;
    if s.rank() != 1 {
        return Err(OpError::shape("a 1-D shape", &s.shape));
    }
    let out = out_shape(ctx, &x.shape, &indices_of(s, 1)?)?;
    let st = strides(&x.shape);
    // Output coordinate o of an axis reads input o + crop − pad, or is padding.
    let tables: Vec<Vec<Option<usize>>> = x
        .shape
        .iter()
        .zip(&out)
        .zip(&st)
        .map(|((&i, &o), &s)| {
            let (crop, pad) = if i >= o { ((i - o) / 2, 0) } else { (0, (o - i) / 2) };
            (0..o)
                .map(|c| {
                    let src = (c + crop).checked_sub(pad)?;
                    (src < i).then_some(src * s)
                })
                .collect()
        })
        .collect();
    let data = x.data.gather_or(&separable(&tables), 0.0);
    make(x.dtype, out, data).map(|t| vec![t])
}

/// Static shape rule: known when `shape` is a constant.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dtype, shape) = inp.get(0)?;
    let sizes = indices_of(inp.konst(ctx, 1)?, 1).ok()?;
    Some(vec![(*dtype, out_shape(ctx, shape, &sizes).ok()?)])
}

/// `CenterCropPad` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("CenterCropPad", 18, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn crops_left_leaning_pads_right_heavy() {
        let n = Node::new("c", "CenterCropPad", &["x", "s"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 18 };
        let x = Tensor::from_f32(&[1, 4], vec![1.0, 2.0, 3.0, 4.0]);
        let s = Tensor::from_i64(&[2], vec![1, 1]);
        assert_eq!(eval(&ctx, &[Some(&x), Some(&s)]).unwrap()[0].as_f32().unwrap(), [2.0]);
        let s = Tensor::from_i64(&[2], vec![2, 7]);
        let y = eval(&ctx, &[Some(&x), Some(&s)]).unwrap();
        let row = [0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 0.0];
        assert_eq!(y[0].as_f32().unwrap(), [row, [0.0; 7]].concat());
        let na = Node::new("c", "CenterCropPad", &["x", "s"], &["y"]).with_attr("axes", AttrValue::Ints(vec![-1]));
        let s1 = Tensor::from_i64(&[1], vec![3]);
        let y = eval(&OpCtx { node: &na, opset: 18 }, &[Some(&x), Some(&s1)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 3], vec![1.0, 2.0, 3.0]));
    }

    #[test]
    fn bad_sizes_and_axes() {
        let x = Tensor::from_f32(&[1, 4], vec![1.0, 2.0, 3.0, 4.0]);
        let n = Node::new("c", "CenterCropPad", &["x", "s"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 18 };
        for v in [vec![1], vec![-1, 2], vec![1 << 40, 1 << 40]] {
            let s = Tensor::from_i64(&[v.len()], v.clone());
            assert!(eval(&ctx, &[Some(&x), Some(&s)]).is_err(), "{v:?}");
        }
        let rep = Node::new("c", "CenterCropPad", &["x", "s"], &["y"]).with_attr("axes", AttrValue::Ints(vec![1, -1]));
        let s = Tensor::from_i64(&[2], vec![1, 1]);
        assert!(eval(&OpCtx { node: &rep, opset: 18 }, &[Some(&x), Some(&s)]).is_err());
        let far = Node::new("c", "CenterCropPad", &["x", "s"], &["y"]).with_attr("axes", AttrValue::Ints(vec![2]));
        let s = Tensor::from_i64(&[1], vec![1]);
        assert!(eval(&OpCtx { node: &far, opset: 18 }, &[Some(&x), Some(&s)]).is_err());
    }
}
