//! `GatherElements` (opset 11; 13 only adds bfloat16): `out[i][j][k] = data[index][j][k]`
//! for `axis = 0` (and so on), where `index = indices[i][j][k]`; the output has the
//! indices' shape. `indices` (int32/int64) has the data's rank and, off `axis`, sizes no
//! larger than the data's; negative indices count from the end and out-of-range ones are
//! errors. `positions` is shared with ScatterElements and Scatter.

use super::index::{indices_of, norm_index, separable};
use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, Tensor};

/// For each element of `indices` (of shape `ind_shape`), the flat position in `data` it
/// names along `axis`: linear in the number of indices.
pub(super) fn positions(
    data_shape: &[usize],
    ind_shape: &[usize],
    ind: &[i64],
    axis: usize,
) -> Result<Vec<usize>, OpError> {
    if ind_shape.len() != data_shape.len() {
        return Err(OpError::shape(
            format!("indices of the data's rank {}", data_shape.len()),
            ind_shape,
        ));
    }
    if let Some(d) = (0..data_shape.len()).find(|&d| d != axis && ind_shape[d] > data_shape[d]) {
        return Err(OpError::shape(
            format!("indices no larger than the data {data_shape:?} on axis {d}"),
            ind_shape,
        ));
    }
    let st = strides(data_shape);
    let tables: Vec<Vec<Option<usize>>> = ind_shape
        .iter()
        .enumerate()
        .map(|(d, &n)| {
            (0..n)
                .map(|c| Some(if d == axis { 0 } else { c * st[d] }))
                .collect()
        })
        .collect();
    let dim = data_shape[axis];
    separable(&tables)
        .into_iter()
        .zip(ind)
        .map(|(base, &i)| Ok(base.unwrap_or(0) + norm_index(i, dim)? * st[axis]))
        .collect()
}

/// Evaluates `GatherElements`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let it = input(inputs, 1)?;
    if x.rank() == 0 {
        return Err(OpError::shape("rank ≥ 1", &x.shape));
    }
    let axis = norm_axis(ctx.node.attr_int("axis", 0)?, x.rank())?;
    let idx = positions(&x.shape, &it.shape, &indices_of(it, 1)?, axis)?;
    make(x.dtype, it.shape.clone(), x.data.gather(&idx)).map(|t| vec![t])
}

/// Static shape rule: the data's type, the indices' shape.
pub fn infer(_ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    Some(vec![(inp.get(0)?.0, inp.get(1)?.1.clone())])
}

/// `GatherElements` in the operator registry: it only selects input values.
pub const DEF: super::OpDef = super::OpDef::onnx("GatherElements", 11, eval)
    .infer(infer)
    .facts(super::Facts {
        moves_values: true,
        ..super::Facts::NONE
    });

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn gathers_along_axis_and_rejects_bad_indices() {
        let n = Node::new("g", "GatherElements", &["x", "i"], &["y"]).with_attr("axis", AttrValue::Int(1));
        let ctx = OpCtx { node: &n, opset: 13 };
        let x = Tensor::from_f32(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let i = Tensor::from_i64(&[2, 2], vec![0, 0, 1, -2]);
        let y = eval(&ctx, &[Some(&x), Some(&i)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2, 2], vec![1.0, 1.0, 4.0, 3.0]));
        let oob = Tensor::from_i64(&[2, 1], vec![0, 2]);
        assert!(eval(&ctx, &[Some(&x), Some(&oob)]).is_err());
        let rank1 = Tensor::from_i64(&[2], vec![0, 0]);
        assert!(eval(&ctx, &[Some(&x), Some(&rank1)]).is_err());
        let wide = Tensor::from_i64(&[3, 1], vec![0, 0, 0]);
        assert!(eval(&ctx, &[Some(&x), Some(&wide)]).is_err());
        let fl = Tensor::from_f32(&[2, 1], vec![0.0, 0.0]);
        assert!(eval(&ctx, &[Some(&x), Some(&fl)]).is_err());
        let bad = Node::new("g", "GatherElements", &["x", "i"], &["y"]).with_attr("axis", AttrValue::Int(2));
        assert!(eval(&OpCtx { node: &bad, opset: 13 }, &[Some(&x), Some(&i)]).is_err());
    }
}
