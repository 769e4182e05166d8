//! Shared helpers of the indexing and shape operators (Tile, GatherND, ScatterElements,
//! TopK...; not an operator itself): checked output sizes, index inputs, negative indices,
//! separable index maps and the scatter reductions.
//!
//! Every output size is computed with checked arithmetic and capped at
//! [`max_elements()`] before anything is allocated, so
//! a hostile shape or repeat count is an error, not an allocation abort.

use super::max_elements;
use crate::error::OpError;
use crate::tensor::{Data, Tensor};
use half::f16;

/// Number of elements of `shape`, or an error when it overflows or exceeds
/// [`max_elements()`] (`what` names the operator in the message).
pub fn numel(shape: &[usize], what: &str) -> Result<usize, OpError> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| {
            n.checked_mul(d).filter(|&n| n <= max_elements())
        })
        .ok_or_else(|| {
            OpError::Invalid(format!(
                "{what}: output shape {shape:?} has more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)",
                max_elements = max_elements()
            ))
        })
}

/// The values of an integer index input (int32 or int64 only, as the specs' `Tind`).
pub fn indices_of(t: &Tensor, index: usize) -> Result<Vec<i64>, OpError> {
    match &t.data {
        Data::I64(v) => Ok(v.clone()),
        Data::I32(v) => Ok(v.iter().map(|&x| x as i64).collect()),
        _ => Err(OpError::DType {
            index,
            expected: "int32 or int64".into(),
            got: t.dtype.to_string(),
        }),
    }
}

/// The single value of a scalar or one-element integer input (TopK's `K`, Trilu's `k`,
/// CumProd's axis).
pub fn scalar_of(t: &Tensor, index: usize) -> Result<i64, OpError> {
    match (t.len(), &t.data) {
        (1, Data::I64(v)) => Ok(v[0]),
        (1, Data::I32(v)) => Ok(v[0] as i64),
        (1, _) => Err(OpError::DType {
            index,
            expected: "int32 or int64".into(),
            got: t.dtype.to_string(),
        }),
        _ => Err(OpError::shape(
            format!("a one-element tensor at input {index}"),
            &t.shape,
        )),
    }
}

/// Index `i` into an axis of size `dim`, negative counting from the end; outside
/// `[-dim, dim)` is an error.
pub fn norm_index(i: i64, dim: usize) -> Result<usize, OpError> {
    let d = dim as i64;
    let j = if i < 0 { i + d } else { i };
    if j < 0 || j >= d {
        return Err(OpError::Invalid(format!(
            "index {i} out of range for an axis of size {dim}"
        )));
    }
    Ok(j as usize)
}

/// Flat source indices of an output whose coordinates map to the source one axis at a
/// time: `tables[d][o]` is what output coordinate `o` of axis `d` adds to the flat source
/// index (`None`: the element is padding). The output shape is the tables' lengths; the
/// work is linear in the output size (each prefix product is at most the total).
pub fn separable(tables: &[Vec<Option<usize>>]) -> Vec<Option<usize>> {
    let mut idx: Vec<Option<usize>> = vec![Some(0)];
    for t in tables {
        let mut next = Vec::with_capacity(idx.len() * t.len());
        for &base in &idx {
            next.extend(t.iter().map(|&off| Some(base? + off?)));
        }
        idx = next;
    }
    idx
}

/// How a scatter combines an update with the value already there (`reduction`, opset 16:
/// none/add/mul; 18: max/min).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// The update replaces the value (with duplicate indices the last one wins).
    None,
    /// Sum.
    Add,
    /// Product.
    Mul,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

impl Reduction {
    /// Reads the `reduction` attribute, checking it exists at `opset`.
    pub fn parse(node: &crate::ir::Node, opset: i64) -> Result<Reduction, OpError> {
        let s = node.attr_string("reduction", "none")?;
        let (r, since) = match s.as_str() {
            "none" => (Reduction::None, 0),
            "add" => (Reduction::Add, 16),
            "mul" => (Reduction::Mul, 16),
            "max" => (Reduction::Max, 18),
            "min" => (Reduction::Min, 18),
            _ => return Err(OpError::attr("reduction", format!("unknown value {s:?}"))),
        };
        if opset < since {
            return Err(OpError::attr(
                "reduction",
                format!("{s:?} needs opset {since}, the model imports {opset}"),
            ));
        }
        Ok(r)
    }
}

/// Element types a scatter can reduce: integers wrap, f16 computes in f32 and rounds once,
/// bool adds as `or` and multiplies as `and` (numpy's rules, which the ONNX reference uses).
pub trait Reduce: Copy {
    /// `a ⊕ b` for the reduction.
    fn reduce(r: Reduction, a: Self, b: Self) -> Self;
}
macro_rules! reduce_int {
    ($($t:ty),*) => {$(
        impl Reduce for $t {
            fn reduce(r: Reduction, a: Self, b: Self) -> Self {
                match r {
                    Reduction::None => b,
                    Reduction::Add => a.wrapping_add(b),
                    Reduction::Mul => a.wrapping_mul(b),
                    Reduction::Max => a.max(b),
                    Reduction::Min => a.min(b),
                }
            }
        }
    )*};
}
reduce_int!(i8, u8, i16, u16, i32, u32, i64, u64);
macro_rules! reduce_float {
    ($($t:ty),*) => {$(
        impl Reduce for $t {
            fn reduce(r: Reduction, a: Self, b: Self) -> Self {
                match r {
                    Reduction::None => b,
                    Reduction::Add => a + b,
                    Reduction::Mul => a * b,
                    // NaN propagates, as numpy's maximum/minimum.
                    Reduction::Max => if a.is_nan() || b.is_nan() { a + b } else { a.max(b) },
                    Reduction::Min => if a.is_nan() || b.is_nan() { a + b } else { a.min(b) },
                }
            }
        }
    )*};
}
reduce_float!(f32, f64);
impl Reduce for f16 {
    fn reduce(r: Reduction, a: Self, b: Self) -> Self {
        f16::from_f32(f32::reduce(r, a.to_f32(), b.to_f32()))
    }
}
impl Reduce for bool {
    fn reduce(r: Reduction, a: Self, b: Self) -> Self {
        match r {
            Reduction::None => b,
            Reduction::Add | Reduction::Max => a || b,
            Reduction::Mul | Reduction::Min => a && b,
        }
    }
}

/// Scatters `updates` into a copy of `data`: `updates[u]` goes to flat position `dst[u]`,
/// combined by `r`, in update order. `data` and `updates` must have the same storage type.
pub fn scatter(data: &Data, dst: &[usize], updates: &Data, r: Reduction) -> Option<Data> {
    fn go<T: Reduce>(v: &[T], dst: &[usize], u: &[T], r: Reduction) -> Vec<T> {
        let mut out = v.to_vec();
        for (&d, &x) in dst.iter().zip(u) {
            out[d] = T::reduce(r, out[d], x);
        }
        out
    }
    macro_rules! each {
        ($($v:ident),*) => {
            match (data, updates) {
                $((Data::$v(a), Data::$v(b)) => Some(Data::$v(go(a, dst, b, r))),)*
                _ => None,
            }
        };
    }
    each!(F32, F64, F16, I8, U8, I16, U16, I32, U32, I64, U64, Bool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_indices_and_maps() {
        assert_eq!(numel(&[2, 3], "t").unwrap(), 6);
        assert!(numel(&[usize::MAX, 2], "t").is_err());
        assert!(numel(&[1 << 20, 1 << 20], "t").is_err());
        assert_eq!(norm_index(-1, 3).unwrap(), 2);
        assert!(norm_index(3, 3).is_err());
        assert!(norm_index(-4, 3).is_err());
        assert!(norm_index(0, 0).is_err());
        let m = separable(&[vec![Some(0), Some(10)], vec![None, Some(1), Some(2)]]);
        assert_eq!(
            m,
            [None, Some(1), Some(2), None, Some(11), Some(12)].to_vec()
        );
        assert!(separable(&[vec![Some(0)], vec![]]).is_empty());
    }

    #[test]
    fn reductions_per_type() {
        assert_eq!(i8::reduce(Reduction::Add, 127, 1), -128);
        assert_eq!(f32::reduce(Reduction::Max, 1.0, 2.0), 2.0);
        assert!(f32::reduce(Reduction::Min, f32::NAN, 2.0).is_nan());
        assert!(bool::reduce(Reduction::Add, false, true));
        assert!(!bool::reduce(Reduction::Mul, false, true));
        let d = scatter(
            &Data::F32(vec![1.0, 2.0]),
            &[1, 1],
            &Data::F32(vec![3.0, 4.0]),
            Reduction::Mul,
        );
        assert_eq!(d, Some(Data::F32(vec![1.0, 24.0])));
        assert_eq!(
            scatter(
                &Data::F32(vec![1.0]),
                &[0],
                &Data::I64(vec![1]),
                Reduction::None
            ),
            None
        );
    }
}
