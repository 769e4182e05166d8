//! `Mod`: element-wise remainder with numpy broadcasting (opset 10; 13 only added
//! bfloat16). The file is `modulo.rs` because `mod.rs` is the operator directory's own
//! module. `fmod = 0` (the default) takes the sign of the divisor, as Python's `%` and
//! numpy's `mod`; `fmod = 1` takes the sign of the dividend, as C's `fmod`. Integer
//! division by zero is an error; float16 is computed in f32.

use super::binary::broadcast;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};
use half::f16;

/// Remainder on one element type.
trait Rem: Copy {
    /// `a mod b` (`fmod`: sign of `a`, otherwise sign of `b`).
    fn rem(a: Self, b: Self, fmod: bool) -> Self;
    /// Whether this is an integer zero.
    fn int_zero(self) -> bool;
}
macro_rules! rem_int {
    ($($t:ty),*) => {$(
        impl Rem for $t {
            #[allow(unused_comparisons)]
            fn rem(a: Self, b: Self, fmod: bool) -> Self {
                let r = a.wrapping_rem(b);
                if !fmod && r != 0 && ((r < 0) != (b < 0)) { r.wrapping_add(b) } else { r }
            }
            fn int_zero(self) -> bool { self == 0 }
        }
    )*};
}
rem_int!(i8, u8, i16, u16, i32, u32, i64, u64);
macro_rules! rem_float {
    ($($t:ty),*) => {$(
        impl Rem for $t {
            fn rem(a: Self, b: Self, fmod: bool) -> Self {
                let r = a % b;
                if !fmod && r != 0.0 && ((r < 0.0) != (b < 0.0)) { r + b } else { r }
            }
            fn int_zero(self) -> bool { false }
        }
    )*};
}
rem_float!(f32, f64);

fn typed<T: Rem>(
    x: &[T],
    sa: &[usize],
    y: &[T],
    sb: &[usize],
    fmod: bool,
) -> Result<(Vec<usize>, Vec<T>), OpError> {
    if y.iter().any(|v| v.int_zero()) {
        return Err(OpError::Invalid("integer modulo by zero".into()));
    }
    broadcast(x, sa, y, sb, |p, q| T::rem(p, q, fmod))
}

/// Evaluates `Mod`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let fmod = match ctx.node.attr_int("fmod", 0)? {
        0 => false,
        1 => true,
        v => return Err(OpError::attr("fmod", format!("expected 0 or 1, got {v}"))),
    };
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
                    let (s, v) = typed(x, sa, y, sb, fmod)?;
                    (s, Data::$v(v))
                })*
                (Data::F16(x), Data::F16(y)) => {
                    let (s, v) = broadcast(x, sa, y, sb, |p: f16, q: f16| {
                        f16::from_f32(f32::rem(p.to_f32(), q.to_f32(), fmod))
                    })?;
                    (s, Data::F16(v))
                }
                _ => {
                    return Err(OpError::DType {
                        index: 0,
                        expected: "numeric".into(),
                        got: a.dtype.to_string(),
                    })
                }
            }
        };
    }
    let (shape, data) = go!(F32, F64, I8, U8, I16, U16, I32, U32, I64, U64);
    Ok(vec![make(a.dtype, shape, data)?])
}

/// Static shape rule: the type of input 0, the broadcast shape.
pub fn infer(_ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (a, b) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(a.0, crate::tensor::broadcast_shapes(&a.1, &b.1)?)])
}

/// `Mod` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Mod", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn follows_the_divisor_sign_and_rejects_bad_operands() {
        let node = Node::new("m", "Mod", &["a", "b"], &["y"]);
        let ctx = OpCtx {
            node: &node,
            opset: 21,
        };
        let a = Tensor::from_i64(&[2], vec![-7, 7]);
        let b = Tensor::from_i64(&[1], vec![3]);
        let y = eval(&ctx, &[Some(&a), Some(&b)]).unwrap().remove(0);
        assert_eq!(y.data, Data::I64(vec![2, 1]));
        let z = Tensor::from_i64(&[1], vec![0]);
        assert!(matches!(
            eval(&ctx, &[Some(&a), Some(&z)]),
            Err(OpError::Invalid(_))
        ));
        let f = Tensor::from_f32(&[1], vec![3.0]);
        assert!(matches!(
            eval(&ctx, &[Some(&a), Some(&f)]),
            Err(OpError::DType { index: 1, .. })
        ));
        let c = Tensor::from_i64(&[3], vec![1, 2, 3]);
        assert!(matches!(
            eval(&ctx, &[Some(&a), Some(&c)]),
            Err(OpError::ShapeMismatch { .. })
        ));
    }
}
