//! Shared helper for broadcasting binary operators (not an operator itself).
//!
//! Broadcasting follows numpy (ONNX "multidirectional broadcasting"). Integer arithmetic
//! wraps like C (ONNX Runtime's behaviour) and integer division truncates toward zero.

use super::{input, make};
use crate::error::OpError;
use crate::tensor::{broadcast_shapes, Data, Tensor};
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
        broadcast_runs(a, ash, b, bsh, &out, f)
    };
    Ok((out, vals))
}

/// The general case of [`broadcast`], in runs: the output's axes are merged where both
/// operands step through them alike, then the innermost merged axis is one run in which
/// each operand is either contiguous or a single repeated element (a per-channel operand
/// `[1, C, 1, 1]` against `[N, C, H, W]` gives runs of `H·W` against one value). The same
/// `f(a[i], b[j])` per output element as an index list would give, in the same order,
/// without building one index per element.
fn broadcast_runs<T: Copy, U>(
    a: &[T],
    ash: &[usize],
    b: &[T],
    bsh: &[usize],
    out: &[usize],
    f: impl Fn(T, T) -> U,
) -> Vec<U> {
    let n: usize = out.iter().product();
    let mut vals = Vec::with_capacity(n);
    if n == 0 {
        return vals;
    }
    // Effective strides per output axis (0 where the operand is broadcast).
    let eff = |sh: &[usize]| -> Vec<usize> {
        let st = crate::tensor::strides(sh);
        let mut e = vec![0usize; out.len()];
        for i in 0..sh.len() {
            let o = out.len() - sh.len() + i;
            e[o] = if sh[i] == 1 { 0 } else { st[i] };
        }
        e
    };
    let (ea, eb) = (eff(ash), eff(bsh));
    // Merge axis i into the axis after it where both operands stay contiguous across the
    // pair (stride of i = stride of i+1 · extent of i+1, or both strides 0); extent-1
    // axes are dropped.
    let mut dims: Vec<(usize, usize, usize)> = Vec::new(); // (extent, stride a, stride b)
    for i in (0..out.len()).rev() {
        if out[i] == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if ea[i] == last.1 * last.0 && eb[i] == last.2 * last.0 => {
                last.0 *= out[i];
            }
            _ => dims.push((out[i], ea[i], eb[i])),
        }
    }
    dims.reverse(); // outermost first
    let (run, sa, sb) = dims.pop().unwrap_or((1, 0, 0));
    // Odometer over the outer merged axes.
    let mut counter = vec![0usize; dims.len()];
    let (mut ia, mut ib) = (0usize, 0usize);
    for _ in 0..n / run {
        let (ra, rb) = (&a[ia..], &b[ib..]);
        match (sa, sb) {
            (0, 0) => vals.extend((0..run).map(|_| f(ra[0], rb[0]))),
            (_, 0) => vals.extend(ra[..run].iter().map(|&x| f(x, rb[0]))),
            (0, _) => vals.extend(rb[..run].iter().map(|&y| f(ra[0], y))),
            _ => vals.extend(ra[..run].iter().zip(&rb[..run]).map(|(&x, &y)| f(x, y))),
        }
        for ax in (0..dims.len()).rev() {
            counter[ax] += 1;
            ia += dims[ax].1;
            ib += dims[ax].2;
            if counter[ax] < dims[ax].0 {
                break;
            }
            ia -= dims[ax].1 * counter[ax];
            ib -= dims[ax].2 * counter[ax];
            counter[ax] = 0;
        }
    }
    vals
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
    // One closure per operator, so each loop has a fixed operation and vectorises (with
    // the operator matched per element it did not).
    match op {
        Arith::Add => broadcast(a, ash, b, bsh, |x, y| T::apply(Arith::Add, x, y)),
        Arith::Sub => broadcast(a, ash, b, bsh, |x, y| T::apply(Arith::Sub, x, y)),
        Arith::Mul => broadcast(a, ash, b, bsh, |x, y| T::apply(Arith::Mul, x, y)),
        Arith::Div => broadcast(a, ash, b, bsh, |x, y| T::apply(Arith::Div, x, y)),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::broadcast_index;

    /// The run-wise general case gives, element for element, what the index lists give,
    /// for every pair of broadcastable shapes up to rank 4 with extents 1–3.
    #[test]
    fn broadcast_runs_equal_the_index_reference() {
        let shapes: Vec<Vec<usize>> = (0..=4usize)
            .flat_map(|r| {
                (0..3usize.pow(r as u32))
                    .map(move |k| (0..r).map(|i| 1 + (k / 3usize.pow(i as u32)) % 3).collect())
            })
            .collect();
        let mut cases = 0;
        for ash in &shapes {
            for bsh in &shapes {
                let Some(out) = broadcast_shapes(ash, bsh) else {
                    continue;
                };
                let a: Vec<i64> = (0..ash.iter().product::<usize>() as i64).collect();
                let b: Vec<i64> = (0..bsh.iter().product::<usize>() as i64)
                    .map(|v| v * 1000)
                    .collect();
                let got = broadcast_runs(&a, ash, &b, bsh, &out, |x, y| x + y);
                let ia = broadcast_index(ash, &out);
                let ib = broadcast_index(bsh, &out);
                let want: Vec<i64> = ia.iter().zip(&ib).map(|(&i, &j)| a[i] + b[j]).collect();
                assert_eq!(got, want, "{ash:?} with {bsh:?}");
                cases += 1;
            }
        }
        assert!(cases > 5000, "{cases}");
    }
}
