//! `HannWindow` (opset 17): `w[n] = sin²(π·n / N')` for `n < size`, with `N' = size` when
//! `periodic` (default 1) and `size − 1` otherwise. Input 0 is the scalar int32/int64
//! `size`; `output_datatype` (default float) picks the output type. The other window
//! operators (`HammingWindow`, `BlackmanWindow`) share [`window`].

use super::{first_i64, input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Largest window length accepted (a `size` beyond it is an error, not an allocation).
pub const MAX_WINDOW: i64 = 1 << 26;

/// Evaluates a window operator: reads `size`, `periodic` and `output_datatype`, and fills
/// `f(n, N')` for `n < size` (computed in f64, then cast to the output type).
pub fn window(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    f: impl Fn(f64, f64) -> f64,
) -> Result<Vec<Tensor>, OpError> {
    let size_t = input(inputs, 0)?;
    if size_t.len() != 1 || size_t.dtype.is_float() {
        return Err(OpError::Invalid(format!(
            "size must be one int32/int64 value, got {}{:?}",
            size_t.dtype, size_t.shape
        )));
    }
    let size = first_i64(size_t, 0)?;
    if !(0..=MAX_WINDOW).contains(&size) {
        return Err(OpError::Invalid(format!(
            "window size {size} outside 0..={MAX_WINDOW}"
        )));
    }
    let periodic = ctx.node.attr_int("periodic", 1)? != 0;
    let code = ctx.node.attr_int("output_datatype", 1)?;
    let to = i32::try_from(code)
        .ok()
        .and_then(DType::from_onnx)
        .ok_or_else(|| OpError::Invalid(format!("output_datatype {code} is not supported")))?;
    let size = size as usize;
    let denom = if periodic { size as f64 } else { size as f64 - 1.0 };
    let v: Vec<f64> = (0..size).map(|n| f(n as f64, denom)).collect();
    let t = Tensor::new(vec![size], Data::F64(v)).map_err(|e| OpError::Invalid(e.to_string()))?;
    Ok(vec![t.cast(to)])
}

/// Evaluates `HannWindow`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    window(ctx, inputs, |n, d| {
        let s = (std::f64::consts::PI * n / d).sin();
        s * s
    })
}

/// `HannWindow` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("HannWindow", 17, eval);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn periodic_symmetric_and_bad_sizes() {
        let n = Node::new("w", "HannWindow", &["s"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 17 };
        let s = Tensor::from_i64(&[], vec![4]);
        let y = eval(&ctx, &[Some(&s)]).unwrap();
        let want = [0.0, 0.5, 1.0, 0.5];
        for (a, b) in y[0].to_f64_vec().iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        let n2 = n.clone().with_attr("periodic", AttrValue::Int(0));
        let y = eval(&OpCtx { node: &n2, opset: 17 }, &[Some(&s)]).unwrap();
        assert!((y[0].to_f64_vec()[3]).abs() < 1e-6);
        for bad in [-1, MAX_WINDOW + 1] {
            let s = Tensor::from_i64(&[], vec![bad]);
            assert!(eval(&ctx, &[Some(&s)]).is_err());
        }
        let f = Tensor::scalar_f32(4.0);
        assert!(eval(&ctx, &[Some(&f)]).is_err());
    }
}
