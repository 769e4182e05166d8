//! `LRN`: local response normalization across channels (AlexNet, GoogLeNet). For input
//! `N × C × D1 × … × Dk`,
//! `y = x / (bias + alpha / size · Σ x²)^beta`, the sum over channels
//! `c − ⌊(size−1)/2⌋ ..= c + ⌈(size−1)/2⌉` clipped to `[0, C)`. Attributes `alpha`
//! (1e-4), `beta` (0.75), `bias` (1.0) and the required positive `size`. Opset 1; 13 only
//! adds bfloat16. Computes in f64.

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `LRN`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let node = ctx.node;
    let alpha = node.attr_float("alpha", 1e-4)? as f64;
    let beta = node.attr_float("beta", 0.75)? as f64;
    let bias = node.attr_float("bias", 1.0)? as f64;
    if node.attr("size").is_none() {
        return Err(OpError::attr("size", "required"));
    }
    let size = node.attr_int("size", 0)?;
    if size <= 0 {
        return Err(OpError::attr(
            "size",
            format!("expected a positive value, got {size}"),
        ));
    }
    if x.rank() < 2 {
        return Err(OpError::shape("an N × C × … input of rank ≥ 2", &x.shape));
    }
    let size = size as usize;
    let (n, c) = (x.shape[0], x.shape[1]);
    let inner: usize = x.shape[2..].iter().product();
    let (below, above) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let v = x.to_f64_vec();
    let mut y = vec![0f64; v.len()];
    for b in 0..n {
        for ch in 0..c {
            let lo = ch.saturating_sub(below);
            let hi = (ch + above).min(c - 1);
            for i in 0..inner {
                let at = |k: usize| (b * c + k) * inner + i;
                let sq: f64 = (lo..=hi).map(|k| v[at(k)] * v[at(k)]).sum();
                y[at(ch)] = v[at(ch)] / (bias + alpha / size as f64 * sq).powf(beta);
            }
        }
    }
    let data = match &x.data {
        Data::F32(_) => Data::F32(y.iter().map(|&v| v as f32).collect()),
        Data::F64(_) => Data::F64(y),
        Data::F16(_) => Data::F16(y.iter().map(|&v| half::f16::from_f64(v)).collect()),
        _ => {
            return Err(OpError::DType {
                index: 0,
                expected: "float".into(),
                got: x.dtype.to_string(),
            })
        }
    };
    make(x.dtype, x.shape.clone(), data).map(|t| vec![t])
}

/// `LRN` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("LRN", 1, eval).infer(super::registry::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn normalizes_across_neighbouring_channels() {
        // size 2: channel c sums channels c−0 ..= c+1.
        let x = Tensor::from_f32(&[1, 3, 1, 1], vec![1.0, 2.0, 3.0]);
        let n = Node::new("l", "LRN", &["x"], &["y"])
            .with_attr("size", AttrValue::Int(2))
            .with_attr("alpha", AttrValue::Float(2.0))
            .with_attr("beta", AttrValue::Float(1.0));
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap();
        let want = [1.0 / (1.0 + 5.0), 2.0 / (1.0 + 13.0), 3.0 / (1.0 + 9.0)];
        for (a, b) in y[0].as_f32().unwrap().iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn size_must_be_given_and_positive() {
        let x = Tensor::from_f32(&[1, 1, 1, 1], vec![1.0]);
        let n = Node::new("l", "LRN", &["x"], &["y"]);
        let e = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap_err();
        assert!(matches!(e, OpError::Attribute { ref name, .. } if name == "size"), "{e}");
        let n = n.with_attr("size", AttrValue::Int(0));
        let e = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap_err();
        assert!(matches!(e, OpError::Attribute { ref name, .. } if name == "size"), "{e}");
    }
}
