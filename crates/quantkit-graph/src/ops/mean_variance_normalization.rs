//! `MeanVarianceNormalization` (opsets 9 and 13, a function in ONNX):
//! `y = (x − E[x]) / (√(E[x²] − E[x]²) + 1e-9)`, the expectations over `axes` (default
//! `[0, 2, 3]`; negative axes count from the end). The variance is computed as
//! `E[(x − E[x])²]`, the same value without the cancellation of the function body's form.

use super::norm::{mean_var, require_float};
use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, DType, Data, Tensor};

/// The function body's epsilon, added to the standard deviation.
const EPSILON: f64 = 1e-9;

/// Evaluates `MeanVarianceNormalization`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    require_float(x, 0)?;
    let r = x.rank();
    let axes = ctx.node.attr_ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let mut reduced = vec![false; r];
    for &a in &axes {
        let a = norm_axis(a, r).map_err(|e| OpError::attr("axes", e.to_string()))?;
        if std::mem::replace(&mut reduced[a], true) {
            return Err(OpError::attr("axes", format!("axis {a} repeated in {axes:?}")));
        }
    }
    // Group the elements by their position on the kept axes.
    let st = strides(&x.shape);
    let kept: Vec<usize> = (0..r).filter(|&a| !reduced[a]).collect();
    let groups: usize = kept.iter().map(|&a| x.shape[a]).product();
    let mut group_of = vec![0usize; x.len()];
    for (i, g) in group_of.iter_mut().enumerate() {
        let mut k = 0;
        for &a in &kept {
            k = k * x.shape[a] + (i / st[a]) % x.shape[a];
        }
        *g = k;
    }
    let xv = x.to_f64_vec();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); groups];
    for (i, &g) in group_of.iter().enumerate() {
        members[g].push(i);
    }
    let mut y = vec![0f64; xv.len()];
    for m in &members {
        let (mean, var) = mean_var(m.iter().map(|&i| xv[i]));
        let d = var.sqrt() + EPSILON;
        for &i in m {
            y[i] = (xv[i] - mean) / d;
        }
    }
    Ok(vec![
        make(DType::F64, x.shape.clone(), Data::F64(y))?.cast(x.dtype)
    ])
}

/// `MeanVarianceNormalization` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("MeanVarianceNormalization", 9, eval)
    .infer(super::registry::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn custom_axes_and_bad_axes() {
        let x = Tensor::from_f32(&[2, 2], vec![1.0, 3.0, 5.0, 5.0]);
        let n = Node::new("m", "MeanVarianceNormalization", &["x"], &["y"])
            .with_attr("axes", AttrValue::Ints(vec![-1]));
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap();
        let v = y[0].as_f32().unwrap();
        assert!((v[0] + 1.0).abs() < 1e-6 && (v[1] - 1.0).abs() < 1e-6);
        assert_eq!(&v[2..], &[0.0, 0.0]);
        // The default axes [0, 2, 3] need rank 4.
        let d = Node::new("m", "MeanVarianceNormalization", &["x"], &["y"]);
        assert!(matches!(
            eval(&OpCtx { node: &d, opset: 13 }, &[Some(&x)]),
            Err(OpError::Attribute { .. })
        ));
        let r = d.with_attr("axes", AttrValue::Ints(vec![1, -1]));
        assert!(matches!(
            eval(&OpCtx { node: &r, opset: 13 }, &[Some(&x)]),
            Err(OpError::Attribute { .. })
        ));
    }
}
