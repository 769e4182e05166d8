//! `Softmax`. Opset ≥ 13: along one `axis` (default −1). Opsets < 13: the input is coerced
//! to 2-D at `axis` (default 1) and softmax runs over the flattened inner block.

use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// The `(outer, len, inner)` blocking of `x` for Softmax, LogSoftmax and Hardmax: the
/// operator runs over `len` elements `inner` apart, for each of `outer · inner` starts.
/// Opset ≥ 13: one `axis` (default −1); opsets < 13: `x` coerced to 2-D at `axis`
/// (default 1), so `inner` is 1 and `len` the whole flattened inner block.
pub fn blocks(ctx: &OpCtx, x: &Tensor) -> Result<(usize, usize, usize), OpError> {
    let r = x.rank();
    if r == 0 {
        return Err(OpError::shape("an input of rank ≥ 1", &x.shape));
    }
    Ok(if ctx.opset >= 13 {
        let a = norm_axis(ctx.node.attr_int("axis", -1)?, r)?;
        (
            x.shape[..a].iter().product::<usize>(),
            x.shape[a],
            x.shape[a + 1..].iter().product::<usize>(),
        )
    } else {
        let mut a = ctx.node.attr_int("axis", 1)?;
        if a < 0 {
            a += r as i64;
        }
        if a < 0 || a > r as i64 {
            return Err(OpError::Invalid(format!(
                "axis {} out of range for rank {r}",
                ctx.node.attr_int("axis", 1)?
            )));
        }
        let a = a as usize;
        (
            x.shape[..a].iter().product::<usize>(),
            x.shape[a..].iter().product::<usize>(),
            1,
        )
    })
}

/// Float storage of `dtype` (f32, f64 or f16) for values computed in f32.
pub fn float_data(dtype: crate::DType, v: Vec<f32>) -> Result<Data, OpError> {
    Ok(match dtype {
        crate::DType::F32 => Data::F32(v),
        crate::DType::F64 => Data::F64(v.iter().map(|&x| x as f64).collect()),
        crate::DType::F16 => Data::F16(v.iter().map(|&x| half::f16::from_f32(x)).collect()),
        _ => {
            return Err(OpError::DType {
                index: 0,
                expected: "float".into(),
                got: dtype.to_string(),
            })
        }
    })
}

/// Evaluates `Softmax`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let (outer, len, inner) = blocks(ctx, x)?;
    let mut v = x.to_f32_vec();
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * len + k) * inner + i;
            let mut m = f32::NEG_INFINITY;
            for k in 0..len {
                m = m.max(v[at(k)]);
            }
            let mut s = 0f32;
            for k in 0..len {
                let e = (v[at(k)] - m).exp();
                v[at(k)] = e;
                s += e;
            }
            for k in 0..len {
                v[at(k)] /= s;
            }
        }
    }
    let data = float_data(x.dtype, v)?;
    make(x.dtype, x.shape.clone(), data).map(|t| vec![t])
}

/// Gradient: `∂x = y · (g − Σ g·y)` along the softmax axis.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let x = input(gi.inputs, 0)?;
    let (outer, len, inner) = blocks(ctx, x)?;
    let y = gi.output.to_f32_vec();
    let g = gi.grad;
    let mut d = vec![0f32; y.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * len + k) * inner + i;
            let s: f64 = (0..len).map(|k| g[at(k)] as f64 * y[at(k)] as f64).sum();
            for k in 0..len {
                d[at(k)] = y[at(k)] * (g[at(k)] - s as f32);
            }
        }
    }
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if gi.need(0) {
        out[0] = Some(super::grad::tensor(&x.shape, d)?);
    }
    Ok(out)
}

/// `Softmax` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("Softmax", 1, eval)
        .backward(backward).infer(super::registry::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    /// A scalar has no axis to normalise: an error, not an index panic (found by the
    /// `model_run` fuzz target).
    #[test]
    fn scalar_input_is_an_error() {
        let n = Node::new("s", "Softmax", &["x"], &["y"]);
        let x = Tensor::from_f32(&[], vec![1.0]);
        for opset in [11, 13] {
            assert!(eval(&OpCtx { node: &n, opset }, &[Some(&x)]).is_err());
        }
    }
}
