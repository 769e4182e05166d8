//! Quantization schemes: bit width, signedness, symmetric/affine, narrow range, granularity.

use crate::error::{CoreError, Result};

/// Which elements share one (scale, zero point) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Granularity {
    /// One pair for the whole tensor.
    #[default]
    PerTensor,
    /// One pair per index along `axis` (ONNX per-axis quantization, e.g. output channels of a
    /// convolution weight with `axis = 0`).
    PerChannel {
        /// The channel axis.
        axis: usize,
    },
    /// Blocked quantization as ONNX opset 21 defines it: along `axis`, runs of `group_size`
    /// consecutive elements share a pair; every other coordinate has its own. The parameter
    /// tensor has the input's shape except `ceil(dim[axis] / group_size)` along `axis`.
    PerGroup {
        /// The blocked axis.
        axis: usize,
        /// Elements per block along `axis` (ONNX `block_size`), ≥ 1.
        group_size: usize,
    },
}

impl Granularity {
    /// The ONNX `(axis, block_size)` attributes of this granularity (`block_size == 0` means
    /// per-tensor or per-axis; the axis of a per-tensor granularity is reported as 0).
    pub fn onnx_axis_block(self) -> (usize, usize) {
        match self {
            Granularity::PerTensor => (0, 0),
            Granularity::PerChannel { axis } => (axis, 0),
            Granularity::PerGroup { axis, group_size } => (axis, group_size),
        }
    }

    /// Shape of the scale / zero-point tensor for an input of shape `shape`
    /// (`[]` for per-tensor, `[dim]` for per-channel, blocked shape for per-group).
    pub fn param_shape(self, shape: &[usize]) -> Result<Vec<usize>> {
        match self {
            Granularity::PerTensor => Ok(vec![]),
            Granularity::PerChannel { axis } => {
                check_axis(axis, shape)?;
                Ok(vec![shape[axis]])
            }
            Granularity::PerGroup { axis, group_size } => {
                check_axis(axis, shape)?;
                if group_size == 0 {
                    return Err(CoreError::InvalidScheme(
                        "group size must be at least 1".into(),
                    ));
                }
                let mut s = shape.to_vec();
                s[axis] = shape[axis].div_ceil(group_size);
                Ok(s)
            }
        }
    }

    /// Number of (scale, zero point) pairs for an input of shape `shape`.
    pub fn param_count(self, shape: &[usize]) -> Result<usize> {
        Ok(self.param_shape(shape)?.iter().product())
    }
}

fn check_axis(axis: usize, shape: &[usize]) -> Result<()> {
    if axis >= shape.len() {
        return Err(CoreError::InvalidScheme(format!(
            "axis {axis} out of range for a tensor of rank {} (shape {shape:?})",
            shape.len()
        )));
    }
    Ok(())
}

/// How real values map to integers: the integer type, the mapping, and the granularity.
///
/// `qmin`/`qmax` follow from `bits`, `signed` and `narrow_range`:
/// signed `[−2^(b−1), 2^(b−1) − 1]`, unsigned `[0, 2^b − 1]`; narrow range drops the lowest
/// code (`[−127, 127]` for i8, `[1, 255]` for u8) so the grid is symmetric around the zero
/// point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantScheme {
    /// Bit width, 2..=16.
    pub bits: u8,
    /// Signed (two's complement) or unsigned integers.
    pub signed: bool,
    /// Symmetric: the zero point is fixed at the middle of the range (0 for signed types) and
    /// the scale comes from `max(|min|, |max|)`. Affine otherwise.
    pub symmetric: bool,
    /// Drop the lowest code so that `qmax − z == z − qmin`.
    pub narrow_range: bool,
    /// Which elements share parameters.
    pub granularity: Granularity,
}

impl QuantScheme {
    /// A per-tensor affine scheme of the given width and signedness. Errors unless
    /// `2 <= bits <= 16`.
    pub fn new(bits: u8, signed: bool) -> Result<QuantScheme> {
        if !(2..=16).contains(&bits) {
            return Err(CoreError::InvalidScheme(format!(
                "bit width {bits} not supported (2..=16)"
            )));
        }
        Ok(QuantScheme {
            bits,
            signed,
            symmetric: false,
            narrow_range: false,
            granularity: Granularity::PerTensor,
        })
    }

    /// Parses a type name: `u8`, `i8`, `u4`, `i4`, `u16`, `i16`, … (`u`/`i` followed by a bit
    /// width 2..=16; `uint8`/`int8` spellings are accepted too).
    pub fn from_dtype(name: &str) -> Result<QuantScheme> {
        let n = name.trim().to_ascii_lowercase();
        let (signed, digits) = if let Some(d) = n.strip_prefix("uint") {
            (false, d)
        } else if let Some(d) = n.strip_prefix("int") {
            (true, d)
        } else if let Some(d) = n.strip_prefix('u') {
            (false, d)
        } else if let Some(d) = n.strip_prefix('i') {
            (true, d)
        } else {
            return Err(CoreError::InvalidScheme(format!(
                "unknown dtype '{name}' (expected u2..u16 or i2..i16, e.g. u8, i8, i4)"
            )));
        };
        let bits: u8 = digits.parse().map_err(|_| {
            CoreError::InvalidScheme(format!(
                "unknown dtype '{name}' (expected u2..u16 or i2..i16, e.g. u8, i8, i4)"
            ))
        })?;
        QuantScheme::new(bits, signed)
    }

    /// Unsigned 8-bit affine per-tensor: ONNX Runtime's default for activations.
    pub fn u8_affine() -> QuantScheme {
        QuantScheme::new(8, false).expect("8 bits is valid")
    }

    /// Signed 8-bit symmetric per-tensor: the usual weight scheme.
    pub fn i8_symmetric() -> QuantScheme {
        QuantScheme::new(8, true)
            .expect("8 bits is valid")
            .with_symmetric(true)
    }

    /// Sets symmetric (true) or affine (false).
    pub fn with_symmetric(mut self, symmetric: bool) -> QuantScheme {
        self.symmetric = symmetric;
        self
    }

    /// Sets narrow range on or off.
    pub fn with_narrow_range(mut self, narrow: bool) -> QuantScheme {
        self.narrow_range = narrow;
        self
    }

    /// Sets the granularity.
    pub fn with_granularity(mut self, granularity: Granularity) -> QuantScheme {
        self.granularity = granularity;
        self
    }

    /// Checks the bit width (useful for a hand-built value).
    pub fn validate(&self) -> Result<()> {
        QuantScheme::new(self.bits, self.signed).map(|_| ())
    }

    /// Lowest quantized value.
    pub fn qmin(&self) -> i32 {
        let full = if self.signed {
            -(1i32 << (self.bits - 1))
        } else {
            0
        };
        if self.narrow_range {
            full + 1
        } else {
            full
        }
    }

    /// Highest quantized value.
    pub fn qmax(&self) -> i32 {
        if self.signed {
            (1i32 << (self.bits - 1)) - 1
        } else {
            (1i32 << self.bits) - 1
        }
    }

    /// Short type name, e.g. `u8`, `i4`.
    pub fn dtype_name(&self) -> String {
        format!("{}{}", if self.signed { 'i' } else { 'u' }, self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let s = QuantScheme::from_dtype("u8").unwrap();
        assert_eq!((s.qmin(), s.qmax()), (0, 255));
        let s = QuantScheme::from_dtype("int8").unwrap();
        assert_eq!((s.qmin(), s.qmax()), (-128, 127));
        assert_eq!(s.with_narrow_range(true).qmin(), -127);
        let s = QuantScheme::from_dtype("i4").unwrap();
        assert_eq!((s.qmin(), s.qmax()), (-8, 7));
        let s = QuantScheme::from_dtype("u2").unwrap();
        assert_eq!((s.qmin(), s.qmax()), (0, 3));
        let s = QuantScheme::from_dtype("i16").unwrap();
        assert_eq!((s.qmin(), s.qmax()), (-32768, 32767));
        for bad in ["f32", "u1", "i17", "u", "x8", ""] {
            assert!(QuantScheme::from_dtype(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn param_shapes() {
        let g = Granularity::PerGroup {
            axis: 1,
            group_size: 4,
        };
        assert_eq!(g.param_shape(&[3, 10]).unwrap(), vec![3, 3]);
        assert_eq!(
            Granularity::PerChannel { axis: 0 }
                .param_shape(&[5, 2])
                .unwrap(),
            vec![5]
        );
        assert!(Granularity::PerChannel { axis: 2 }
            .param_shape(&[5, 2])
            .is_err());
    }
}
