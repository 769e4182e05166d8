//! `Unique` (opset 11; 28 only adds types): the distinct elements of the flattened input,
//! or with `axis` the distinct slices along it, and three int64 outputs: `indices` (first
//! occurrence of each in the input), `inverse_indices` (for each input element or slice,
//! its position in `Y`) and `counts`. `sorted = 1` (default) orders `Y` ascending (slices
//! lexicographically, as numpy's `unique` with `axis`); `sorted = 0` keeps the order of
//! first occurrence. NaNs count as equal to each other and above every number. One
//! stable sort of the slice indices: O(n log n) comparisons.

use super::top_k::total;
use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, DType, Tensor};
use std::cmp::Ordering;

/// The slices of `v` (viewed as `[outer, n, inner]`, slice `j` = all `[o, j, i]`) grouped
/// by equal contents, groups in ascending order, each listing its slices in input order.
fn groups<T: PartialOrd + Copy>(v: &[T], (outer, n, inner): (usize, usize, usize)) -> Vec<Vec<usize>> {
    let cmp = |&a: &usize, &b: &usize| -> Ordering {
        for o in 0..outer {
            for i in 0..inner {
                let (x, y) = (&v[(o * n + a) * inner + i], &v[(o * n + b) * inner + i]);
                match total(x, y) {
                    Ordering::Equal => {}
                    d => return d,
                }
            }
        }
        Ordering::Equal
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(cmp); // stable: equal slices stay in input order
    let mut out: Vec<Vec<usize>> = Vec::new();
    for j in order {
        match out.last_mut() {
            Some(g) if cmp(&g[0], &j) == Ordering::Equal => g.push(j),
            _ => out.push(vec![j]),
        }
    }
    out
}

/// Evaluates `Unique`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let (shape, axis) = match ctx.node.attr("axis") {
        None => (vec![x.len()], 0),
        Some(_) if x.rank() == 0 => {
            return Err(OpError::shape("rank ≥ 1 with an axis", &x.shape))
        }
        Some(_) => (x.shape.clone(), norm_axis(ctx.node.attr_int("axis", 0)?, x.rank())?),
    };
    let sorted = ctx.node.attr_int("sorted", 1)?;
    if !matches!(sorted, 0 | 1) {
        return Err(OpError::attr("sorted", format!("{sorted} is not 0 or 1")));
    }
    let n = shape[axis];
    let dims = (
        shape[..axis].iter().product::<usize>(),
        n,
        shape[axis + 1..].iter().product::<usize>(),
    );
    let mut gs = if x.dtype.is_narrow_float() {
        // Codes do not sort as their values: order the decoded values.
        groups(&x.to_f32_vec(), dims)
    } else {
        crate::with_data!(&x.data, v => groups(v, dims))
    };
    if sorted == 0 {
        gs.sort_by_key(|g| g[0]);
    }
    let u = gs.len();
    let mut inverse = vec![0i64; n];
    for (k, g) in gs.iter().enumerate() {
        for &j in g {
            inverse[j] = k as i64;
        }
    }
    let (outer, _, inner) = dims;
    let mut idx = Vec::with_capacity(outer * u * inner);
    for o in 0..outer {
        for g in &gs {
            let base = (o * n + g[0]) * inner;
            idx.extend(base..base + inner);
        }
    }
    let mut yshape = shape;
    yshape[axis] = u;
    let first: Vec<i64> = gs.iter().map(|g| g[0] as i64).collect();
    let counts: Vec<i64> = gs.iter().map(|g| g.len() as i64).collect();
    let i64s = |v: Vec<i64>| make(DType::I64, vec![v.len()], Data::I64(v));
    Ok(vec![
        make(x.dtype, yshape, x.data.gather(&idx))?,
        i64s(first)?,
        i64s(inverse)?,
        i64s(counts)?,
    ])
}

/// `Unique` in the operator registry (the output sizes depend on the values: no shape
/// rule).
pub const DEF: super::OpDef = super::OpDef::onnx("Unique", 11, eval).bf16_codes();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn the_spec_examples() {
        // Example 1: unsorted, flattened.
        let n = Node::new("u", "Unique", &["x"], &["y", "i", "v", "c"]).with_attr("sorted", AttrValue::Int(0));
        let x = Tensor::from_i64(&[6], vec![2, 1, 1, 3, 4, 3]);
        let y = eval(&OpCtx { node: &n, opset: 11 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].to_i64_vec(), [2, 1, 3, 4]);
        assert_eq!(y[1].to_i64_vec(), [0, 1, 3, 4]);
        assert_eq!(y[2].to_i64_vec(), [0, 1, 1, 2, 3, 2]);
        assert_eq!(y[3].to_i64_vec(), [1, 2, 2, 1]);
        // Example 4: sorted slices along axis 1.
        let n = Node::new("u", "Unique", &["x"], &["y", "i", "v", "c"]).with_attr("axis", AttrValue::Int(1));
        let row = [1., 1., 0., 1., 2., 1., 0., 1.];
        let x = Tensor::from_f32(&[2, 4, 2], [row, row].concat());
        let y = eval(&OpCtx { node: &n, opset: 11 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].shape, [2, 3, 2]);
        assert_eq!(y[0].as_f32().unwrap()[..6], [0., 1., 1., 1., 2., 1.]);
        assert_eq!(y[1].to_i64_vec(), [1, 0, 2]);
        assert_eq!(y[2].to_i64_vec(), [1, 0, 2, 0]);
        assert_eq!(y[3].to_i64_vec(), [2, 1, 1]);
    }

    #[test]
    fn nan_and_bad_attributes() {
        let n = Node::new("u", "Unique", &["x"], &["y"]);
        let x = Tensor::from_f32(&[4], vec![f32::NAN, 1.0, f32::NAN, 0.0]);
        let y = eval(&OpCtx { node: &n, opset: 11 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].as_f32().unwrap()[..2], [0.0, 1.0]);
        assert!(y[0].as_f32().unwrap()[2].is_nan());
        assert_eq!(y[3].to_i64_vec(), [1, 1, 2]);
        let bad = Node::new("u", "Unique", &["x"], &["y"]).with_attr("axis", AttrValue::Int(1));
        assert!(eval(&OpCtx { node: &bad, opset: 11 }, &[Some(&x)]).is_err());
        let bad = Node::new("u", "Unique", &["x"], &["y"]).with_attr("sorted", AttrValue::Int(2));
        assert!(eval(&OpCtx { node: &bad, opset: 11 }, &[Some(&x)]).is_err());
    }
}
