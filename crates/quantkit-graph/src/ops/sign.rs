//! `Sign`: element-wise −1, 0 or 1 by the sign of the input, in the input's type (opset 9;
//! 13 only added bfloat16). NaN stays NaN, as numpy's `sign`.

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};
use half::f16;

/// Evaluates `Sign`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    macro_rules! signed {
        ($v:expr) => {
            $v.iter().map(|a| a.signum()).collect()
        };
    }
    macro_rules! unsigned {
        ($v:expr) => {
            $v.iter().map(|&a| u8::from(a != 0).into()).collect()
        };
    }
    fn float<T: Copy + PartialOrd + Default>(v: &[T], one: T, minus: T) -> Vec<T> {
        let zero = T::default();
        v.iter()
            .map(|&a| {
                if a > zero {
                    one
                } else if a < zero {
                    minus
                } else if a == zero {
                    zero
                } else {
                    a // NaN
                }
            })
            .collect()
    }
    let data = match &x.data {
        Data::F32(v) => Data::F32(float(v, 1.0, -1.0)),
        Data::F64(v) => Data::F64(float(v, 1.0, -1.0)),
        Data::F16(v) => Data::F16(float(v, f16::ONE, f16::NEG_ONE)),
        Data::I8(v) => Data::I8(signed!(v)),
        Data::I16(v) => Data::I16(signed!(v)),
        Data::I32(v) => Data::I32(signed!(v)),
        Data::I64(v) => Data::I64(signed!(v)),
        Data::U8(v) => Data::U8(unsigned!(v)),
        Data::U16(v) => Data::U16(unsigned!(v)),
        Data::U32(v) => Data::U32(unsigned!(v)),
        Data::U64(v) => Data::U64(unsigned!(v)),
        Data::Bool(_) => {
            return Err(OpError::DType {
                index: 0,
                expected: "numeric".into(),
                got: x.dtype.to_string(),
            })
        }
    };
    Ok(vec![make(x.dtype, x.shape.clone(), data)?])
}

/// `Sign` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Sign", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        monotone: true,
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
