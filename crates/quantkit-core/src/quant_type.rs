//! The 8-bit code types (`u8`, `i8`) as one trait, shared by every layer that stores codes:
//! the kernels (activations, weights, outputs), the graph executor's QuantizeLinear /
//! DequantizeLinear fast paths and the integer engine.

/// An 8-bit quantized code type: `u8` or `i8`.
///
/// Generic code over the code type ([`crate::linear::quantize_code`], the kernels' output
/// stages) reads the range from [`QuantType::MIN`] / [`QuantType::MAX`] and converts with
/// [`QuantType::from_clamped`] / [`QuantType::to_i32`], so one function body serves both.
pub trait QuantType: Copy + Send + Sync + Default + 'static {
    /// Smallest representable value.
    const MIN: i32;
    /// Largest representable value.
    const MAX: i32;
    /// Converts a value already clamped to `[MIN, MAX]` (a plain `as` cast: a value outside
    /// the range wraps, it is not saturated).
    fn from_clamped(v: i32) -> Self;
    /// Widens to i32.
    fn to_i32(self) -> i32;
}

impl QuantType for u8 {
    const MIN: i32 = 0;
    const MAX: i32 = 255;
    #[inline(always)]
    fn from_clamped(v: i32) -> Self {
        v as u8
    }
    #[inline(always)]
    fn to_i32(self) -> i32 {
        self as i32
    }
}

impl QuantType for i8 {
    const MIN: i32 = -128;
    const MAX: i32 = 127;
    #[inline(always)]
    fn from_clamped(v: i32) -> Self {
        v as i8
    }
    #[inline(always)]
    fn to_i32(self) -> i32 {
        self as i32
    }
}

/// A code type of the element-wise quantize/dequantize passes: the 8-bit [`QuantType`]s and
/// the 16-bit `i16` / `u16` of W8A16/W16A16 activations ([`crate::linear::quantize_code`],
/// [`crate::linear::dequantize_code`] and their loops in `quantkit_kernels::quantize`). Kept
/// apart from [`QuantType`] so that the 8-bit kernels (GEMM, conv, tables) cannot be
/// instantiated with 16-bit codes by mistake.
pub trait CodeType: Copy + Send + Sync + Default + 'static {
    /// Smallest representable value.
    const MIN: i32;
    /// Largest representable value.
    const MAX: i32;
    /// Converts a value already clamped to `[MIN, MAX]` (a plain `as` cast).
    fn from_clamped(v: i32) -> Self;
    /// Widens to i32.
    fn to_i32(self) -> i32;
}

impl<T: QuantType> CodeType for T {
    const MIN: i32 = <T as QuantType>::MIN;
    const MAX: i32 = <T as QuantType>::MAX;
    #[inline(always)]
    fn from_clamped(v: i32) -> Self {
        <T as QuantType>::from_clamped(v)
    }
    #[inline(always)]
    fn to_i32(self) -> i32 {
        <T as QuantType>::to_i32(self)
    }
}

macro_rules! code16 {
    ($t:ty) => {
        impl CodeType for $t {
            const MIN: i32 = <$t>::MIN as i32;
            const MAX: i32 = <$t>::MAX as i32;
            #[inline(always)]
            fn from_clamped(v: i32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_i32(self) -> i32 {
                self as i32
            }
        }
    };
}
code16!(i16);
code16!(u16);
