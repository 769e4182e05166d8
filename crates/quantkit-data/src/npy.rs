//! A small strict reader and writer for NumPy's `.npy` and `.npz` files.
//!
//! Format: <https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html>.
//! A `.npy` file is the magic `\x93NUMPY`, a version (1.0, 2.0 or 3.0), a header length
//! (u16 for 1.0, u32 otherwise, little-endian), a Python dict literal
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }` and the raw elements.
//! An `.npz` file is a zip archive of `.npy` files (`np.savez` / `np.savez_compressed`).
//!
//! Strict means: exactly the three header keys, a known version, a known dtype, data exactly
//! as long as the header says (a truncated file and trailing bytes are both errors), and
//! bool bytes that are 0 or 1. Supported dtypes: bool, u8, i8, u16, i16, u32, i32, u64, i64,
//! f16, f32, f64, little- or big-endian. Fortran-ordered arrays are transposed into C order
//! on reading. Object, complex, string, datetime and structured dtypes are refused with
//! [`DataError::UnsupportedDtype`].
//!
//! Writing always produces little-endian C-order version 1.0 files (2.0 when the header
//! does not fit 64 KiB), atomically (temporary file in the same folder, then rename).
//!
//! ```
//! use quantkit_data::npy::{read_npy, write_npy, NpyArray, NpyData};
//! let dir = std::env::temp_dir().join(format!("qk-npy-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("x.npy");
//! let a = NpyArray::new(vec![2, 3], NpyData::F32(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0])).unwrap();
//! write_npy(&path, &a).unwrap();
//! let b = read_npy(&path).unwrap();
//! assert_eq!(a, b);
//! assert_eq!(b.data.to_f32()[5], 5.0);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use half::f16;

use crate::error::{DataError, Result};
use crate::fsutil::{read_all, write_atomic};

const MAGIC: &[u8; 6] = b"\x93NUMPY";
const SUPPORTED: &str =
    "supported: bool, u8, i8, u16, i16, u32, i32, u64, i64, f16, f32, f64 (any byte order)";

/// Element type of an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// `bool` (`b1`), one byte 0 or 1.
    Bool,
    /// `uint8` (`u1`).
    U8,
    /// `int8` (`i1`).
    I8,
    /// `uint16` (`u2`).
    U16,
    /// `int16` (`i2`).
    I16,
    /// `uint32` (`u4`).
    U32,
    /// `int32` (`i4`).
    I32,
    /// `uint64` (`u8`).
    U64,
    /// `int64` (`i8`).
    I64,
    /// `float16` (`f2`), IEEE 754 binary16.
    F16,
    /// `float32` (`f4`).
    F32,
    /// `float64` (`f8`).
    F64,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// NumPy's type code without byte order (`"f4"`, `"u1"`, `"b1"`...).
    pub fn code(self) -> &'static str {
        match self {
            DType::Bool => "b1",
            DType::U8 => "u1",
            DType::I8 => "i1",
            DType::U16 => "u2",
            DType::I16 => "i2",
            DType::U32 => "u4",
            DType::I32 => "i4",
            DType::U64 => "u8",
            DType::I64 => "i8",
            DType::F16 => "f2",
            DType::F32 => "f4",
            DType::F64 => "f8",
        }
    }

    /// An empty vector of this type.
    pub fn empty(self) -> NpyData {
        match self {
            DType::Bool => NpyData::Bool(Vec::new()),
            DType::U8 => NpyData::U8(Vec::new()),
            DType::I8 => NpyData::I8(Vec::new()),
            DType::U16 => NpyData::U16(Vec::new()),
            DType::I16 => NpyData::I16(Vec::new()),
            DType::U32 => NpyData::U32(Vec::new()),
            DType::I32 => NpyData::I32(Vec::new()),
            DType::U64 => NpyData::U64(Vec::new()),
            DType::I64 => NpyData::I64(Vec::new()),
            DType::F16 => NpyData::F16(Vec::new()),
            DType::F32 => NpyData::F32(Vec::new()),
            DType::F64 => NpyData::F64(Vec::new()),
        }
    }

    fn from_code(code: &str) -> Option<DType> {
        Some(match code {
            "b1" => DType::Bool,
            "u1" => DType::U8,
            "i1" => DType::I8,
            "u2" => DType::U16,
            "i2" => DType::I16,
            "u4" => DType::U32,
            "i4" => DType::I32,
            "u8" => DType::U64,
            "i8" => DType::I64,
            "f2" => DType::F16,
            "f4" => DType::F32,
            "f8" => DType::F64,
            _ => return None,
        })
    }
}

/// The elements of an array, one typed vector per dtype, in C (row-major) order.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    /// bool
    Bool(Vec<bool>),
    /// uint8
    U8(Vec<u8>),
    /// int8
    I8(Vec<i8>),
    /// uint16
    U16(Vec<u16>),
    /// int16
    I16(Vec<i16>),
    /// uint32
    U32(Vec<u32>),
    /// int32
    I32(Vec<i32>),
    /// uint64
    U64(Vec<u64>),
    /// int64
    I64(Vec<i64>),
    /// float16
    F16(Vec<f16>),
    /// float32
    F32(Vec<f32>),
    /// float64
    F64(Vec<f64>),
}

macro_rules! each_variant {
    ($self:expr, $v:ident => $body:expr) => {
        match $self {
            NpyData::Bool($v) => $body,
            NpyData::U8($v) => $body,
            NpyData::I8($v) => $body,
            NpyData::U16($v) => $body,
            NpyData::I16($v) => $body,
            NpyData::U32($v) => $body,
            NpyData::I32($v) => $body,
            NpyData::U64($v) => $body,
            NpyData::I64($v) => $body,
            NpyData::F16($v) => $body,
            NpyData::F32($v) => $body,
            NpyData::F64($v) => $body,
        }
    };
}

impl NpyData {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            NpyData::Bool(_) => DType::Bool,
            NpyData::U8(_) => DType::U8,
            NpyData::I8(_) => DType::I8,
            NpyData::U16(_) => DType::U16,
            NpyData::I16(_) => DType::I16,
            NpyData::U32(_) => DType::U32,
            NpyData::I32(_) => DType::I32,
            NpyData::U64(_) => DType::U64,
            NpyData::I64(_) => DType::I64,
            NpyData::F16(_) => DType::F16,
            NpyData::F32(_) => DType::F32,
            NpyData::F64(_) => DType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each_variant!(self, v => v.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `other`'s elements; both must have the same dtype.
    pub fn append(&mut self, other: NpyData) -> Result<()> {
        match (self, other) {
            (NpyData::Bool(a), NpyData::Bool(b)) => a.extend(b),
            (NpyData::U8(a), NpyData::U8(b)) => a.extend(b),
            (NpyData::I8(a), NpyData::I8(b)) => a.extend(b),
            (NpyData::U16(a), NpyData::U16(b)) => a.extend(b),
            (NpyData::I16(a), NpyData::I16(b)) => a.extend(b),
            (NpyData::U32(a), NpyData::U32(b)) => a.extend(b),
            (NpyData::I32(a), NpyData::I32(b)) => a.extend(b),
            (NpyData::U64(a), NpyData::U64(b)) => a.extend(b),
            (NpyData::I64(a), NpyData::I64(b)) => a.extend(b),
            (NpyData::F16(a), NpyData::F16(b)) => a.extend(b),
            (NpyData::F32(a), NpyData::F32(b)) => a.extend(b),
            (NpyData::F64(a), NpyData::F64(b)) => a.extend(b),
            (a, b) => {
                return Err(DataError::InvalidArgument(format!(
                    "cannot append {} elements to {} elements",
                    b.dtype().code(),
                    a.dtype().code()
                )))
            }
        }
        Ok(())
    }

    /// Converts every element to f32 (`as` casts: exact for bool, 8/16-bit integers and f16;
    /// rounded to nearest for wider integers and f64).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            NpyData::Bool(v) => v.iter().map(|&x| x as u8 as f32).collect(),
            NpyData::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            NpyData::F32(v) => v.clone(),
            NpyData::U8(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::I8(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::U16(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::I16(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::U32(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::I32(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::U64(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::I64(v) => v.iter().map(|&x| x as f32).collect(),
            NpyData::F64(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }

    /// Converts integer and bool elements to i64 (for labels). `None` for floating-point
    /// data and for u64 values above `i64::MAX`.
    pub fn to_i64(&self) -> Option<Vec<i64>> {
        Some(match self {
            NpyData::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            NpyData::U8(v) => v.iter().map(|&x| x as i64).collect(),
            NpyData::I8(v) => v.iter().map(|&x| x as i64).collect(),
            NpyData::U16(v) => v.iter().map(|&x| x as i64).collect(),
            NpyData::I16(v) => v.iter().map(|&x| x as i64).collect(),
            NpyData::U32(v) => v.iter().map(|&x| x as i64).collect(),
            NpyData::I32(v) => v.iter().map(|&x| x as i64).collect(),
            NpyData::I64(v) => v.clone(),
            NpyData::U64(v) => {
                let mut out = Vec::with_capacity(v.len());
                for &x in v {
                    out.push(i64::try_from(x).ok()?);
                }
                out
            }
            NpyData::F16(_) | NpyData::F32(_) | NpyData::F64(_) => return None,
        })
    }

    /// Little-endian bytes of the elements (bool as 0/1).
    fn to_le_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() * self.dtype().size());
        match self {
            NpyData::Bool(v) => out.extend(v.iter().map(|&b| b as u8)),
            NpyData::U8(v) => out.extend_from_slice(v),
            NpyData::I8(v) => out.extend(v.iter().map(|&x| x as u8)),
            NpyData::U16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            NpyData::I16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            NpyData::U32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            NpyData::I32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            NpyData::U64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            NpyData::I64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            NpyData::F16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            NpyData::F32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
            NpyData::F64(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        }
        out
    }
}

/// An n-dimensional array: a shape and its elements in C order.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    /// Dimensions; empty for a scalar.
    pub shape: Vec<usize>,
    /// Elements, `shape.iter().product()` of them, row-major.
    pub data: NpyData,
}

impl NpyArray {
    /// Checks that the number of elements matches the shape.
    pub fn new(shape: Vec<usize>, data: NpyData) -> Result<Self> {
        let n = numel(&shape).ok_or_else(|| {
            DataError::InvalidArgument(format!("shape {shape:?} overflows usize"))
        })?;
        if n != data.len() {
            return Err(DataError::InvalidArgument(format!(
                "shape {shape:?} holds {n} elements but {} were given",
                data.len()
            )));
        }
        Ok(NpyArray { shape, data })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }
}

fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// What a `.npy` header says about the data that follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Format version (major, minor): (1,0), (2,0) or (3,0).
    pub version: (u8, u8),
    /// Element type.
    pub dtype: DType,
    /// True when the elements are stored big-endian.
    pub big_endian: bool,
    /// True when the elements are stored in Fortran (column-major) order.
    pub fortran_order: bool,
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Byte offset of the first element in the file.
    pub data_offset: u64,
}

impl NpyHeader {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Checked when the header was parsed.
        numel(&self.shape).unwrap_or(usize::MAX)
    }

    /// Number of data bytes that must follow the header.
    pub fn data_bytes(&self) -> u64 {
        self.numel() as u64 * self.dtype.size() as u64
    }
}

/// Parses the magic, version and header dict at the start of `bytes` (which may hold more
/// than the header). `path` only names the file in errors.
pub fn parse_header(path: &Path, bytes: &[u8]) -> Result<NpyHeader> {
    let head_len = bytes.len().min(MAGIC.len());
    if bytes[..head_len] != MAGIC[..head_len] {
        return Err(DataError::format(
            path,
            format!(
                "not a .npy file: bad magic {:02x?} (expected 93 4e 55 4d 50 59 = \"\\x93NUMPY\")",
                &bytes[..head_len]
            ),
        ));
    }
    if bytes.len() < 10 {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "header",
            expected: 10,
            found: bytes.len() as u64,
        });
    }
    let version = (bytes[6], bytes[7]);
    let (hlen, start) = match version {
        (1, 0) => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        (2, 0) | (3, 0) => {
            if bytes.len() < 12 {
                return Err(DataError::Truncated {
                    path: path.to_path_buf(),
                    what: "header",
                    expected: 12,
                    found: bytes.len() as u64,
                });
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        (a, b) => {
            return Err(DataError::format(
                path,
                format!("unsupported .npy format version {a}.{b} (supported: 1.0, 2.0, 3.0)"),
            ))
        }
    };
    let end = start + hlen;
    if bytes.len() < end {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "header",
            expected: end as u64,
            found: bytes.len() as u64,
        });
    }
    let raw = &bytes[start..end];
    // Versions 1 and 2 use latin-1 for the header, version 3 uses UTF-8.
    let text: String = if version.0 == 3 {
        std::str::from_utf8(raw)
            .map_err(|_| DataError::format(path, "version 3.0 header is not valid UTF-8"))?
            .to_owned()
    } else {
        raw.iter().map(|&b| b as char).collect()
    };
    let dict = HeaderParser::new(path, &text).parse_dict()?;
    let mut descr = None;
    let mut fortran = None;
    let mut shape = None;
    for (key, value) in dict {
        let slot_taken = match key.as_str() {
            "descr" => descr.replace(value).is_some(),
            "fortran_order" => fortran.replace(value).is_some(),
            "shape" => shape.replace(value).is_some(),
            other => {
                return Err(DataError::format(
                    path,
                    format!(
                        "header has unexpected key {other:?} (allowed: descr, fortran_order, shape)"
                    ),
                ))
            }
        };
        if slot_taken {
            return Err(DataError::format(
                path,
                format!("header repeats key {key:?}"),
            ));
        }
    }
    let missing = |k: &str| DataError::format(path, format!("header lacks key {k:?}"));
    let descr = descr.ok_or_else(|| missing("descr"))?;
    let fortran_order = match fortran.ok_or_else(|| missing("fortran_order"))? {
        Value::Bool(b) => b,
        other => {
            return Err(DataError::format(
                path,
                format!("fortran_order must be True or False, found {other:?}"),
            ))
        }
    };
    let shape: Vec<usize> = match shape.ok_or_else(|| missing("shape"))? {
        Value::Tuple(dims) => dims,
        other => {
            return Err(DataError::format(
                path,
                format!("shape must be a tuple of integers, found {other:?}"),
            ))
        }
    };
    let (dtype, big_endian) = parse_descr(path, descr)?;
    // The byte count must be representable (it is recomputed unchecked later).
    numel(&shape)
        .and_then(|n| n.checked_mul(dtype.size()))
        .ok_or_else(|| DataError::format(path, format!("shape {shape:?} is too large")))?;
    Ok(NpyHeader {
        version,
        dtype,
        big_endian,
        fortran_order,
        shape,
        data_offset: end as u64,
    })
}

fn parse_descr(path: &Path, descr: Value) -> Result<(DType, bool)> {
    let s =
        match descr {
            Value::Str(s) => s,
            Value::Other(raw) => return Err(DataError::UnsupportedDtype {
                path: path.to_path_buf(),
                dtype: raw,
                hint:
                    "structured (record) dtypes are not supported; save one plain array per field",
            }),
            other => {
                return Err(DataError::format(
                    path,
                    format!("descr must be a string, found {other:?}"),
                ))
            }
        };
    let unsupported = || DataError::UnsupportedDtype {
        path: path.to_path_buf(),
        dtype: s.clone(),
        hint: SUPPORTED,
    };
    let mut chars = s.chars();
    let order = chars.next().ok_or_else(unsupported)?;
    let code = chars.as_str();
    let big_endian = match order {
        '<' => false,
        '>' => true,
        '=' => cfg!(target_endian = "big"),
        '|' => false,
        _ => return Err(unsupported()),
    };
    let dtype = DType::from_code(code).ok_or_else(unsupported)?;
    if order == '|' && dtype.size() > 1 {
        return Err(DataError::format(
            path,
            format!("descr {s:?}: byte order '|' (not applicable) on a multi-byte type"),
        ));
    }
    Ok((dtype, big_endian))
}

/// A value in the header dict.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
    /// A list or other literal we do not interpret, kept as raw text (structured descr).
    Other(String),
}

/// A parser for the tiny subset of Python literals that `.npy` headers use.
struct HeaderParser<'a> {
    path: &'a Path,
    s: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl<'a> HeaderParser<'a> {
    fn new(path: &'a Path, text: &'a str) -> Self {
        HeaderParser {
            path,
            s: text.as_bytes(),
            text,
            pos: 0,
        }
    }

    fn err(&self, what: &str) -> DataError {
        DataError::format(
            self.path,
            format!(
                "malformed header at byte {}: {what} (header: {:?})",
                self.pos,
                self.text.trim_end()
            ),
        )
    }

    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", c as char)))
        }
    }

    fn parse_dict(mut self) -> Result<Vec<(String, Value)>> {
        let mut out = Vec::new();
        self.expect(b'{')?;
        loop {
            self.skip_ws();
            if self.peek() == Some(b'}') {
                self.pos += 1;
                break;
            }
            let key = self.parse_str()?;
            self.expect(b':')?;
            let value = self.parse_value()?;
            out.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
        self.skip_ws();
        if self.pos != self.s.len() {
            return Err(self.err("unexpected text after the dict"));
        }
        Ok(out)
    }

    fn parse_str(&mut self) -> Result<String> {
        self.skip_ws();
        let quote = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.err("expected a quoted string")),
        };
        self.pos += 1;
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c == b'\\' {
                return Err(self.err("escape sequences are not expected in a .npy header"));
            }
            if c == quote {
                let s = self.text[start..self.pos].to_owned();
                self.pos += 1;
                return Ok(s);
            }
            self.pos += 1;
        }
        Err(self.err("unterminated string"))
    }

    fn parse_value(&mut self) -> Result<Value> {
        self.skip_ws();
        match self.peek() {
            Some(b'\'' | b'"') => Ok(Value::Str(self.parse_str()?)),
            Some(b'(') => self.parse_tuple(),
            Some(b'[' | b'{') => self.parse_raw_bracketed(),
            Some(b'T') if self.s[self.pos..].starts_with(b"True") => {
                self.pos += 4;
                Ok(Value::Bool(true))
            }
            Some(b'F') if self.s[self.pos..].starts_with(b"False") => {
                self.pos += 5;
                Ok(Value::Bool(false))
            }
            _ => Err(self.err("expected a string, True, False or a tuple")),
        }
    }

    fn parse_tuple(&mut self) -> Result<Value> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.skip_ws();
            if self.peek() == Some(b')') {
                self.pos += 1;
                break;
            }
            let start = self.pos;
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.pos += 1;
            }
            if start == self.pos {
                return Err(self.err("expected a non-negative integer dimension"));
            }
            let dim: usize = self.text[start..self.pos]
                .parse()
                .map_err(|_| self.err("dimension does not fit usize"))?;
            // Python 2 era files write long integers as `3L`.
            if self.peek() == Some(b'L') {
                self.pos += 1;
            }
            dims.push(dim);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b')') => {}
                _ => return Err(self.err("expected ',' or ')' in shape")),
            }
        }
        Ok(Value::Tuple(dims))
    }

    /// Skips a balanced `[...]`/`{...}`/`(...)` literal (quotes respected) and returns its text.
    fn parse_raw_bracketed(&mut self) -> Result<Value> {
        let start = self.pos;
        let mut depth = 0usize;
        let mut quote: Option<u8> = None;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    b'\'' | b'"' => quote = Some(c),
                    b'[' | b'{' | b'(' => depth += 1,
                    b']' | b'}' | b')' => {
                        depth -= 1;
                        if depth == 0 {
                            return Ok(Value::Other(self.text[start..self.pos].to_owned()));
                        }
                    }
                    _ => {}
                },
            }
        }
        Err(self.err("unterminated bracket"))
    }
}

/// Decodes `count` elements of `dtype` from `bytes` (exactly `count * size` long).
fn decode(path: &Path, dtype: DType, big_endian: bool, bytes: &[u8]) -> Result<NpyData> {
    macro_rules! num {
        ($t:ty, $n:expr, $variant:ident) => {{
            let v: Vec<$t> = bytes
                .chunks_exact($n)
                .map(|c| {
                    let a: [u8; $n] = c.try_into().expect("chunks_exact gives $n bytes");
                    if big_endian {
                        <$t>::from_be_bytes(a)
                    } else {
                        <$t>::from_le_bytes(a)
                    }
                })
                .collect();
            NpyData::$variant(v)
        }};
    }
    Ok(match dtype {
        DType::Bool => {
            let mut v = Vec::with_capacity(bytes.len());
            for (i, &b) in bytes.iter().enumerate() {
                match b {
                    0 => v.push(false),
                    1 => v.push(true),
                    _ => {
                        return Err(DataError::format(
                            path,
                            format!("bool element {i} has byte value {b} (must be 0 or 1)"),
                        ))
                    }
                }
            }
            NpyData::Bool(v)
        }
        DType::U8 => NpyData::U8(bytes.to_vec()),
        DType::I8 => NpyData::I8(bytes.iter().map(|&b| b as i8).collect()),
        DType::U16 => num!(u16, 2, U16),
        DType::I16 => num!(i16, 2, I16),
        DType::U32 => num!(u32, 4, U32),
        DType::I32 => num!(i32, 4, I32),
        DType::U64 => num!(u64, 8, U64),
        DType::I64 => num!(i64, 8, I64),
        DType::F16 => num!(f16, 2, F16),
        DType::F32 => num!(f32, 4, F32),
        DType::F64 => num!(f64, 8, F64),
    })
}

/// Reorders elements stored in Fortran (column-major) order into C (row-major) order.
fn fortran_to_c<T: Copy>(src: &[T], shape: &[usize]) -> Vec<T> {
    let n = src.len();
    if shape.len() < 2 || n == 0 {
        return src.to_vec();
    }
    // Column-major strides: stride[0] = 1, stride[k] = stride[k-1] * shape[k-1].
    let mut fstride = vec![1usize; shape.len()];
    for k in 1..shape.len() {
        fstride[k] = fstride[k - 1] * shape[k - 1];
    }
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    let mut off = 0usize;
    for _ in 0..n {
        out.push(src[off]);
        // Advance the C-order multi-index (last axis fastest) and the F offset with it.
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            off += fstride[k];
            if idx[k] < shape[k] {
                break;
            }
            off -= fstride[k] * shape[k];
            idx[k] = 0;
        }
    }
    out
}

fn to_c_order(data: NpyData, shape: &[usize]) -> NpyData {
    match data {
        NpyData::Bool(v) => NpyData::Bool(fortran_to_c(&v, shape)),
        NpyData::U8(v) => NpyData::U8(fortran_to_c(&v, shape)),
        NpyData::I8(v) => NpyData::I8(fortran_to_c(&v, shape)),
        NpyData::U16(v) => NpyData::U16(fortran_to_c(&v, shape)),
        NpyData::I16(v) => NpyData::I16(fortran_to_c(&v, shape)),
        NpyData::U32(v) => NpyData::U32(fortran_to_c(&v, shape)),
        NpyData::I32(v) => NpyData::I32(fortran_to_c(&v, shape)),
        NpyData::U64(v) => NpyData::U64(fortran_to_c(&v, shape)),
        NpyData::I64(v) => NpyData::I64(fortran_to_c(&v, shape)),
        NpyData::F16(v) => NpyData::F16(fortran_to_c(&v, shape)),
        NpyData::F32(v) => NpyData::F32(fortran_to_c(&v, shape)),
        NpyData::F64(v) => NpyData::F64(fortran_to_c(&v, shape)),
    }
}

/// Parses a whole `.npy` file held in memory. `path` only names it in errors.
pub fn read_npy_bytes(path: &Path, bytes: &[u8]) -> Result<NpyArray> {
    let header = parse_header(path, bytes)?;
    let start = header.data_offset as usize;
    let expected = header.data_bytes();
    let found = (bytes.len() - start) as u64;
    if found < expected {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "data",
            expected,
            found,
        });
    }
    if found > expected {
        return Err(DataError::format(
            path,
            format!(
                "{} trailing bytes after the {expected} data bytes of shape {:?} {}",
                found - expected,
                header.shape,
                header.dtype.code()
            ),
        ));
    }
    let mut data = decode(path, header.dtype, header.big_endian, &bytes[start..])?;
    if header.fortran_order {
        data = to_c_order(data, &header.shape);
    }
    Ok(NpyArray {
        shape: header.shape,
        data,
    })
}

/// Reads a `.npy` from a stream whose length is not known in advance (a compressed `.npz`
/// member of `compressed` bytes): the header first, then exactly the data bytes it
/// declares once the claim is checked against the resource limits (elements, bytes after
/// decompression, expansion ratio), then one byte more to detect trailing data. Memory is
/// bounded by what the header declares, never by what the stream would expand to.
pub(crate) fn read_npy_stream(path: &Path, mut r: impl Read, compressed: u64) -> Result<NpyArray> {
    /// numpy's own default `max_header_size` is 10,000 bytes; a header of more than 1 MiB
    /// is not a header.
    const MAX_HEADER: u64 = 1 << 20;
    let io = |e| DataError::io(path, e);
    let mut head = Vec::with_capacity(12);
    (&mut r).take(12).read_to_end(&mut head).map_err(io)?;
    let hlen = header_len(&head);
    if hlen > MAX_HEADER {
        return Err(DataError::format(
            path,
            format!("header of {hlen} bytes (more than {MAX_HEADER})"),
        ));
    }
    if hlen > head.len() as u64 {
        (&mut r)
            .take(hlen - head.len() as u64)
            .read_to_end(&mut head)
            .map_err(io)?;
    }
    let header = parse_header(path, &head)?;
    let what = path.display().to_string();
    let limits = quantkit_core::limits::Limits::current();
    limits.check_shape(&what, &header.shape)?;
    let total = header.data_offset.saturating_add(header.data_bytes());
    limits.check_inflated(&what, total, compressed)?;
    let mut bytes = head;
    bytes.reserve_exact((total as usize).saturating_sub(bytes.len()));
    (&mut r)
        .take(total.saturating_sub(bytes.len() as u64))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let mut probe = [0u8; 1];
    if bytes.len() as u64 == total && r.read(&mut probe).map_err(io)? != 0 {
        return Err(DataError::format(
            path,
            format!(
                "trailing bytes after the {} data bytes of shape {:?} {}",
                header.data_bytes(),
                header.shape,
                header.dtype.code()
            ),
        ));
    }
    read_npy_bytes(path, &bytes)
}

/// The length of the preamble and header announced by the first (up to 12) bytes, or
/// their count when they are not a `.npy` preamble (the header parser then says why).
fn header_len(pre: &[u8]) -> u64 {
    if pre.len() >= 10 && pre[..6] == MAGIC[..] {
        match pre[6] {
            1 => u16::from_le_bytes([pre[8], pre[9]]) as u64 + 10,
            _ if pre.len() == 12 => {
                u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]) as u64 + 12
            }
            _ => 12,
        }
    } else {
        pre.len() as u64
    }
}

/// Reads a `.npy` file.
pub fn read_npy(path: impl AsRef<Path>) -> Result<NpyArray> {
    let path = path.as_ref();
    read_npy_bytes(path, &read_all(path)?)
}

/// Encodes an array as a complete `.npy` file (little-endian, C order, version 1.0, or 2.0
/// when the header needs more than 65535 bytes).
pub fn npy_bytes(array: &NpyArray) -> Result<Vec<u8>> {
    if numel(&array.shape) != Some(array.data.len()) {
        return Err(DataError::InvalidArgument(format!(
            "shape {:?} does not match {} elements",
            array.shape,
            array.data.len()
        )));
    }
    let dtype = array.dtype();
    let order = if dtype.size() == 1 { '|' } else { '<' };
    let shape = match array.shape.len() {
        0 => "()".to_owned(),
        1 => format!("({},)", array.shape[0]),
        _ => format!(
            "({})",
            array
                .shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{order}{}', 'fortran_order': False, 'shape': {shape}, }}",
        dtype.code()
    );
    // The preamble + header is padded with spaces to a multiple of 64 bytes and ends in
    // '\n', as NumPy does, so the data is aligned for memory mapping.
    let padded = |preamble: usize| {
        let unpadded = preamble + dict.len() + 1;
        let total = unpadded.div_ceil(64) * 64;
        total - preamble
    };
    let (version, preamble) = if padded(10) <= u16::MAX as usize {
        (1u8, 10)
    } else {
        (2u8, 12)
    };
    let hlen = padded(preamble);
    let mut out = Vec::with_capacity(preamble + hlen + array.numel() * dtype.size());
    out.extend_from_slice(MAGIC);
    out.push(version);
    out.push(0);
    if version == 1 {
        out.extend((hlen as u16).to_le_bytes());
    } else {
        let h = u32::try_from(hlen)
            .map_err(|_| DataError::InvalidArgument("header too large".into()))?;
        out.extend(h.to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(preamble + hlen - 1, b' ');
    out.push(b'\n');
    out.extend(array.data.to_le_bytes());
    Ok(out)
}

/// Writes a `.npy` file atomically (a temporary file in the same folder, then rename).
pub fn write_npy(path: impl AsRef<Path>, array: &NpyArray) -> Result<()> {
    let path = path.as_ref();
    let bytes = npy_bytes(array)?;
    write_atomic(path, |w| w.write_all(&bytes))
}

/// The member count of an `.npz` archive against `Limits::npz_members`.
pub(crate) fn check_members(path: &Path, n: usize) -> Result<()> {
    let l = quantkit_core::limits::Limits::current();
    quantkit_core::limits::Limits::check(
        &path.display().to_string(),
        n as u64,
        l.npz_members,
        "npz_members",
        "archive members",
    )?;
    Ok(())
}

pub(crate) fn zip_err(path: &Path, e: zip::result::ZipError) -> DataError {
    match e {
        zip::result::ZipError::Io(io) => DataError::io(path, io),
        other => DataError::format(path, format!("not a valid .npz (zip) archive: {other}")),
    }
}

/// An open `.npz` archive.
pub(crate) type NpzArchive = zip::ZipArchive<std::fs::File>;

/// Opens an `.npz` archive (its member count checked against the `npz_members` limit) and
/// lists its arrays: `(name without .npy, zip index)`, directories skipped; a member that
/// is not a `.npy` file is an error naming it.
pub(crate) fn open_npz(path: &Path) -> Result<(NpzArchive, Vec<(String, usize)>)> {
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| zip_err(path, e))?;
    check_members(path, archive.len())?;
    let mut members = Vec::new();
    for i in 0..archive.len() {
        let entry = archive.by_index(i).map_err(|e| zip_err(path, e))?;
        if entry.is_dir() {
            continue;
        }
        let name = entry.name().map_err(|e| zip_err(path, e))?.into_owned();
        let Some(stem) = name.strip_suffix(".npy") else {
            return Err(DataError::format(
                &std::path::PathBuf::from(format!("{}:{name}", path.display())),
                "member of an .npz archive is not a .npy file",
            ));
        };
        members.push((stem.to_owned(), i));
    }
    Ok((archive, members))
}

/// Reads every array of an `.npz` archive, in archive order. Names drop the `.npy`
/// suffix (`np.savez(f, x=a)` gives `"x"`; positional arrays are `"arr_0"`, ...).
pub fn read_npz(path: impl AsRef<Path>) -> Result<Vec<(String, NpyArray)>> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| zip_err(path, e))?;
    check_members(path, archive.len())?;
    let mut out = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| zip_err(path, e))?;
        if entry.is_dir() {
            continue;
        }
        let member = entry.name().map_err(|e| zip_err(path, e))?.into_owned();
        let member_path = PathBuf::from(format!("{}:{member}", path.display()));
        let Some(name) = member.strip_suffix(".npy") else {
            return Err(DataError::format(
                &member_path,
                "member of an .npz archive is not a .npy file",
            ));
        };
        let compressed = entry.compressed_size();
        let array = read_npy_stream(&member_path, &mut entry, compressed)?;
        out.push((name.to_owned(), array));
    }
    Ok(out)
}

/// Writes an `.npz` archive (deflate-compressed like `np.savez_compressed`) atomically.
/// Each name gets the `.npy` suffix inside the archive.
pub fn write_npz(path: impl AsRef<Path>, arrays: &[(&str, &NpyArray)]) -> Result<()> {
    let path = path.as_ref();
    let mut encoded = Vec::with_capacity(arrays.len());
    for (name, array) in arrays {
        encoded.push((format!("{name}.npy"), npy_bytes(array)?));
    }
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut zw = zip::ZipWriter::new(&mut buf);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .large_file(
                encoded
                    .iter()
                    .any(|(_, b)| b.len() as u64 >= u32::MAX as u64),
            );
        for (name, bytes) in &encoded {
            zw.start_file(name.as_str(), options)
                .map_err(|e| zip_err(path, e))?;
            zw.write_all(bytes).map_err(|e| DataError::io(path, e))?;
        }
        zw.finish().map_err(|e| zip_err(path, e))?;
    }
    let bytes = buf.into_inner();
    write_atomic(path, |w| w.write_all(&bytes))
}

/// An open `.npy` file whose elements are read on demand, so a large calibration tensor is
/// never loaded whole: each call seeks to the wanted elements and decodes only those.
#[derive(Debug)]
pub struct NpyFile {
    path: PathBuf,
    file: File,
    header: NpyHeader,
    /// The whole array in C order, filled on first use for Fortran-order files (whose
    /// C-order ranges are not contiguous on disk).
    c_order: Option<NpyData>,
}

impl NpyFile {
    /// Opens the file, parses its header and checks that the file holds exactly the data
    /// the header announces.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut file = File::open(&path).map_err(|e| DataError::io(&path, e))?;
        let len = file.metadata().map_err(|e| DataError::io(&path, e))?.len();
        // Read the preamble, then as much header as it announces.
        let mut pre = Vec::with_capacity(12);
        (&mut file)
            .take(12)
            .read_to_end(&mut pre)
            .map_err(|e| DataError::io(&path, e))?;
        let hlen = header_len(&pre);
        let mut head = pre;
        if hlen > head.len() as u64 {
            (&mut file)
                .take(hlen - head.len() as u64)
                .read_to_end(&mut head)
                .map_err(|e| DataError::io(&path, e))?;
        }
        let header = parse_header(&path, &head)?;
        let expected = header.data_bytes();
        let found = len.saturating_sub(header.data_offset);
        if found < expected {
            return Err(DataError::Truncated {
                path,
                what: "data",
                expected,
                found,
            });
        }
        if found > expected {
            return Err(DataError::format(
                &path,
                format!(
                    "{} trailing bytes after the {expected} data bytes",
                    found - expected
                ),
            ));
        }
        Ok(NpyFile {
            path,
            file,
            header,
            c_order: None,
        })
    }

    /// The parsed header.
    pub fn header(&self) -> &NpyHeader {
        &self.header
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads `count` elements starting at flat C-order element `start`. For a Fortran-order
    /// file with more than one dimension the first call reads (and transposes) the whole
    /// array and keeps it.
    pub fn read_elements(&mut self, start: usize, count: usize) -> Result<NpyData> {
        let n = self.header.numel();
        let end = start
            .checked_add(count)
            .filter(|&e| e <= n)
            .ok_or_else(|| {
                DataError::InvalidArgument(format!(
                    "{}: elements {start}..{} out of range (array has {n})",
                    self.path.display(),
                    start.saturating_add(count)
                ))
            })?;
        if self.header.fortran_order && self.header.shape.len() > 1 {
            if self.c_order.is_none() {
                let all = self.read_range_raw(0, n)?;
                self.c_order = Some(to_c_order(all, &self.header.shape));
            }
            let data = self.c_order.as_ref().expect("filled above");
            return Ok(slice_data(data, start, end));
        }
        self.read_range_raw(start, count)
    }

    fn read_range_raw(&mut self, start: usize, count: usize) -> Result<NpyData> {
        let size = self.header.dtype.size() as u64;
        let offset = self.header.data_offset + start as u64 * size;
        let mut bytes = vec![0u8; count * size as usize];
        self.file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| self.file.read_exact(&mut bytes))
            .map_err(|e| DataError::io(&self.path, e))?;
        decode(
            &self.path,
            self.header.dtype,
            self.header.big_endian,
            &bytes,
        )
    }
}

fn slice_data(data: &NpyData, start: usize, end: usize) -> NpyData {
    match data {
        NpyData::Bool(v) => NpyData::Bool(v[start..end].to_vec()),
        NpyData::U8(v) => NpyData::U8(v[start..end].to_vec()),
        NpyData::I8(v) => NpyData::I8(v[start..end].to_vec()),
        NpyData::U16(v) => NpyData::U16(v[start..end].to_vec()),
        NpyData::I16(v) => NpyData::I16(v[start..end].to_vec()),
        NpyData::U32(v) => NpyData::U32(v[start..end].to_vec()),
        NpyData::I32(v) => NpyData::I32(v[start..end].to_vec()),
        NpyData::U64(v) => NpyData::U64(v[start..end].to_vec()),
        NpyData::I64(v) => NpyData::I64(v[start..end].to_vec()),
        NpyData::F16(v) => NpyData::F16(v[start..end].to_vec()),
        NpyData::F32(v) => NpyData::F32(v[start..end].to_vec()),
        NpyData::F64(v) => NpyData::F64(v[start..end].to_vec()),
    }
}

#[cfg(test)]
mod tests;
