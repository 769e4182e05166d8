//! Shared helper for broadcasting binary operators (not an operator itself).
//!
//! Broadcasting follows numpy (ONNX "multidirectional broadcasting"). Integer arithmetic
//! wraps like C (ONNX Runtime's behaviour) and integer division truncates toward zero.

use super::{input, make};
use crate::error::OpError;
use crate::tensor::{broadcast_index, broadcast_shapes, Data, Tensor};
use half::f16;

/// The four arithmetic operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    /// a + b
    Add,
    /// a − b
    Sub,
    /// a · b
    Mul,
    /// a / b
    Div,
}

/// Arithmetic on one element type.
pub trait Num: Copy + Send + Sync {
    /// Applies the operator.
    fn apply(op: Arith, a: Self, b: Self) -> Self;
    /// Whether the value is an integer zero (division check).
    fn is_int_zero(self) -> bool;
}
macro_rules! num_int {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn apply(op: Arith, a: Self, b: Self) -> Self {
                match op {
                    Arith::Add => a.wrapping_add(b),
                    Arith::Sub => a.wrapping_sub(b),
                    Arith::Mul => a.wrapping_mul(b),
                    Arith::Div => a.wrapping_div(b),
                }
            }
            fn is_int_zero(self) -> bool { self == 0 }
        }
    )*};
}
num_int!(i8, u8, i16, u16, i32, u32, i64, u64);
macro_rules! num_float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn apply(op: Arith, a: Self, b: Self) -> Self {
                match op {
                    Arith::Add => a + b,
                    Arith::Sub => a - b,
                    Arith::Mul => a * b,
                    Arith::Div => a / b,
                }
            }
            fn is_int_zero(self) -> bool { false }
        }
    )*};
}
num_float!(f32, f64);

/// Broadcasts `f` over two shaped slices, returning the output shape and values.
pub fn broadcast<T: Copy, U>(
    a: &[T],
    ash: &[usize],
    b: &[T],
    bsh: &[usize],
    f: impl Fn(T, T) -> U,
) -> Result<(Vec<usize>, Vec<U>), OpError> {
    let out = broadcast_shapes(ash, bsh).ok_or_else(|| OpError::ShapeMismatch {
        expected: "broadcastable shapes".into(),
        got: format!("{ash:?} and {bsh:?}"),
    })?;
    let vals = if ash == bsh {
        a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
    } else if b.len() == 1 && out.as_slice() == ash {
        a.iter().map(|&x| f(x, b[0])).collect()
    } else if a.len() == 1 && out.as_slice() == bsh {
        b.iter().map(|&y| f(a[0], y)).collect()
    } else {
        let ia = broadcast_index(ash, &out);
        let ib = broadcast_index(bsh, &out);
        ia.iter().zip(&ib).map(|(&i, &j)| f(a[i], b[j])).collect()
    };
    Ok((out, vals))
}

fn typed<T: Num>(
    op: Arith,
    a: &[T],
    ash: &[usize],
    b: &[T],
    bsh: &[usize],
) -> Result<(Vec<usize>, Vec<T>), OpError> {
    if op == Arith::Div && b.iter().any(|x| x.is_int_zero()) {
        return Err(OpError::Invalid("integer division by zero".into()));
    }
    broadcast(a, ash, b, bsh, |x, y| T::apply(op, x, y))
}

/// Evaluates Add/Sub/Mul/Div on two tensors of the same dtype.
pub fn eval_arith(op: Arith, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    if a.dtype != b.dtype {
        return Err(OpError::DType {
            index: 1,
            expected: a.dtype.to_string(),
            got: b.dtype.to_string(),
        });
    }
    let (sa, sb) = (&a.shape, &b.shape);
    macro_rules! go {
        ($($v:ident),*) => {
            match (&a.data, &b.data) {
                $((Data::$v(x), Data::$v(y)) => {
                    let (s, v) = typed(op, x, sa, y, sb)?;
                    (s, Data::$v(v))
                })*
                (Data::F16(x), Data::F16(y)) => {
                    let (s, v) = broadcast(x, sa, y, sb, |p: f16, q: f16| {
                        f16::from_f32(f32::apply(op, p.to_f32(), q.to_f32()))
                    })?;
                    (s, Data::F16(v))
                }
                _ => return Err(OpError::DType { index: 0, expected: "numeric".into(), got: a.dtype.to_string() }),
            }
        };
    }
    let (shape, data) = go!(F32, F64, I8, U8, I16, U16, I32, U32, I64, U64);
    Ok(vec![make(a.dtype, shape, data)?])
}
