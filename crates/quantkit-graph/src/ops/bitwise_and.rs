//! `BitwiseAnd` (opset 18): element-wise `a & b` of two integer tensors of the same type
//! with numpy broadcasting. [`bitwise`] also evaluates `BitwiseOr`, `BitwiseXor` and
//! `BitShift`, and [`Bits`] holds the per-type bit operations they share.

use super::binary::broadcast;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, DType, Tensor};

/// A two-input bit operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitOp {
    /// a & b
    And,
    /// a | b
    Or,
    /// a ^ b
    Xor,
    /// a << b (BitShift LEFT)
    Left,
    /// a >> b (BitShift RIGHT; arithmetic for signed types)
    Right,
}

/// Bit operations on one integer type.
pub trait Bits: Copy {
    /// Applies `op`. Shifts follow BitShift's rule: a shift amount that is negative or at
    /// least the width gives what the sign extension alone gives (−1 for a right shift of
    /// a negative value, 0 otherwise).
    fn bit(op: BitOp, a: Self, b: Self) -> Self;
    /// !a
    fn not(a: Self) -> Self;
}
macro_rules! bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            fn bit(op: BitOp, a: Self, b: Self) -> Self {
                // A shift amount in [0, width) as u32, or None.
                #[allow(unused_comparisons)]
                let amount = || {
                    (b >= 0 && (b as u128) < <$t>::BITS as u128).then(|| b as u32)
                };
                match op {
                    BitOp::And => a & b,
                    BitOp::Or => a | b,
                    BitOp::Xor => a ^ b,
                    BitOp::Left => amount().map_or(0, |s| a << s),
                    #[allow(unused_comparisons)]
                    BitOp::Right => amount().map_or(if a < 0 { !0 } else { 0 }, |s| a >> s),
                }
            }
            fn not(a: Self) -> Self {
                !a
            }
        }
    )*};
}
bits!(i8, u8, i16, u16, i32, u32, i64, u64);

fn int_dtype_error(index: usize, t: &Tensor) -> OpError {
    OpError::DType {
        index,
        expected: "an integer type (int8..int64, uint8..uint64)".into(),
        got: t.dtype.to_string(),
    }
}

/// Evaluates a two-input bit operation on integer tensors of one type, with numpy
/// broadcasting.
pub fn bitwise(op: BitOp, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    if a.dtype != b.dtype {
        return Err(OpError::DType {
            index: 1,
            expected: a.dtype.to_string(),
            got: b.dtype.to_string(),
        });
    }
    if matches!(a.dtype, DType::I4 | DType::U4) {
        return Err(int_dtype_error(0, a));
    }
    let (sa, sb) = (&a.shape, &b.shape);
    macro_rules! go {
        ($($v:ident),*) => {
            match (&a.data, &b.data) {
                $((Data::$v(x), Data::$v(y)) => {
                    let (s, v) = broadcast(x, sa, y, sb, |p, q| Bits::bit(op, p, q))?;
                    (s, Data::$v(v))
                })*
                _ => return Err(int_dtype_error(0, a)),
            }
        };
    }
    let (shape, data) = go!(I8, U8, I16, U16, I32, U32, I64, U64);
    Ok(vec![make(a.dtype, shape, data)?])
}

/// Evaluates `BitwiseAnd`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    bitwise(BitOp::And, inputs)
}

/// `BitwiseAnd` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("BitwiseAnd", 18, eval)
    .infer(super::add::infer)
    .facts(super::Facts::ELEMENTWISE);
