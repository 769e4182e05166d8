//! `BitwiseNot` (opset 18): element-wise `!x` of an integer tensor.

use super::bitwise_and::Bits;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `BitwiseNot`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let bad = || OpError::DType {
        index: 0,
        expected: "an integer type (int8..int64, uint8..uint64)".into(),
        got: x.dtype.to_string(),
    };
    if matches!(x.dtype, DType::I4 | DType::U4) {
        return Err(bad());
    }
    macro_rules! go {
        ($($v:ident),*) => {
            match &x.data {
                $(Data::$v(v) => Data::$v(v.iter().map(|&a| Bits::not(a)).collect()),)*
                _ => return Err(bad()),
            }
        };
    }
    let data = go!(I8, U8, I16, U16, I32, U32, I64, U64);
    Ok(vec![make(x.dtype, x.shape.clone(), data)?])
}

/// `BitwiseNot` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("BitwiseNot", 18, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts::ELEMENTWISE);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn inverts_every_bit_and_rejects_floats() {
        let n = Node::new("n", "BitwiseNot", &["x"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 18 };
        let x = Tensor::new(vec![3], Data::I16(vec![0, -1, 5])).unwrap();
        assert_eq!(eval(&ctx, &[Some(&x)]).unwrap()[0].data, Data::I16(vec![-1, 0, -6]));
        let u = Tensor::new(vec![1], Data::U32(vec![1])).unwrap();
        assert_eq!(eval(&ctx, &[Some(&u)]).unwrap()[0].data, Data::U32(vec![u32::MAX - 1]));
        let f = Tensor::from_f32(&[1], vec![1.0]);
        assert!(matches!(eval(&ctx, &[Some(&f)]), Err(OpError::DType { .. })));
    }
}
