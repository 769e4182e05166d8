//! `Softmax`. Opset ≥ 13: along one `axis` (default −1). Opsets < 13: the input is coerced
//! to 2-D at `axis` (default 1) and softmax runs over the flattened inner block.

use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `Softmax`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    let (outer, len, inner) = if ctx.opset >= 13 {
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
        let a = a.clamp(0, r as i64) as usize;
        (
            x.shape[..a].iter().product::<usize>(),
            x.shape[a..].iter().product::<usize>(),
            1,
        )
    };
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
    let data = match x.dtype {
        crate::DType::F32 => Data::F32(v),
        crate::DType::F64 => Data::F64(v.iter().map(|&x| x as f64).collect()),
        crate::DType::F16 => Data::F16(v.iter().map(|&x| half::f16::from_f32(x)).collect()),
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

/// `Softmax` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("Softmax", 1, eval).infer(super::registry::same_as_first);
