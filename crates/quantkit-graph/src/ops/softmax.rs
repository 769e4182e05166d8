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

/// Evaluates `Softmax`: f32 and f64 inputs computed in f32; f16 and bfloat16 inputs in
/// their own precision ([`softmax_rounded`]).
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let (outer, len, inner) = blocks(ctx, x)?;
    match &x.data {
        Data::F16(h) => {
            let y = softmax_f16(h, outer, len, inner);
            return make(x.dtype, x.shape.clone(), Data::F16(y)).map(|t| vec![t]);
        }
        Data::U16(c) if x.dtype == crate::DType::BF16 => {
            let y = softmax_bf16(c, outer, len, inner);
            return make(x.dtype, x.shape.clone(), Data::U16(y)).map(|t| vec![t]);
        }
        _ => {}
    }
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

/// Softmax computed in the input's own precision, rounding where the ONNX reference
/// evaluator rounds (`e = exp(x − max(x)); e / sum(e)` on numpy f16 or `ml_dtypes`
/// bfloat16 arrays, the rule the node tests' expected outputs follow, and what
/// `Attention`'s spec asks when `softmax_precision` is not given: "the same precision as
/// the input"). `round` rounds an f32 to the narrow type (to nearest even); `f32_sum`
/// says how the sum is formed:
///
/// - `x − max`, `exp` and the division are each computed in f32 and rounded (for `−` and
///   `÷` that is the correctly rounded narrow result, as f32's 24 bits ≥ 2p + 2 for
///   p = 11 and 8; `exp` is f32 `exp` rounded, as numpy and `ml_dtypes` compute it);
/// - `f32_sum`: an f32 accumulator in numpy's pairwise order ([`numpy_pairwise_sum`])
///   rounded once, as numpy reduces f16 along a contiguous axis; otherwise additions in
///   axis order each rounded, as numpy reduces f16 along a strided axis and `ml_dtypes`
///   reduces bfloat16 along any axis.
///
/// Computing in f32 and rounding once is more accurate, but differs from the reference by
/// up to two f16 steps after a following MatMul (`test_attention_4d_causal_fp16_expanded`).
/// A NaN anywhere on a row makes the row NaN (numpy's `max` propagates it).
pub fn softmax_rounded(
    x: &[f32],
    (outer, len, inner): (usize, usize, usize),
    round: impl Fn(f32) -> f32,
    f32_sum: bool,
) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    let mut e = vec![0f32; len];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * len + k) * inner + i;
            let m = (0..len).map(|k| x[at(k)]).fold(f32::NEG_INFINITY, |m, v| {
                if m.is_nan() || v.is_nan() {
                    f32::NAN
                } else {
                    m.max(v)
                }
            });
            for (k, ek) in e.iter_mut().enumerate() {
                *ek = round(round(x[at(k)] - m).exp());
            }
            let s = match e.split_first() {
                None => 0.0,
                Some((&first, rest)) if f32_sum => round(first + numpy_pairwise_sum(rest)),
                Some((&first, rest)) => rest.iter().fold(first, |s, &v| round(s + v)),
            };
            for (k, &ek) in e.iter().enumerate() {
                y[at(k)] = round(ek / s);
            }
        }
    }
    y
}

/// Softmax of float16 values as the reference computes it ([`softmax_rounded`]; the sum
/// in f32 along a contiguous axis, `inner = 1`).
pub fn softmax_f16(x: &[half::f16], outer: usize, len: usize, inner: usize) -> Vec<half::f16> {
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    let round = |v: f32| half::f16::from_f32(v).to_f32();
    softmax_rounded(&xf, (outer, len, inner), round, inner == 1)
        .into_iter()
        .map(half::f16::from_f32)
        .collect()
}

/// Softmax of bfloat16 codes as the reference computes it ([`softmax_rounded`]; every
/// addition of the sum rounded).
pub fn softmax_bf16(x: &[u16], outer: usize, len: usize, inner: usize) -> Vec<u16> {
    use quantkit_core::formats::{bf16_decode, bf16_encode};
    let xf: Vec<f32> = x.iter().map(|&c| bf16_decode(c)).collect();
    let round = |v: f32| bf16_decode(bf16_encode(v));
    softmax_rounded(&xf, (outer, len, inner), round, false)
        .into_iter()
        .map(bf16_encode)
        .collect()
}

/// numpy's pairwise summation in f32 (`pairwise_sum` of `loops_utils.h`, which its f16
/// reductions run on f32 values): below 8 values one sequential chain; up to 128 values
/// eight interleaved chains combined as `((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))`, then the
/// remainder added in order; above 128, the halves (split at a multiple of 8) summed
/// recursively and added.
pub fn numpy_pairwise_sum(a: &[f32]) -> f32 {
    let n = a.len();
    if n < 8 {
        a.iter().fold(0.0, |s, &v| s + v)
    } else if n <= 128 {
        let mut r = [0f32; 8];
        r.copy_from_slice(&a[..8]);
        let body = n - n % 8;
        for chunk in a[8..body].chunks_exact(8) {
            for (rj, &v) in r.iter_mut().zip(chunk) {
                *rj += v;
            }
        }
        let s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        a[body..].iter().fold(s, |s, &v| s + v)
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        numpy_pairwise_sum(&a[..n2]) + numpy_pairwise_sum(&a[n2..])
    }
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
        .backward(backward).infer(super::registry::same_as_first).bf16_codes();

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
