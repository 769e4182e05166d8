//! The tensor type shared by the graph IR, the float executor and training (`quantkit-train`):
//! a dtype tag, a shape and one typed `Vec` of row-major elements.

use half::f16;
use quantkit_core::formats::{self, E8M0Rounding, MiniFloat};

/// Element types the IR can hold.
///
/// The 4-bit and 2-bit types are stored unpacked, one value per byte (`I4`/`I2` in an `i8`
/// buffer, `U4`/`U2` in a `u8` buffer); only the ONNX boundary packs them two (four) per
/// byte. The narrow float types are stored as their codes: `BF16` as its bits in a `u16`
/// buffer, the float8 types and `F4E2M1` (one code per byte, low nibble) in a `u8` buffer;
/// [`Tensor::to_f32_vec`] and friends decode them, [`Tensor::cast_with`] encodes them
/// (conversions: `quantkit_core::formats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// IEEE binary16.
    F16,
    /// Signed 8-bit.
    I8,
    /// Unsigned 8-bit.
    U8,
    /// Signed 16-bit.
    I16,
    /// Unsigned 16-bit.
    U16,
    /// Signed 32-bit.
    I32,
    /// Unsigned 32-bit.
    U32,
    /// Signed 64-bit.
    I64,
    /// Unsigned 64-bit.
    U64,
    /// Boolean.
    Bool,
    /// Signed 4-bit in [-8, 7], stored unpacked in `i8`.
    I4,
    /// Unsigned 4-bit in [0, 15], stored unpacked in `u8`.
    U4,
    /// Signed 2-bit in [-2, 1], stored unpacked in `i8`.
    I2,
    /// Unsigned 2-bit in [0, 3], stored unpacked in `u8`.
    U2,
    /// bfloat16, stored as its bits in `u16`.
    BF16,
    /// float8 E4M3FN, stored as codes in `u8`.
    F8E4M3FN,
    /// float8 E4M3FNUZ, stored as codes in `u8`.
    F8E4M3FNUZ,
    /// float8 E5M2, stored as codes in `u8`.
    F8E5M2,
    /// float8 E5M2FNUZ, stored as codes in `u8`.
    F8E5M2FNUZ,
    /// float8 E8M0 (powers of two), stored as codes in `u8`.
    F8E8M0,
    /// float4 E2M1, stored as codes in `u8` (one per byte).
    F4E2M1,
}

impl DType {
    /// The ONNX `TensorProto.DataType` code.
    pub fn onnx_code(self) -> i32 {
        use crate::onnx::proto::data_type as d;
        match self {
            DType::F32 => d::FLOAT,
            DType::F64 => d::DOUBLE,
            DType::F16 => d::FLOAT16,
            DType::I8 => d::INT8,
            DType::U8 => d::UINT8,
            DType::I16 => d::INT16,
            DType::U16 => d::UINT16,
            DType::I32 => d::INT32,
            DType::U32 => d::UINT32,
            DType::I64 => d::INT64,
            DType::U64 => d::UINT64,
            DType::Bool => d::BOOL,
            DType::I4 => d::INT4,
            DType::U4 => d::UINT4,
            DType::I2 => d::INT2,
            DType::U2 => d::UINT2,
            DType::BF16 => d::BFLOAT16,
            DType::F8E4M3FN => d::FLOAT8E4M3FN,
            DType::F8E4M3FNUZ => d::FLOAT8E4M3FNUZ,
            DType::F8E5M2 => d::FLOAT8E5M2,
            DType::F8E5M2FNUZ => d::FLOAT8E5M2FNUZ,
            DType::F8E8M0 => d::FLOAT8E8M0,
            DType::F4E2M1 => d::FLOAT4E2M1,
        }
    }

    /// The dtype for an ONNX `TensorProto.DataType` code, if the IR supports it.
    pub fn from_onnx(code: i32) -> Option<DType> {
        use crate::onnx::proto::data_type as d;
        Some(match code {
            d::FLOAT => DType::F32,
            d::DOUBLE => DType::F64,
            d::FLOAT16 => DType::F16,
            d::INT8 => DType::I8,
            d::UINT8 => DType::U8,
            d::INT16 => DType::I16,
            d::UINT16 => DType::U16,
            d::INT32 => DType::I32,
            d::UINT32 => DType::U32,
            d::INT64 => DType::I64,
            d::UINT64 => DType::U64,
            d::BOOL => DType::Bool,
            d::INT4 => DType::I4,
            d::UINT4 => DType::U4,
            d::INT2 => DType::I2,
            d::UINT2 => DType::U2,
            d::BFLOAT16 => DType::BF16,
            d::FLOAT8E4M3FN => DType::F8E4M3FN,
            d::FLOAT8E4M3FNUZ => DType::F8E4M3FNUZ,
            d::FLOAT8E5M2 => DType::F8E5M2,
            d::FLOAT8E5M2FNUZ => DType::F8E5M2FNUZ,
            d::FLOAT8E8M0 => DType::F8E8M0,
            d::FLOAT4E2M1 => DType::F4E2M1,
            _ => return None,
        })
    }

    /// Name of an ONNX data type code, for messages (also for codes the IR lacks).
    pub fn onnx_name(code: i32) -> &'static str {
        const NAMES: [&str; 27] = [
            "undefined",
            "float",
            "uint8",
            "int8",
            "uint16",
            "int16",
            "int32",
            "int64",
            "string",
            "bool",
            "float16",
            "double",
            "uint32",
            "uint64",
            "complex64",
            "complex128",
            "bfloat16",
            "float8e4m3fn",
            "float8e4m3fnuz",
            "float8e5m2",
            "float8e5m2fnuz",
            "uint4",
            "int4",
            "float4e2m1",
            "float8e8m0",
            "uint2",
            "int2",
        ];
        usize::try_from(code)
            .ok()
            .and_then(|i| NAMES.get(i))
            .copied()
            .unwrap_or("unknown")
    }

    /// Whether this is a floating-point type the operators compute in (f32, f64, f16; the
    /// narrow float types are [`DType::is_narrow_float`]).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16)
    }

    /// Whether this is a float type stored as codes (bfloat16, float8, float4).
    pub fn is_narrow_float(self) -> bool {
        matches!(
            self,
            DType::BF16
                | DType::F8E4M3FN
                | DType::F8E4M3FNUZ
                | DType::F8E5M2
                | DType::F8E5M2FNUZ
                | DType::F8E8M0
                | DType::F4E2M1
        )
    }

    /// Whether an operator must declare that it handles this type
    /// ([`crate::ops::OpDef::narrow_types`]): the narrow floats, whose storage holds codes
    /// that generic element code would misread, and the 2-bit integers.
    pub fn is_narrow(self) -> bool {
        self.is_narrow_float() || matches!(self, DType::I2 | DType::U2)
    }

    /// The float8/float4 format of a narrow float type (not bfloat16 or E8M0).
    pub fn minifloat(self) -> Option<MiniFloat> {
        Some(match self {
            DType::F8E4M3FN => MiniFloat::F8E4M3FN,
            DType::F8E4M3FNUZ => MiniFloat::F8E4M3FNUZ,
            DType::F8E5M2 => MiniFloat::F8E5M2,
            DType::F8E5M2FNUZ => MiniFloat::F8E5M2FNUZ,
            DType::F4E2M1 => MiniFloat::F4E2M1,
            _ => return None,
        })
    }

    /// Storage size of one element in bytes (4- and 2-bit types count as one byte when
    /// unpacked).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::I16 | DType::U16 | DType::BF16 => 2,
            _ => 1,
        }
    }

    /// Size of one element on disk in bits (4 for the 4-bit types, 2 for the 2-bit ones).
    pub fn bits(self) -> usize {
        match self {
            DType::I4 | DType::U4 | DType::F4E2M1 => 4,
            DType::I2 | DType::U2 => 2,
            DType::Bool => 8,
            d => d.size_bytes() * 8,
        }
    }

    /// Integer range `[min, max]` for integer types.
    pub fn int_range(self) -> Option<(i64, i64)> {
        Some(match self {
            DType::I8 => (-128, 127),
            DType::U8 => (0, 255),
            DType::I16 => (-32768, 32767),
            DType::U16 => (0, 65535),
            DType::I32 => (i32::MIN as i64, i32::MAX as i64),
            DType::U32 => (0, u32::MAX as i64),
            DType::I64 => (i64::MIN, i64::MAX),
            DType::I4 => (-8, 7),
            DType::U4 => (0, 15),
            DType::I2 => (-2, 1),
            DType::U2 => (0, 3),
            _ => return None,
        })
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(DType::onnx_name(self.onnx_code()))
    }
}

/// Typed element storage.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum Data {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    I16(Vec<i16>),
    U16(Vec<u16>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
}

/// Applies `$body` to the `Vec` inside a [`Data`], whatever its element type.
#[macro_export]
#[doc(hidden)]
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::Data::F32($v) => $body,
            $crate::Data::F64($v) => $body,
            $crate::Data::F16($v) => $body,
            $crate::Data::I8($v) => $body,
            $crate::Data::U8($v) => $body,
            $crate::Data::I16($v) => $body,
            $crate::Data::U16($v) => $body,
            $crate::Data::I32($v) => $body,
            $crate::Data::U32($v) => $body,
            $crate::Data::I64($v) => $body,
            $crate::Data::U64($v) => $body,
            $crate::Data::Bool($v) => $body,
        }
    };
}

/// Same as [`with_data!`] but rebuilds a `Data` of the same variant from `$body`'s `Vec`.
#[macro_export]
#[doc(hidden)]
macro_rules! map_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::Data::F32($v) => $crate::Data::F32($body),
            $crate::Data::F64($v) => $crate::Data::F64($body),
            $crate::Data::F16($v) => $crate::Data::F16($body),
            $crate::Data::I8($v) => $crate::Data::I8($body),
            $crate::Data::U8($v) => $crate::Data::U8($body),
            $crate::Data::I16($v) => $crate::Data::I16($body),
            $crate::Data::U16($v) => $crate::Data::U16($body),
            $crate::Data::I32($v) => $crate::Data::I32($body),
            $crate::Data::U32($v) => $crate::Data::U32($body),
            $crate::Data::I64($v) => $crate::Data::I64($body),
            $crate::Data::U64($v) => $crate::Data::U64($body),
            $crate::Data::Bool($v) => $crate::Data::Bool($body),
        }
    };
}

impl Data {
    /// Number of elements.
    pub fn len(&self) -> usize {
        with_data!(self, v => v.len())
    }
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Empty storage for a dtype.
    pub fn empty(dtype: DType) -> Data {
        Data::zeros(dtype, 0)
    }
    /// `n` zero elements of a dtype.
    pub fn zeros(dtype: DType, n: usize) -> Data {
        match dtype {
            DType::F32 => Data::F32(vec![0.0; n]),
            DType::F64 => Data::F64(vec![0.0; n]),
            DType::F16 => Data::F16(vec![f16::ZERO; n]),
            DType::I8 | DType::I4 | DType::I2 => Data::I8(vec![0; n]),
            DType::U8
            | DType::U4
            | DType::U2
            | DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F4E2M1 => Data::U8(vec![0; n]),
            // 0x00 is 2^-127, the E8M0 code nearest zero (the format has no zero).
            DType::F8E8M0 => Data::U8(vec![0; n]),
            DType::I16 => Data::I16(vec![0; n]),
            DType::U16 | DType::BF16 => Data::U16(vec![0; n]),
            DType::I32 => Data::I32(vec![0; n]),
            DType::U32 => Data::U32(vec![0; n]),
            DType::I64 => Data::I64(vec![0; n]),
            DType::U64 => Data::U64(vec![0; n]),
            DType::Bool => Data::Bool(vec![false; n]),
        }
    }
    /// Storage dtype of the variant (`I8` for 4-bit signed data, and so on).
    pub fn storage_dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::F64(_) => DType::F64,
            Data::F16(_) => DType::F16,
            Data::I8(_) => DType::I8,
            Data::U8(_) => DType::U8,
            Data::I16(_) => DType::I16,
            Data::U16(_) => DType::U16,
            Data::I32(_) => DType::I32,
            Data::U32(_) => DType::U32,
            Data::I64(_) => DType::I64,
            Data::U64(_) => DType::U64,
            Data::Bool(_) => DType::Bool,
        }
    }
    /// Concatenates flat storages of the same variant (`None` if variants differ).
    pub fn concat(parts: &[&Data]) -> Option<Data> {
        let first = parts.first()?;
        let mut out = Data::empty(first.storage_dtype());
        macro_rules! cat {
            ($($v:ident),*) => {
                match &mut out {
                    $(Data::$v(o) => {
                        for p in parts {
                            match p {
                                Data::$v(x) => o.extend_from_slice(x),
                                _ => return None,
                            }
                        }
                    })*
                }
            };
        }
        cat!(F32, F64, F16, I8, U8, I16, U16, I32, U32, I64, U64, Bool);
        Some(out)
    }
    /// Picks `idx[i]` or, where it is `None`, the value `fill` converted to the element type.
    pub fn gather_or(&self, idx: &[Option<usize>], fill: f64) -> Data {
        fn go<T: Element>(v: &[T], idx: &[Option<usize>], fill: f64) -> Vec<T> {
            let f = T::from_f64(fill);
            idx.iter().map(|i| i.map_or(f, |i| v[i])).collect()
        }
        map_data!(self, v => go(v, idx, fill))
    }
    /// Picks the elements at `idx` (used by gather-like ops and layout changes).
    pub fn gather(&self, idx: &[usize]) -> Data {
        map_data!(self, v => idx.iter().map(|&i| v[i]).collect())
    }
}

/// Element types that can be read as `f64` and built from `f64` (with ONNX Cast semantics:
/// floats truncate toward zero when cast to integers, out-of-range values saturate).
pub trait Element: Copy + Send + Sync + 'static {
    /// Widen to f64.
    fn to_f64(self) -> f64;
    /// Narrow from f64.
    fn from_f64(x: f64) -> Self;
}
macro_rules! element_prim {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(x: f64) -> Self { x as $t }
        }
    )*};
}
element_prim!(f32, f64, i8, u8, i16, u16, i32, u32, i64, u64);
impl Element for f16 {
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
}
impl Element for bool {
    fn to_f64(self) -> f64 {
        if self {
            1.0
        } else {
            0.0
        }
    }
    fn from_f64(x: f64) -> Self {
        x != 0.0
    }
}

/// A dense, row-major tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Logical element type.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Elements; `data.len()` equals the product of `shape`.
    pub data: Data,
}

/// Error from building a tensor whose data and shape disagree.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("tensor data has {len} elements but shape {shape:?} needs {expected}")]
pub struct TensorSizeError {
    /// Elements given.
    pub len: usize,
    /// Shape requested.
    pub shape: Vec<usize>,
    /// Product of the shape.
    pub expected: usize,
}

impl Tensor {
    /// Builds a tensor, checking that the data fills the shape. The dtype is the storage
    /// dtype of `data`; use [`Tensor::with_dtype`] for the 4-bit types.
    pub fn new(shape: Vec<usize>, data: Data) -> Result<Tensor, TensorSizeError> {
        let expected = shape.iter().product::<usize>();
        if expected != data.len() {
            return Err(TensorSizeError {
                len: data.len(),
                shape,
                expected,
            });
        }
        Ok(Tensor {
            dtype: data.storage_dtype(),
            shape,
            data,
        })
    }
    /// Re-tags the logical dtype (only between a dtype and its storage: I4↔I8, U4↔U8,
    /// BF16↔U16, a float8 type↔U8...).
    pub fn with_dtype(mut self, dtype: DType) -> Tensor {
        debug_assert_eq!(
            Data::empty(dtype).storage_dtype(),
            self.data.storage_dtype()
        );
        self.dtype = dtype;
        self
    }
    /// An f32 tensor. Panics if the length does not fill the shape (a programming error).
    pub fn from_f32(shape: &[usize], data: Vec<f32>) -> Tensor {
        Tensor::new(shape.to_vec(), Data::F32(data)).expect("data length matches shape")
    }
    /// An i64 tensor. Panics if the length does not fill the shape (a programming error).
    pub fn from_i64(shape: &[usize], data: Vec<i64>) -> Tensor {
        Tensor::new(shape.to_vec(), Data::I64(data)).expect("data length matches shape")
    }
    /// A zero-filled tensor.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Data::zeros(dtype, shape.iter().product()),
        }
    }
    /// A rank-0 f32 tensor.
    pub fn scalar_f32(x: f32) -> Tensor {
        Tensor::from_f32(&[], vec![x])
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }
    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// Rows `r` of the first axis (samples `r` of a batch). `r` must lie within
    /// `shape[0]`.
    pub fn slice_rows(&self, r: std::ops::Range<usize>) -> Tensor {
        let per = self.len() / self.shape.first().copied().unwrap_or(1).max(1);
        let (a, b) = (r.start * per, r.end * per);
        let mut shape = self.shape.clone();
        shape[0] = r.len();
        Tensor {
            dtype: self.dtype,
            shape,
            data: crate::map_data!(&self.data, v => v[a..b].to_vec()),
        }
    }
    /// `parts` joined along the first axis (the inverse of [`Tensor::slice_rows`]); `None`
    /// when there are none or they differ in element type or in the other axes.
    pub fn stack_rows(parts: &[&Tensor]) -> Option<Tensor> {
        let t0 = parts.first()?;
        let fits = parts.iter().all(|t| {
            !t.shape.is_empty()
                && t.shape[1..] == t0.shape[1..]
                && t.dtype == t0.dtype
                && t.data.len() == t.len()
        });
        if !fits {
            return None;
        }
        let data = Data::concat(&parts.iter().map(|t| &t.data).collect::<Vec<_>>())?;
        let mut shape = t0.shape.clone();
        shape[0] = parts.iter().map(|t| t.shape[0]).sum();
        Some(Tensor {
            dtype: t0.dtype,
            shape,
            data,
        })
    }
    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// The f32 elements, if this is an f32 tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }
    /// The i64 elements, if this is an i64 tensor.
    pub fn as_i64(&self) -> Option<&[i64]> {
        match &self.data {
            Data::I64(v) => Some(v),
            _ => None,
        }
    }
    /// The values of a narrow float tensor (bfloat16, float8, float4) decoded from its
    /// codes (exactly: each is an f32); `None` for other types.
    pub fn decode_narrow_float(&self) -> Option<Vec<f32>> {
        if !self.dtype.is_narrow_float() {
            return None;
        }
        Some(match (&self.data, self.dtype) {
            (Data::U16(v), DType::BF16) => v.iter().map(|&b| formats::bf16_decode(b)).collect(),
            (Data::U8(v), DType::F8E8M0) => v.iter().map(|&c| formats::e8m0_decode(c)).collect(),
            (Data::U8(v), d) => {
                let f = d.minifloat()?;
                v.iter().map(|&c| f.decode(c)).collect()
            }
            _ => return None,
        })
    }
    /// All elements converted to f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        if let Some(v) = self.decode_narrow_float() {
            return v.into_iter().map(f64::from).collect();
        }
        with_data!(&self.data, v => v.iter().map(|x| Element::to_f64(*x)).collect())
    }
    /// All elements converted to f32.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        if let Some(v) = self.decode_narrow_float() {
            return v;
        }
        match &self.data {
            Data::F32(v) => v.clone(),
            d => with_data!(d, v => v.iter().map(|x| Element::to_f64(*x) as f32).collect()),
        }
    }
    /// All elements as i64 (floats truncate toward zero).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        if let Some(v) = self.decode_narrow_float() {
            return v.into_iter().map(|x| x as i64).collect();
        }
        match &self.data {
            Data::I64(v) => v.clone(),
            Data::U64(v) => v.iter().map(|&x| x as i64).collect(),
            d => with_data!(d, v => v.iter().map(|x| Element::to_f64(*x) as i64).collect()),
        }
    }
    /// Converts to another dtype with ONNX `Cast` semantics and the default options
    /// (`saturate = 1`, E8M0 `round_mode = up`); see [`Tensor::cast_with`].
    pub fn cast(&self, to: DType) -> Tensor {
        self.cast_with(to, CastOptions::default())
    }
    /// Converts to another dtype with ONNX `Cast` semantics:
    ///
    /// - float → int truncates toward zero and saturates (out of range is undefined in the
    ///   spec); int → int wraps as in C for 64-bit sources and goes through f64 otherwise,
    ///   which is exact for every type up to 32 bits;
    /// - to int4/uint4/int2/uint2, the value (a float truncated toward zero, NaN and ±∞
    ///   giving 0) keeps its low 4 or 2 bits, as the spec's "discard higher bits" and the
    ///   reference (`ml_dtypes`) do: `Cast(float → int4)` of 9 is −7;
    /// - from a narrow float type, the exact decoded value; to one, the value rounded to
    ///   f32 first, then encoded as `quantkit_core::formats` defines (`saturate` for float8
    ///   and E8M0, `round_mode` for E8M0).
    pub fn cast_with(&self, to: DType, opts: CastOptions) -> Tensor {
        if to == self.dtype {
            return self.clone();
        }
        if let Some(v) = self.decode_narrow_float() {
            return Tensor {
                dtype: DType::F32,
                shape: self.shape.clone(),
                data: Data::F32(v),
            }
            .cast_with(to, opts);
        }
        let data = if to.is_narrow_float() {
            let x: Vec<f32> = match &self.data {
                Data::F32(v) => v.clone(),
                // f64 (and integers) round to f32 first, as ml_dtypes does.
                d => with_data!(d, v => v.iter().map(|x| Element::to_f64(*x) as f32).collect()),
            };
            encode_narrow_float(&x, to, opts)
        } else if let (Some(bits), Some((lo, _))) = (narrow_int_bits(to), to.int_range()) {
            let wide: Vec<i64> = match &self.data {
                Data::F32(v) => v
                    .iter()
                    .map(|&x| formats::float_to_int_for_wrap(f64::from(x)))
                    .collect(),
                Data::F64(v) => v
                    .iter()
                    .map(|&x| formats::float_to_int_for_wrap(x))
                    .collect(),
                Data::F16(v) => v
                    .iter()
                    .map(|&x| formats::float_to_int_for_wrap(x.to_f64()))
                    .collect(),
                _ => self.to_i64_vec(),
            };
            let signed = lo < 0;
            let w = wide.into_iter().map(|v| formats::wrap_int(v, bits, signed));
            if signed {
                Data::I8(w.map(|v| v as i8).collect())
            } else {
                Data::U8(w.map(|v| v as u8).collect())
            }
        } else {
            match (&self.data, to) {
                (Data::I64(v), DType::U64) => Data::U64(v.iter().map(|&x| x as u64).collect()),
                (Data::U64(v), DType::I64) => Data::I64(v.iter().map(|&x| x as i64).collect()),
                (Data::I64(v), DType::I32) => Data::I32(v.iter().map(|&x| x as i32).collect()),
                (d, to) => with_data!(d, src => cast_from(src, to)),
            }
        };
        Tensor {
            dtype: to,
            shape: self.shape.clone(),
            data,
        }
    }
    /// Same data, new shape (the element count must match).
    pub fn reshaped(self, shape: Vec<usize>) -> Result<Tensor, TensorSizeError> {
        let expected: usize = shape.iter().product();
        if expected != self.len() {
            return Err(TensorSizeError {
                len: self.len(),
                shape,
                expected,
            });
        }
        Ok(Tensor { shape, ..self })
    }
    /// Approximate parameter bytes as stored on disk (4-bit types count half a byte).
    pub fn nbytes(&self) -> usize {
        (self.len() * self.dtype.bits()).div_ceil(8)
    }
}

/// Options of a conversion to a narrow float type (`Cast`'s `saturate` and `round_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CastOptions {
    /// Out-of-range values and ±∞ saturate to ±max (float8, E8M0); otherwise NaN or ±∞.
    pub saturate: bool,
    /// Rounding to E8M0.
    pub round_mode: E8M0Rounding,
}

impl Default for CastOptions {
    fn default() -> Self {
        CastOptions {
            saturate: true,
            round_mode: E8M0Rounding::Up,
        }
    }
}

/// Width of the sub-byte integer types (whose casts wrap), `None` for the others.
fn narrow_int_bits(d: DType) -> Option<u32> {
    match d {
        DType::I4 | DType::U4 => Some(4),
        DType::I2 | DType::U2 => Some(2),
        _ => None,
    }
}

/// f32 values converted to `to`: the codes of a narrow float type, or a plain cast.
fn encode_narrow_float(x: &[f32], to: DType, opts: CastOptions) -> Data {
    match (to, to.minifloat()) {
        (DType::BF16, _) => Data::U16(x.iter().map(|&v| formats::bf16_encode(v)).collect()),
        (DType::F8E8M0, _) => Data::U8(
            x.iter()
                .map(|&v| formats::e8m0_encode(v, opts.saturate, opts.round_mode))
                .collect(),
        ),
        (_, Some(f)) => Data::U8(x.iter().map(|&v| f.encode(v, opts.saturate)).collect()),
        (to, None) => cast_from(x, to),
    }
}

fn cast_from<T: Element>(src: &[T], to: DType) -> Data {
    fn conv<T: Element, U: Element>(src: &[T]) -> Vec<U> {
        src.iter().map(|x| U::from_f64(x.to_f64())).collect()
    }
    match to {
        DType::F32 => Data::F32(conv(src)),
        DType::F64 => Data::F64(conv(src)),
        DType::F16 => Data::F16(conv(src)),
        DType::I8 | DType::I4 | DType::I2 => Data::I8(conv(src)),
        DType::U8 | DType::U4 | DType::U2 => Data::U8(conv(src)),
        DType::I16 => Data::I16(conv(src)),
        DType::U16 => Data::U16(conv(src)),
        // `Tensor::cast_with` encodes these itself; this arm keeps the function total.
        DType::BF16
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1 => encode_narrow_float(&conv::<T, f32>(src), to, CastOptions::default()),
        DType::I32 => Data::I32(conv(src)),
        DType::U32 => Data::U32(conv(src)),
        DType::I64 => Data::I64(conv(src)),
        DType::U64 => Data::U64(conv(src)),
        DType::Bool => Data::Bool(conv(src)),
    }
}

/// Row-major strides of a shape, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Numpy-style broadcast of two shapes, `None` if they are incompatible.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// For each element of `out_shape`, the flat index into a tensor of `shape` broadcast to it.
pub fn broadcast_index(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let n: usize = out_shape.iter().product();
    let r = out_shape.len();
    let st = strides(shape);
    // Effective stride per output axis: 0 where broadcast.
    let mut eff = vec![0usize; r];
    for i in 0..shape.len() {
        let o = r - shape.len() + i;
        eff[o] = if shape[i] == 1 { 0 } else { st[i] };
    }
    let mut idx = Vec::with_capacity(n);
    if n == 0 {
        return idx;
    }
    let mut counter = vec![0usize; r];
    let mut cur = 0usize;
    for _ in 0..n {
        idx.push(cur);
        for ax in (0..r).rev() {
            counter[ax] += 1;
            cur += eff[ax];
            if counter[ax] < out_shape[ax] {
                break;
            }
            cur -= eff[ax] * counter[ax];
            counter[ax] = 0;
        }
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_slice_and_stack_back() {
        let t = Tensor::from_f32(&[5, 2], (0..10).map(|v| v as f32).collect());
        let parts = [t.slice_rows(0..2), t.slice_rows(2..3), t.slice_rows(3..5)];
        assert_eq!(parts[1].shape, vec![1, 2]);
        assert_eq!(parts[1].as_f32().unwrap(), &[4., 5.]);
        let back = Tensor::stack_rows(&parts.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(back, t);
        // Other axes or element types that differ do not stack.
        let other = Tensor::from_f32(&[1, 3], vec![0.; 3]);
        assert!(Tensor::stack_rows(&[&parts[0], &other]).is_none());
        let ints = Tensor::new(vec![1, 2], Data::I32(vec![0, 1])).unwrap();
        assert!(Tensor::stack_rows(&[&parts[0], &ints]).is_none());
        assert!(Tensor::stack_rows(&[]).is_none());
    }
}
