//! `BitShift` (opset 11): element-wise `x << y` (`direction = "LEFT"`) or `x >> y`
//! (`"RIGHT"`) with numpy broadcasting, evaluated by [`super::bitwise_and::bitwise`].
//! Opset 11 had only unsigned types; the current text (onnx 1.23) adds signed ones, with an
//! arithmetic right shift, left shifts that discard the bits past the sign bit, and a shift
//! amount that is negative or at least the width giving −1 (right shift of a negative x)
//! or 0.

use super::bitwise_and::{bitwise, BitOp};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `BitShift`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let op = match ctx.node.attr_string("direction", "")?.as_str() {
        "LEFT" => BitOp::Left,
        "RIGHT" => BitOp::Right,
        other => {
            return Err(OpError::attr(
                "direction",
                format!("expected \"LEFT\" or \"RIGHT\", got {other:?}"),
            ))
        }
    };
    bitwise(op, inputs)
}

/// `BitShift` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("BitShift", 11, eval)
    .infer(super::add::infer)
    .facts(super::Facts::ELEMENTWISE);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::tensor::Data;

    fn shift(dir: &str, x: Data, y: Data) -> Result<Vec<Tensor>, OpError> {
        let n = Node::new("b", "BitShift", &["x", "y"], &["z"])
            .with_attr("direction", AttrValue::String(dir.as_bytes().to_vec()));
        let (xl, yl) = (x.len(), y.len());
        let x = Tensor::new(vec![xl], x).unwrap();
        let y = Tensor::new(vec![yl], y).unwrap();
        eval(&OpCtx { node: &n, opset: 11 }, &[Some(&x), Some(&y)])
    }

    #[test]
    fn signed_shifts_out_of_range_amounts_and_bad_inputs() {
        let z = shift("RIGHT", Data::I8(vec![-128, -7, 7, -1, 5]), Data::I8(vec![7, 1, 1, 8, -1])).unwrap();
        assert_eq!(z[0].data, Data::I8(vec![-1, -4, 3, -1, 0]));
        let z = shift("LEFT", Data::I8(vec![64, 1, 1, 3]), Data::I8(vec![1, 7, 8, -2])).unwrap();
        assert_eq!(z[0].data, Data::I8(vec![-128, -128, 0, 0]));
        let z = shift("LEFT", Data::U64(vec![1, 1]), Data::U64(vec![63, 64])).unwrap();
        assert_eq!(z[0].data, Data::U64(vec![1 << 63, 0]));
        // Broadcasting a one-element shift.
        let z = shift("RIGHT", Data::U16(vec![16, 32]), Data::U16(vec![4])).unwrap();
        assert_eq!(z[0].data, Data::U16(vec![1, 2]));
        assert!(matches!(
            shift("UP", Data::U8(vec![1]), Data::U8(vec![1])),
            Err(OpError::Attribute { .. })
        ));
        assert!(matches!(
            shift("LEFT", Data::U8(vec![1]), Data::I8(vec![1])),
            Err(OpError::DType { .. })
        ));
        assert!(matches!(
            shift("LEFT", Data::F32(vec![1.0]), Data::F32(vec![1.0])),
            Err(OpError::DType { .. })
        ));
        assert!(matches!(
            shift("LEFT", Data::U8(vec![1, 2, 3]), Data::U8(vec![1, 2])),
            Err(OpError::ShapeMismatch { .. })
        ));
    }
}
