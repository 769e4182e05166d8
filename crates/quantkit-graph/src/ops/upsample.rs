//! `Upsample` (opsets 7 and 9; deprecated since opset 10 in favour of `Resize`): scales as
//! an attribute (opset 7) or as input 1 (opset 9), each at least 1, output size
//! `floor(in · scale)`. Mode `nearest` takes the floor of the asymmetric source coordinate
//! `out / scale`; `linear` (or `bilinear`) interpolates between the two neighbours of that
//! coordinate, clamped to the last element. Runs on `Resize`'s separable kernel with
//! Resize-10's meaning (which is Upsample's).

use super::resize::{resize, sizes_from_scales, Ctm, Mode, Nearest, Spec};
use super::{input, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

fn scales(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<f64>, OpError> {
    let s: Vec<f64> = match opt_input(inputs, 1) {
        Some(t) => t.to_f64_vec(),
        None => match ctx.node.attr_floats("scales")? {
            Some(v) => v.iter().map(|&x| f64::from(x)).collect(),
            None => return Err(OpError::attr("scales", "missing (neither input 1 nor attribute)")),
        },
    };
    if s.iter().any(|&v| !(v.is_finite() && v >= 1.0)) {
        return Err(OpError::attr(
            "scales",
            format!("every scale must be finite and at least 1, got {s:?}"),
        ));
    }
    Ok(s)
}

/// Evaluates `Upsample`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let s = scales(ctx, inputs)?;
    if s.len() != x.rank() {
        return Err(OpError::shape(format!("{} scales", x.rank()), &s));
    }
    let mode = match ctx.node.attr_string("mode", "nearest")?.as_str() {
        "nearest" => Mode::Nearest(Nearest::Simple),
        "linear" | "bilinear" => Mode::Linear,
        other => return Err(OpError::attr("mode", format!("unknown value {other}"))),
    };
    let spec = Spec {
        mode,
        ctm: Ctm::Asymmetric,
        antialias: false,
        exclude_outside: false,
        extrapolation: 0.0,
    };
    let out = sizes_from_scales(&x.shape, &s)?;
    let roi = vec![(0.0, 1.0); x.rank()];
    Ok(vec![resize(x, &out, &s, &roi, &spec)?])
}

/// Output type and shape when the scales are an attribute or a constant input.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, shape) = inp.get(0)?;
    let s: Vec<f64> = match inp.konst(ctx, 1) {
        Some(t) => t.to_f64_vec(),
        None if ctx.node.inputs.len() > 1 => return None,
        None => ctx.node.attr_floats("scales").ok()??.iter().map(|&v| f64::from(v)).collect(),
    };
    if s.len() != shape.len() || s.iter().any(|&v| !(v.is_finite() && v >= 1.0)) {
        return None;
    }
    Some(vec![(*dt, sizes_from_scales(shape, &s).ok()?)])
}

/// `Upsample` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Upsample", 7, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn nearest_and_linear_and_bad_scales() {
        let x = Tensor::from_f32(&[1, 2], vec![1.0, 3.0]);
        let n = Node::new("u", "Upsample", &["x"], &["y"])
            .with_attr("scales", AttrValue::Floats(vec![1.0, 2.0]));
        let y = eval(&OpCtx { node: &n, opset: 7 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 4], vec![1.0, 1.0, 3.0, 3.0]));
        let n = n.with_attr("mode", AttrValue::String(b"linear".to_vec()));
        let y = eval(&OpCtx { node: &n, opset: 7 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 4], vec![1.0, 2.0, 3.0, 3.0]));
        let n9 = Node::new("u", "Upsample", &["x", "s"], &["y"]);
        for bad in [vec![1.0, 0.5], vec![1.0, f32::NAN], vec![1.0], vec![1.0, 1e9]] {
            let len = bad.len();
            let s = Tensor::from_f32(&[len], bad);
            assert!(eval(&OpCtx { node: &n9, opset: 9 }, &[Some(&x), Some(&s)]).is_err());
        }
        assert!(eval(&OpCtx { node: &n9, opset: 9 }, &[Some(&x)]).is_err());
    }
}
