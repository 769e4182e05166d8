//! `ReverseSequence` (opset 10; 28 only adds types): for each batch entry `b` (along
//! `batch_axis`, default 1) reverses the first `sequence_lens[b]` elements along
//! `time_axis` (default 0) and copies the rest. The two axes are 0 and 1 in some order;
//! `sequence_lens` is int64 `[batch]` with values in `[0, time]` (others are errors).

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, Tensor};

/// Evaluates `ReverseSequence`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let lens = input(inputs, 1)?;
    let ta = ctx.node.attr_int("time_axis", 0)?;
    let ba = ctx.node.attr_int("batch_axis", 1)?;
    if !matches!((ta, ba), (0, 1) | (1, 0)) {
        return Err(OpError::attr(
            "time_axis",
            format!("time_axis {ta} and batch_axis {ba} must be 0 and 1 in some order"),
        ));
    }
    if x.rank() < 2 {
        return Err(OpError::shape("rank ≥ 2", &x.shape));
    }
    let (ta, ba) = (ta as usize, ba as usize);
    let (time, batch) = (x.shape[ta], x.shape[ba]);
    let lens = super::index::indices_of(lens, 1)?;
    if lens.len() != batch || input(inputs, 1)?.rank() != 1 {
        return Err(OpError::shape(
            format!("1-D sequence_lens of the batch size {batch}"),
            &input(inputs, 1)?.shape,
        ));
    }
    if let Some(l) = lens.iter().find(|&&l| l < 0 || l as usize > time) {
        return Err(OpError::Invalid(format!(
            "ReverseSequence: sequence length {l} outside [0, {time}]"
        )));
    }
    let st = strides(&x.shape);
    let inner: usize = x.shape[2..].iter().product();
    let mut idx = Vec::with_capacity(x.len());
    // The first two axes in order, mapping the time coordinate; the rest is contiguous.
    for a in 0..x.shape[0] {
        for c in 0..x.shape[1] {
            let (t, b) = if ta == 0 { (a, c) } else { (c, a) };
            let l = lens[b] as usize;
            let src_t = if t < l { l - 1 - t } else { t };
            let base = src_t * st[ta] + b * st[ba];
            idx.extend(base..base + inner);
        }
    }
    make(x.dtype, x.shape.clone(), x.data.gather(&idx)).map(|t| vec![t])
}

/// `ReverseSequence` in the operator registry: it only moves input values.
pub const DEF: super::OpDef = super::OpDef::onnx("ReverseSequence", 10, eval)
    .infer(super::same_as_first)
    .facts(super::Facts {
        moves_values: true,
        ..super::Facts::NONE
    })
    .bf16_codes();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn reverses_prefixes_and_checks_lengths() {
        // The spec's example 2: time_axis 1, batch_axis 0.
        let n = Node::new("r", "ReverseSequence", &["x", "l"], &["y"])
            .with_attr("time_axis", AttrValue::Int(1))
            .with_attr("batch_axis", AttrValue::Int(0));
        let ctx = OpCtx { node: &n, opset: 10 };
        let x = Tensor::from_f32(&[4, 4], (0..16).map(|v| v as f32).collect());
        let l = Tensor::from_i64(&[4], vec![1, 2, 3, 4]);
        let y = eval(&ctx, &[Some(&x), Some(&l)]).unwrap();
        let want = [0., 1., 2., 3., 5., 4., 6., 7., 10., 9., 8., 11., 15., 14., 13., 12.];
        assert_eq!(y[0].as_f32().unwrap(), want);
        let l5 = Tensor::from_i64(&[4], vec![1, 2, 3, 5]);
        assert!(eval(&ctx, &[Some(&x), Some(&l5)]).is_err());
        let l3 = Tensor::from_i64(&[3], vec![1, 2, 3]);
        assert!(eval(&ctx, &[Some(&x), Some(&l3)]).is_err());
        let same = Node::new("r", "ReverseSequence", &["x", "l"], &["y"])
            .with_attr("time_axis", AttrValue::Int(1));
        assert!(eval(&OpCtx { node: &same, opset: 10 }, &[Some(&x), Some(&l)]).is_err());
    }
}
