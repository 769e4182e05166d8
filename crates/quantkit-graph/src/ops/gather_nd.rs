//! `GatherND`: gathers slices of `data` (rank r) named by the last axis of int64
//! `indices` (rank q): each tuple of `m = indices.shape[-1]` indices (1 ≤ m ≤ r − b) picks
//! the slice `data[batch, i_0, …, i_{m−1}]`; the output shape is `indices.shape[..q−1] ++
//! data.shape[b+m..]`. Opset 12 added `batch_dims` (b, default 0): the first b axes of
//! `indices` and `data` are batch axes and must agree. Opset 11 introduced it; 13 only
//! adds bfloat16. Negative indices count from the end; out-of-range ones are errors.
//! `slice_offsets` is shared with ScatterND.

use super::index::{indices_of, norm_index, numel};
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, Tensor};

/// Where each index tuple's slice starts in the flat data, and the slice length: one pass
/// over the indices, so gathering or scattering is linear in the output.
pub(super) fn slice_offsets(
    data: &[usize],
    ind_shape: &[usize],
    ind: &[i64],
    b: usize,
) -> Result<(Vec<usize>, usize), OpError> {
    let (r, q) = (data.len(), ind_shape.len());
    if r == 0 || q == 0 || b >= r.min(q) {
        return Err(OpError::shape(
            format!("data and indices of rank > batch_dims {b}"),
            (data, ind_shape),
        ));
    }
    if data[..b] != ind_shape[..b] {
        return Err(OpError::shape(
            format!("indices whose {b} batch axes equal the data's {:?}", &data[..b]),
            ind_shape,
        ));
    }
    let m = ind_shape[q - 1];
    if m < 1 || m > r - b {
        return Err(OpError::shape(
            format!("a last indices axis of 1..={} values", r - b),
            ind_shape,
        ));
    }
    let st = strides(data);
    let slice: usize = data[b + m..].iter().product();
    let per_batch: usize = ind_shape[b..q - 1].iter().product();
    let batch_len: usize = data[b..].iter().product();
    let tuples = ind.len() / m;
    let mut offs = Vec::with_capacity(tuples);
    for t in 0..tuples {
        let mut off = (t / per_batch.max(1)) * batch_len;
        for (k, &i) in ind[t * m..(t + 1) * m].iter().enumerate() {
            off += norm_index(i, data[b + k])? * st[b + k];
        }
        offs.push(off);
    }
    Ok((offs, slice))
}

/// The output shape: `indices.shape[..q−1] ++ data.shape[b+m..]`.
fn out_shape(data: &[usize], ind: &[usize], b: usize) -> Vec<usize> {
    let (q, m) = (ind.len(), ind.last().copied().unwrap_or(0));
    let mut out = ind[..q.saturating_sub(1)].to_vec();
    out.extend_from_slice(data.get(b + m..).unwrap_or(&[]));
    out
}

/// `batch_dims` (opset 12 on), non-negative.
fn batch_dims(ctx: &OpCtx) -> Result<usize, OpError> {
    let b = ctx.node.attr_int("batch_dims", 0)?;
    usize::try_from(b).map_err(|_| OpError::attr("batch_dims", format!("{b} is negative")))
}

/// Evaluates `GatherND`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let it = input(inputs, 1)?;
    let b = batch_dims(ctx)?;
    let (offs, slice) = slice_offsets(&x.shape, &it.shape, &indices_of(it, 1)?, b)?;
    let out = out_shape(&x.shape, &it.shape, b);
    let mut idx = Vec::with_capacity(numel(&out, "GatherND")?);
    for o in offs {
        idx.extend(o..o + slice);
    }
    make(x.dtype, out, x.data.gather(&idx)).map(|t| vec![t])
}

/// Static shape rule: the data's type, `indices.shape[..q−1] ++ data.shape[b+m..]`.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dtype, data) = inp.get(0)?;
    let (_, ind) = inp.get(1)?;
    let b = batch_dims(ctx).ok()?;
    let m = *ind.last()?;
    (m >= 1 && b + m <= data.len()).then(|| vec![(*dtype, out_shape(data, ind, b))])
}

/// `GatherND` in the operator registry: it only selects input values.
pub const DEF: super::OpDef = super::OpDef::onnx("GatherND", 11, eval)
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
    fn tuples_slices_and_batch_dims() {
        let n = Node::new("g", "GatherND", &["x", "i"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 13 };
        let x = Tensor::from_f32(&[2, 2], vec![0.0, 1.0, 2.0, 3.0]);
        let i = Tensor::from_i64(&[2, 2], vec![0, 0, 1, -1]);
        assert_eq!(eval(&ctx, &[Some(&x), Some(&i)]).unwrap()[0], Tensor::from_f32(&[2], vec![0.0, 3.0]));
        let i = Tensor::from_i64(&[2, 1], vec![1, 0]);
        let y = eval(&ctx, &[Some(&x), Some(&i)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2, 2], vec![2.0, 3.0, 0.0, 1.0]));
        let nb = Node::new("g", "GatherND", &["x", "i"], &["y"]).with_attr("batch_dims", AttrValue::Int(1));
        let y = eval(&OpCtx { node: &nb, opset: 13 }, &[Some(&x), Some(&i)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2], vec![1.0, 2.0]));
    }

    #[test]
    fn bad_ranks_tuples_and_indices() {
        let n = Node::new("g", "GatherND", &["x", "i"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 13 };
        let x = Tensor::from_f32(&[2, 2], vec![0.0, 1.0, 2.0, 3.0]);
        for (shape, v) in [(vec![1, 3], vec![0, 0, 0]), (vec![1, 0], vec![]), (vec![1, 1], vec![2])] {
            let i = Tensor::from_i64(&shape, v);
            assert!(eval(&ctx, &[Some(&x), Some(&i)]).is_err(), "{shape:?}");
        }
        let nb = Node::new("g", "GatherND", &["x", "i"], &["y"]).with_attr("batch_dims", AttrValue::Int(1));
        let i = Tensor::from_i64(&[3, 1], vec![0, 0, 0]);
        assert!(eval(&OpCtx { node: &nb, opset: 13 }, &[Some(&x), Some(&i)]).is_err());
    }
}
