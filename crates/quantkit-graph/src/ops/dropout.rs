//! `Dropout` at inference: `output = data`, and the optional `mask` output all true.
//!
//! Opsets < 7 have `is_test` and `ratio` attributes; the executor treats the node as in
//! test mode whatever `is_test` says (as inference runtimes do: old exporters left
//! `is_test = 0` in deployed models). Opsets 7–11: `ratio` attribute; the mask has the
//! data's type before opset 10 (all ones) and is bool from 10. Opset ≥ 12: `ratio` and
//! `training_mode` are optional inputs; in training mode with a non-zero ratio the output
//! would be random, which is not implemented (an unsupported-feature error); with ratio 0
//! it is the identity again.

use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `Dropout`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if ctx.opset >= 12 {
        let ratio = match opt_input(inputs, 1) {
            Some(r) => *r.to_f64_vec().first().ok_or_else(|| {
                OpError::shape("a one-element ratio", &r.shape)
            })?,
            None => 0.5,
        };
        if !(0.0..1.0).contains(&ratio) {
            return Err(OpError::Invalid(format!(
                "Dropout ratio {ratio} is not in [0, 1)"
            )));
        }
        let training = match opt_input(inputs, 2) {
            Some(t) => *t.to_f64_vec().first().ok_or_else(|| {
                OpError::shape("a one-element training_mode", &t.shape)
            })? != 0.0,
            None => false,
        };
        if training && ratio != 0.0 {
            return Err(OpError::Unsupported(format!(
                "Dropout in training mode with ratio {ratio} (random masks)"
            )));
        }
    } else {
        let ratio = ctx.node.attr_float("ratio", 0.5)?;
        if !(0.0..1.0).contains(&ratio) {
            return Err(OpError::attr(
                "ratio",
                format!("{ratio} is not in [0, 1)"),
            ));
        }
    }
    let mut out = vec![x.clone()];
    if ctx.node.outputs.get(1).is_some_and(|n| !n.is_empty()) {
        let ones = make(
            DType::Bool,
            x.shape.clone(),
            Data::Bool(vec![true; x.len()]),
        )?;
        out.push(if ctx.opset >= 10 {
            ones
        } else {
            ones.cast(x.dtype)
        });
    }
    Ok(out)
}

/// Static shape rule: the output is the data; the mask has its shape.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    let mut out = vec![x.clone()];
    if ctx.node.outputs.len() > 1 {
        let t = if ctx.opset >= 10 { DType::Bool } else { x.0 };
        out.push((t, x.1.clone()));
    }
    Some(out)
}

/// `Dropout` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Dropout", 1, eval)
    .infer(infer)
    .facts(super::Facts {
        moves_values: true,
        elementwise: true,
        monotone: true,
        ..super::Facts::NONE
    });

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn inference_is_the_identity_with_an_all_true_mask() {
        let x = Tensor::from_f32(&[2, 2], vec![1.0, -2.0, 3.0, 0.5]);
        let n = Node::new("d", "Dropout", &["x"], &["y", "m"]);
        let out = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap();
        assert_eq!(out[0], x);
        assert_eq!(out[1].data, Data::Bool(vec![true; 4]));
        // Before opset 10 the mask has the data's type.
        let out = eval(&OpCtx { node: &n, opset: 7 }, &[Some(&x)]).unwrap();
        assert_eq!(out[1], Tensor::from_f32(&[2, 2], vec![1.0; 4]));
        let n = Node::new("d", "Dropout", &["x"], &["y"]);
        assert_eq!(eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap().len(), 1);
    }

    #[test]
    fn training_mode_needs_ratio_zero() {
        let x = Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0]);
        let on = Tensor::new(vec![], Data::Bool(vec![true])).unwrap();
        let n = Node::new("d", "Dropout", &["x", "r", "t"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 13 };
        let half = Tensor::scalar_f32(0.5);
        let e = eval(&ctx, &[Some(&x), Some(&half), Some(&on)]).unwrap_err();
        assert!(matches!(e, OpError::Unsupported(_)), "{e}");
        let e = eval(&ctx, &[Some(&x), None, Some(&on)]).unwrap_err();
        assert!(matches!(e, OpError::Unsupported(_)), "{e}");
        let zero = Tensor::scalar_f32(0.0);
        assert_eq!(eval(&ctx, &[Some(&x), Some(&zero), Some(&on)]).unwrap()[0], x);
        let e = eval(&ctx, &[Some(&x), Some(&Tensor::scalar_f32(1.5)), None]).unwrap_err();
        assert!(e.to_string().contains("ratio"), "{e}");
    }
}
