//! `Shrink` (opset 9): y = x + bias for x < −lambd, x − bias for x > lambd, 0 otherwise
//! (`lambd` defaults to 0.5, `bias` to 0). Every numeric type: integer inputs are compared
//! and shifted in double precision and converted back with `Cast` semantics (truncation
//! toward zero, saturation), as the ONNX reference's `astype` does for in-range values.
//! Not declared `monotone`: a `bias` above `lambd` makes it dip just past the threshold.

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Element, Tensor};
use half::f16;

fn shrink<T: Element>(v: &[T], lambd: f64, bias: f64) -> Vec<T> {
    v.iter()
        .map(|&x| {
            let x = x.to_f64();
            T::from_f64(if x < -lambd {
                x + bias
            } else if x > lambd {
                x - bias
            } else {
                0.0
            })
        })
        .collect()
}

/// Evaluates `Shrink`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let lambd = ctx.node.attr_float("lambd", 0.5)?;
    let bias = ctx.node.attr_float("bias", 0.0)?;
    let x = input(inputs, 0)?;
    if matches!(x.dtype, DType::I4 | DType::U4) {
        return Err(OpError::DType {
            index: 0,
            expected: "a numeric type of 8 bits or more".into(),
            got: x.dtype.to_string(),
        });
    }
    let data = match &x.data {
        // f32 stays in f32, as ONNX Runtime computes it.
        Data::F32(v) => Data::F32(
            v.iter()
                .map(|&x| {
                    if x < -lambd {
                        x + bias
                    } else if x > lambd {
                        x - bias
                    } else {
                        0.0
                    }
                })
                .collect(),
        ),
        Data::F16(v) => Data::F16(shrink::<f16>(v, lambd as f64, bias as f64)),
        Data::F64(v) => Data::F64(shrink(v, lambd as f64, bias as f64)),
        Data::I8(v) => Data::I8(shrink(v, lambd as f64, bias as f64)),
        Data::U8(v) => Data::U8(shrink(v, lambd as f64, bias as f64)),
        Data::I16(v) => Data::I16(shrink(v, lambd as f64, bias as f64)),
        Data::U16(v) => Data::U16(shrink(v, lambd as f64, bias as f64)),
        Data::I32(v) => Data::I32(shrink(v, lambd as f64, bias as f64)),
        Data::U32(v) => Data::U32(shrink(v, lambd as f64, bias as f64)),
        Data::I64(v) => Data::I64(shrink(v, lambd as f64, bias as f64)),
        Data::U64(v) => Data::U64(shrink(v, lambd as f64, bias as f64)),
        Data::Bool(_) => {
            return Err(OpError::DType {
                index: 0,
                expected: "a numeric type".into(),
                got: x.dtype.to_string(),
            })
        }
    };
    Ok(vec![make(x.dtype, x.shape.clone(), data)?])
}

/// `Shrink` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Shrink", 9, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn integers_and_floats_and_bool_is_rejected() {
        let n = Node::new("s", "Shrink", &["x"], &["y"])
            .with_attr("lambd", AttrValue::Float(1.5))
            .with_attr("bias", AttrValue::Float(1.5));
        let ctx = OpCtx { node: &n, opset: 9 };
        let x = Tensor::new(vec![5], Data::I32(vec![-3, -1, 0, 1, 3])).unwrap();
        let y = eval(&ctx, &[Some(&x)]).unwrap();
        assert_eq!(y[0].data, Data::I32(vec![-1, 0, 0, 0, 1]));
        let u = Tensor::new(vec![3], Data::U8(vec![0, 2, 200])).unwrap();
        let y = eval(&ctx, &[Some(&u)]).unwrap();
        assert_eq!(y[0].data, Data::U8(vec![0, 0, 198]));
        let f = Tensor::from_f32(&[3], vec![-2.0, 0.5, 2.0]);
        let y = eval(&ctx, &[Some(&f)]).unwrap();
        assert_eq!(y[0].as_f32().unwrap(), &[-0.5, 0.0, 0.5]);
        let b = Tensor::new(vec![1], Data::Bool(vec![true])).unwrap();
        assert!(matches!(
            eval(&ctx, &[Some(&b)]),
            Err(OpError::DType { .. })
        ));
    }
}
