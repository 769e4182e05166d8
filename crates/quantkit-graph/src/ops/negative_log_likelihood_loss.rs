//! `NegativeLogLikelihoodLoss` (opsets 12, 13, 22; the later ones only change types):
//! `loss[n, d…] = −w · input[n, target[n, d…], d…]` for an input `N × C × d1 × …` of
//! log-probabilities and integer targets `N × d1 × …`, where `w = weight[target]` (1 without
//! `weight`) and 0 where `target == ignore_index`. `reduction` is `none` (the loss per
//! element, the target's shape), `sum`, or `mean` (default: the sum divided by the sum of
//! `w`, NaN when every element is ignored, as the ONNX reference gives). [`nll`] also
//! evaluates SoftmaxCrossEntropyLoss.

use super::norm::require_float;
use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// The `reduction` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// The loss of every element.
    None,
    /// Their sum.
    Sum,
    /// Their weighted mean.
    Mean,
}

impl Reduction {
    /// Reads `reduction` (default `mean`).
    pub fn parse(ctx: &OpCtx) -> Result<Reduction, OpError> {
        match ctx.node.attr_string("reduction", "mean")?.as_str() {
            "none" => Ok(Reduction::None),
            "sum" => Ok(Reduction::Sum),
            "mean" => Ok(Reduction::Mean),
            other => Err(OpError::attr(
                "reduction",
                format!("expected none, sum or mean, got {other:?}"),
            )),
        }
    }
}

/// The loss of log-probabilities `logp` (f64, of `shape = [N, C, d1, …]`) against `target`
/// (input 1) with the optional class `weight` (input 2), as a tensor of `dtype`.
pub fn nll(
    ctx: &OpCtx,
    logp: &[f64],
    shape: &[usize],
    target: &Tensor,
    weight: Option<&Tensor>,
    dtype: DType,
) -> Result<Tensor, OpError> {
    if shape.len() < 2 {
        return Err(OpError::shape("an input of rank ≥ 2 (N × C × ...)", shape));
    }
    let (n, c) = (shape[0], shape[1]);
    let mut tshape = vec![n];
    tshape.extend_from_slice(&shape[2..]);
    if !matches!(target.dtype, DType::I32 | DType::I64) {
        return Err(OpError::DType {
            index: 1,
            expected: "int32 or int64".into(),
            got: target.dtype.to_string(),
        });
    }
    if target.shape != tshape {
        return Err(OpError::shape(
            format!("target of shape {tshape:?} (the input's without C)"),
            &target.shape,
        ));
    }
    let w = match weight {
        None => None,
        Some(w) => {
            require_float(w, 2)?;
            if w.shape.as_slice() != [c] {
                return Err(OpError::shape(format!("weight of shape [{c}]"), &w.shape));
            }
            Some(w.to_f64_vec())
        }
    };
    let ignore = ctx
        .node
        .attr("ignore_index")
        .map(|_| ctx.node.attr_int("ignore_index", 0))
        .transpose()?;
    let reduction = Reduction::parse(ctx)?;
    let d: usize = shape[2..].iter().product();
    let t = target.to_i64_vec();
    let mut loss = vec![0f64; t.len()];
    let mut wsum = 0f64;
    for (k, (&cls, l)) in t.iter().zip(loss.iter_mut()).enumerate() {
        if Some(cls) == ignore {
            continue;
        }
        if cls < 0 || cls as usize >= c {
            return Err(OpError::Invalid(format!(
                "target {cls} at flat index {k} is outside [0, {c}) and is not ignore_index"
            )));
        }
        let cls = cls as usize;
        let wk = w.as_ref().map_or(1.0, |w| w[cls]);
        let (i, j) = (k / d, k % d);
        *l = -wk * logp[(i * c + cls) * d + j];
        wsum += wk;
    }
    let (out_shape, vals) = match reduction {
        Reduction::None => (tshape, loss),
        Reduction::Sum => (vec![], vec![loss.iter().sum()]),
        Reduction::Mean => (vec![], vec![loss.iter().sum::<f64>() / wsum]),
    };
    Ok(make(DType::F64, out_shape, Data::F64(vals))?.cast(dtype))
}

/// Evaluates `NegativeLogLikelihoodLoss`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    require_float(x, 0)?;
    let target = input(inputs, 1)?;
    let loss = nll(
        ctx,
        &x.to_f64_vec(),
        &x.shape,
        target,
        opt_input(inputs, 2),
        x.dtype,
    )?;
    Ok(vec![loss])
}

/// Static shape rule: the target's shape for `reduction = none`, a scalar otherwise.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    let shape = match Reduction::parse(ctx).ok()? {
        Reduction::None => {
            let t = inp.get(1)?;
            t.1.clone()
        }
        _ => vec![],
    };
    Some(vec![(x.0, shape)])
}

/// `NegativeLogLikelihoodLoss` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("NegativeLogLikelihoodLoss", 12, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn run(n: &Node, x: &Tensor, t: &Tensor, w: Option<&Tensor>) -> Result<Vec<Tensor>, OpError> {
        eval(&OpCtx { node: n, opset: 13 }, &[Some(x), Some(t), w])
    }

    #[test]
    fn reductions_weights_and_ignore_index() {
        // N = 3, C = 2 log-probabilities.
        let x = Tensor::from_f32(&[3, 2], vec![-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]);
        let t = Tensor::from_i64(&[3], vec![1, 0, 1]);
        let w = Tensor::from_f32(&[2], vec![1.0, 3.0]);
        let none = Node::new("l", "NegativeLogLikelihoodLoss", &["x", "t", "w"], &["y"])
            .with_attr("reduction", AttrValue::String(b"none".to_vec()));
        let y = run(&none, &x, &t, Some(&w)).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[3], vec![6.0, 3.0, 18.0]));
        let mean = Node::new("l", "NegativeLogLikelihoodLoss", &["x", "t", "w"], &["y"]);
        let y = run(&mean, &x, &t, Some(&w)).unwrap();
        assert!(y[0].shape.is_empty());
        assert!((y[0].as_f32().unwrap()[0] - 27.0 / 7.0).abs() < 1e-6);
        // Ignoring class 1 leaves the middle element, weight 1.
        let ign = mean.clone().with_attr("ignore_index", AttrValue::Int(1));
        let y = run(&ign, &x, &t, Some(&w)).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[], vec![3.0]));
        let sum = mean.clone().with_attr("reduction", AttrValue::String(b"sum".to_vec()));
        let y = run(&sum, &x, &t, None).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[], vec![2.0 + 3.0 + 6.0]));
    }

    #[test]
    fn bad_targets_shapes_and_reduction() {
        let x = Tensor::from_f32(&[2, 2], vec![0.0; 4]);
        let n = Node::new("l", "NegativeLogLikelihoodLoss", &["x", "t"], &["y"]);
        let out_of_range = Tensor::from_i64(&[2], vec![0, 2]);
        assert!(matches!(run(&n, &x, &out_of_range, None), Err(OpError::Invalid(_))));
        let negative = Tensor::from_i64(&[2], vec![-1, 0]);
        assert!(matches!(run(&n, &x, &negative, None), Err(OpError::Invalid(_))));
        // ... unless it is the ignore_index.
        let ign = n.clone().with_attr("ignore_index", AttrValue::Int(-1));
        assert!(run(&ign, &x, &negative, None).is_ok());
        let wrong_shape = Tensor::from_i64(&[3], vec![0, 0, 0]);
        assert!(matches!(run(&n, &x, &wrong_shape, None), Err(OpError::ShapeMismatch { .. })));
        let float_target = Tensor::from_f32(&[2], vec![0.0, 1.0]);
        assert!(matches!(run(&n, &x, &float_target, None), Err(OpError::DType { .. })));
        let t = Tensor::from_i64(&[2], vec![0, 1]);
        let w3 = Tensor::from_f32(&[3], vec![1.0; 3]);
        assert!(matches!(run(&n, &x, &t, Some(&w3)), Err(OpError::ShapeMismatch { .. })));
        let bad = n.with_attr("reduction", AttrValue::String(b"max".to_vec()));
        assert!(matches!(run(&bad, &x, &t, None), Err(OpError::Attribute { .. })));
        let v = Tensor::from_f32(&[2], vec![0.0; 2]);
        assert!(run(&ign, &v, &t, None).is_err());
    }
}
