//! `SoftmaxCrossEntropyLoss` (opsets 12, 13; 13 only adds types): the negative
//! log-likelihood loss ([`super::negative_log_likelihood_loss::nll`]: `weight`,
//! `ignore_index`, `reduction`) of `log_softmax(scores)` along the class axis 1 of an
//! `N × C × d1 × …` input. The optional second output is that log-probability tensor.

use super::negative_log_likelihood_loss::{nll, Reduction};
use super::norm::require_float;
use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `SoftmaxCrossEntropyLoss`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    require_float(x, 0)?;
    if x.rank() < 2 {
        return Err(OpError::shape("scores of rank ≥ 2 (N × C × ...)", &x.shape));
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let d: usize = x.shape[2..].iter().product();
    let mut lp = x.to_f64_vec();
    // log_softmax over C for every (n, d), stabilised by the maximum.
    for i in 0..n {
        for j in 0..d {
            let at = |k: usize| (i * c + k) * d + j;
            let m = (0..c).map(|k| lp[at(k)]).fold(f64::NEG_INFINITY, f64::max);
            let lse = m + (0..c).map(|k| (lp[at(k)] - m).exp()).sum::<f64>().ln();
            for k in 0..c {
                lp[at(k)] -= lse;
            }
        }
    }
    let loss = nll(ctx, &lp, &x.shape, input(inputs, 1)?, opt_input(inputs, 2), x.dtype)?;
    let mut out = vec![loss];
    if ctx.node.outputs.len() > 1 {
        out.push(make(DType::F64, x.shape.clone(), Data::F64(lp))?.cast(x.dtype));
    }
    Ok(out)
}

/// Static shape rule: the loss (the target's shape for `reduction = none`, a scalar
/// otherwise) and the log-probabilities (the scores' shape).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    let shape = match Reduction::parse(ctx).ok()? {
        Reduction::None => inp.get(1)?.1.clone(),
        _ => vec![],
    };
    let mut out = vec![(x.0, shape)];
    if ctx.node.outputs.len() > 1 {
        out.push(x.clone());
    }
    Some(out)
}

/// `SoftmaxCrossEntropyLoss` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("SoftmaxCrossEntropyLoss", 12, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn loss_and_log_prob_outputs() {
        // Equal scores: log p = −ln 2 for both classes.
        let x = Tensor::from_f32(&[1, 2, 2], vec![1.0, 5.0, 1.0, 5.0]);
        let t = Tensor::from_i64(&[1, 2], vec![0, 1]);
        let n = Node::new("s", "SoftmaxCrossEntropyLoss", &["x", "t"], &["loss", "lp"])
            .with_attr("reduction", AttrValue::String(b"none".to_vec()));
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x), Some(&t)]).unwrap();
        let ln2 = std::f32::consts::LN_2;
        assert_eq!(y.len(), 2);
        assert_eq!(y[0].shape, vec![1, 2]);
        for v in y[0].as_f32().unwrap() {
            assert!((v - ln2).abs() < 1e-6);
        }
        assert_eq!(y[1].shape, vec![1, 2, 2]);
        for v in y[1].as_f32().unwrap() {
            assert!((v + ln2).abs() < 1e-6);
        }
        let one = Node::new("s", "SoftmaxCrossEntropyLoss", &["x", "t"], &["loss"]);
        let y = eval(&OpCtx { node: &one, opset: 13 }, &[Some(&x), Some(&t)]).unwrap();
        assert_eq!(y.len(), 1);
        assert!(y[0].shape.is_empty());
        let v = Tensor::from_f32(&[2], vec![0.0; 2]);
        assert!(matches!(
            eval(&OpCtx { node: &one, opset: 13 }, &[Some(&v), Some(&t)]),
            Err(OpError::ShapeMismatch { .. })
        ));
    }
}
