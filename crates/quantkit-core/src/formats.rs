//! Bit-exact conversions between f32 and the narrow element types ONNX 1.23 defines as
//! quantization formats: bfloat16, the float8 family (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ,
//! E8M0), float4 E2M1, and the wrapping of integers into int4/uint4/int2/uint2.
//!
//! The definitions are the ONNX `Cast` specification (opset 25) and, where it leaves a
//! case open, what ONNX's reference evaluator does (it converts with `ml_dtypes`):
//!
//! - Encoding rounds to nearest, ties to even, from **f32** (an f64 value is first rounded
//!   to f32, as `ml_dtypes` does, so `Cast(double → float8)` rounds twice exactly like the
//!   reference).
//! - `saturate = true` (the default): a value beyond the largest finite magnitude, and ±∞,
//!   become ±max. `saturate = false`: they become NaN (E4M3FN keeps the sign, the FNUZ
//!   types have one NaN, `0x80`) or ±∞ for E5M2. The FNUZ types have no −0: −0 and a
//!   negative value that rounds to zero encode as `0x00`.
//! - Float4 E2M1 has neither ∞ nor NaN: overflow and ±∞ always saturate to ±6, and NaN
//!   encodes as `0x8` (−0) for a NaN with a clear sign bit and `0x0` for one with the sign
//!   set (`ml_dtypes`' mapping, which the ONNX node tests record).
//! - E8M0 (`2^(e−127)`, `0xFF` = NaN, no sign, no zero) follows
//!   `onnx.numpy_helper.to_float8e8m0`: the exponent field of the f32, rounded `up` (any
//!   fraction bumps it), `down` (truncated) or `nearest` (guard/round/sticky, ties up), with
//!   `saturate` stopping the bump at `0xFE`; NaN and ±∞ give `0xFF`.
//!
//! Decoding is exact: every code of these formats is an f32.

/// A float8 or float4 format with sign, exponent and mantissa fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MiniFloat {
    /// float8 E4M3FN: bias 7, no ∞, NaN = `S.1111.111`, max 448.
    F8E4M3FN,
    /// float8 E4M3FNUZ: bias 8, no ∞, no −0, NaN = `0x80`, max 240.
    F8E4M3FNUZ,
    /// float8 E5M2: IEEE-like, bias 15, ±∞ = `S.11111.00`, max 57344.
    F8E5M2,
    /// float8 E5M2FNUZ: bias 16, no ∞, no −0, NaN = `0x80`, max 57344.
    F8E5M2FNUZ,
    /// float4 E2M1: bias 1, no ∞ or NaN, values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
    /// negatives; one code per byte in the low nibble.
    F4E2M1,
}

/// How special values are laid out in a [`MiniFloat`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Special {
    /// All-ones exponent and mantissa is NaN (E4M3FN).
    Fn,
    /// `0x80` is the only NaN, no −0 (FNUZ).
    Fnuz,
    /// IEEE: all-ones exponent is ∞ (mantissa 0) or NaN.
    Ieee,
    /// No special values (float4).
    None,
}

impl MiniFloat {
    /// Every format, for tests and tables.
    pub const ALL: [MiniFloat; 5] = [
        MiniFloat::F8E4M3FN,
        MiniFloat::F8E4M3FNUZ,
        MiniFloat::F8E5M2,
        MiniFloat::F8E5M2FNUZ,
        MiniFloat::F4E2M1,
    ];

    /// (exponent bits, mantissa bits, bias, specials).
    const fn layout(self) -> (u32, u32, i32, Special) {
        match self {
            MiniFloat::F8E4M3FN => (4, 3, 7, Special::Fn),
            MiniFloat::F8E4M3FNUZ => (4, 3, 8, Special::Fnuz),
            MiniFloat::F8E5M2 => (5, 2, 15, Special::Ieee),
            MiniFloat::F8E5M2FNUZ => (5, 2, 16, Special::Fnuz),
            MiniFloat::F4E2M1 => (2, 1, 1, Special::None),
        }
    }

    /// Width of a code in bits (8 or 4).
    pub const fn bits(self) -> u32 {
        let (e, m, _, _) = self.layout();
        1 + e + m
    }

    /// The code of the largest finite value (positive).
    pub const fn max_code(self) -> u8 {
        match self {
            MiniFloat::F8E4M3FN => 0x7E,
            MiniFloat::F8E4M3FNUZ | MiniFloat::F8E5M2FNUZ => 0x7F,
            MiniFloat::F8E5M2 => 0x7B,
            MiniFloat::F4E2M1 => 0x7,
        }
    }

    /// The largest finite value.
    pub fn max(self) -> f32 {
        self.decode(self.max_code())
    }

    /// The value of a code (bits above [`MiniFloat::bits`] are ignored). Exact.
    pub fn decode(self, code: u8) -> f32 {
        let (eb, mb, bias, special) = self.layout();
        let code = code & ((1u16 << self.bits()) - 1) as u8;
        let sign_bit = 1u8 << (eb + mb);
        let negative = code & sign_bit != 0;
        let exp = i32::from((code >> mb) & ((1 << eb) - 1));
        let man = i32::from(code & ((1 << mb) - 1));
        let all_exp = (1 << eb) - 1;
        match special {
            Special::Fnuz if code == 0x80 => return f32::NAN,
            Special::Fn if exp == all_exp && man == (1 << mb) - 1 => {
                return if negative { -f32::NAN } else { f32::NAN };
            }
            Special::Ieee if exp == all_exp => {
                let v = if man == 0 { f32::INFINITY } else { f32::NAN };
                return if negative { -v } else { v };
            }
            _ => {}
        }
        // value = n · 2^(e − M) with n the significand as an integer: exact in f32.
        let (n, e) = if exp == 0 {
            (man, 1 - bias)
        } else {
            (man + (1 << mb), exp - bias)
        };
        let v = n as f32 * 2f32.powi(e - mb as i32);
        if negative {
            -v
        } else {
            v
        }
    }

    /// Encodes `x` with round to nearest even; `saturate` as in ONNX `Cast` (see the module
    /// documentation for overflow, ∞ and NaN).
    pub fn encode(self, x: f32, saturate: bool) -> u8 {
        let (eb, mb, bias, special) = self.layout();
        let sign = if x.is_sign_negative() {
            1u8 << (eb + mb)
        } else {
            0
        };
        let nan = match special {
            Special::Fn => sign | 0x7F,
            Special::Ieee => sign | 0x7E,
            Special::Fnuz => 0x80,
            // ml_dtypes maps NaN to a zero with the sign bit flipped.
            Special::None => sign ^ 0x8,
        };
        if x.is_nan() {
            return nan;
        }
        let saturated = sign | self.max_code();
        let overflow = if saturate || special == Special::None {
            saturated
        } else {
            match special {
                Special::Ieee => sign | 0x7C,
                _ => nan,
            }
        };
        let a = f64::from(x.abs());
        if a.is_infinite() {
            return overflow;
        }
        if a == 0.0 {
            return if special == Special::Fnuz { 0 } else { sign };
        }
        // Binade of `a`, clamped to the format's smallest normal exponent (below it the
        // spacing is the subnormal one).
        let emin = 1 - bias;
        let e = ((x.abs().to_bits() >> 23) as i32 - 127).max(emin);
        // a / 2^(e − M) is exact in f64; round it to an integer significand n ∈ [0, 2^(M+1)].
        let n = round_half_even(a / 2f64.powi(e - mb as i32));
        if n * 2f64.powi(e - mb as i32) > f64::from(self.max()) {
            return overflow;
        }
        if n == 0.0 {
            return if special == Special::Fnuz { 0 } else { sign };
        }
        // (e − emin)·2^M + n is the IEEE-style magnitude code for normal and subnormal
        // values alike, including the carry n = 2^(M+1) into the next binade.
        let mag = (e - emin) as u32 * (1 << mb) + n as u32;
        sign | mag as u8
    }
}

fn round_half_even(v: f64) -> f64 {
    let r = v.round();
    if (r - v).abs() == 0.5 {
        2.0 * (v / 2.0).round()
    } else {
        r
    }
}

/// Rounding of a conversion to float8 E8M0 (`Cast`'s `round_mode` attribute).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum E8M0Rounding {
    /// Any fraction rounds to the next power of two (the default).
    Up,
    /// Truncate to the power of two below.
    Down,
    /// Nearest power of two, ties up.
    Nearest,
}

impl std::str::FromStr for E8M0Rounding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "up" => Ok(E8M0Rounding::Up),
            "down" => Ok(E8M0Rounding::Down),
            "nearest" => Ok(E8M0Rounding::Nearest),
            other => Err(format!(
                "unknown round_mode {other:?} (up, down or nearest)"
            )),
        }
    }
}

/// Encodes `x` as float8 E8M0 (`onnx.numpy_helper.to_float8e8m0`): the sign is ignored,
/// NaN and ±∞ give `0xFF` (NaN).
pub fn e8m0_encode(x: f32, saturate: bool, rounding: E8M0Rounding) -> u8 {
    let bits = x.to_bits();
    let exp = (bits >> 23) & 0xFF;
    if exp == 0xFF {
        return 0xFF;
    }
    let up = match rounding {
        E8M0Rounding::Up => bits & 0x7F_FFFF != 0,
        E8M0Rounding::Down => false,
        E8M0Rounding::Nearest => {
            let guard = bits & 0x40_0000 != 0;
            let round = bits & 0x20_0000 != 0;
            let sticky = bits & 0x1F_FFFF != 0;
            // The reference takes "the exponent is non-zero" as the least significant bit.
            guard && (round || sticky || exp > 0)
        }
    };
    if up && !(saturate && exp == 0xFE) {
        // 0xFE + 1 = 0xFF: NaN without saturation, as the reference's uint8 wrap gives.
        (exp + 1) as u8
    } else {
        exp as u8
    }
}

/// The value of an E8M0 code: `2^(code − 127)`, NaN for `0xFF`. Exact (`0x00` is the f32
/// subnormal 2⁻¹²⁷).
pub fn e8m0_decode(code: u8) -> f32 {
    if code == 0xFF {
        f32::NAN
    } else {
        (2f64).powi(i32::from(code) - 127) as f32
    }
}

/// Encodes an f32 as bfloat16 bits: round to nearest even, NaN kept NaN (quiet, same
/// sign), overflow to ±∞ (IEEE conversion, as `ml_dtypes`).
pub fn bf16_encode(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) as u16) | 0x40;
    }
    let round = 0x7FFF + ((b >> 16) & 1);
    (b.wrapping_add(round) >> 16) as u16
}

/// The f32 value of bfloat16 bits (exact).
pub fn bf16_decode(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `v` reduced to a `bits`-wide two's-complement (`signed`) or unsigned integer by
/// discarding the higher bits, as ONNX `Cast` defines out-of-range integer conversions
/// (`Cast(int32 → int4)` of 9 is −7).
pub fn wrap_int(v: i64, bits: u32, signed: bool) -> i64 {
    let low = v & ((1i64 << bits) - 1);
    if signed && low >= 1i64 << (bits - 1) {
        low - (1i64 << bits)
    } else {
        low
    }
}

/// A float value as ONNX `Cast` turns it into an integer before wrapping it to a narrow
/// integer type (`ml_dtypes`): truncated toward zero, NaN and ±∞ give 0.
pub fn float_to_int_for_wrap(x: f64) -> i64 {
    if x.is_finite() {
        x.trunc() as i64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips() {
        for f in MiniFloat::ALL {
            for code in 0..(1u16 << f.bits()) {
                let code = code as u8;
                let v = f.decode(code);
                if v.is_nan() {
                    assert!(f.decode(f.encode(v, true)).is_nan(), "{f:?} {code:#x}");
                    continue;
                }
                let expect = if v.is_infinite() { None } else { Some(code) };
                for sat in [true, false] {
                    let got = f.encode(v, sat);
                    match expect {
                        Some(c) => assert_eq!(got, c, "{f:?} code {code:#x} value {v} sat {sat}"),
                        None => {
                            // Only E5M2 has ∞: kept without saturation, ±max with it.
                            let want = if sat {
                                f.max_code() | (code & 0x80)
                            } else {
                                code
                            };
                            assert_eq!(got, want, "{f:?} ∞ {code:#x} sat {sat}");
                        }
                    }
                }
            }
        }
        for code in 0..=255u8 {
            let v = e8m0_decode(code);
            for mode in [E8M0Rounding::Up, E8M0Rounding::Down, E8M0Rounding::Nearest] {
                // 2^-127 is an f32 subnormal: its mantissa bits count as a fraction, so
                // the reference's `up` rounding moves it to 2^-126.
                let want = if code == 0 && mode == E8M0Rounding::Up {
                    1
                } else {
                    code
                };
                assert_eq!(e8m0_encode(v, true, mode), want, "e8m0 {code:#x} {mode:?}");
            }
        }
        for bits in 0..=u16::MAX {
            let v = bf16_decode(bits);
            if v.is_nan() {
                assert!(bf16_decode(bf16_encode(v)).is_nan());
            } else {
                assert_eq!(bf16_encode(v), bits);
            }
        }
    }

    #[test]
    fn named_values() {
        assert_eq!(MiniFloat::F8E4M3FN.max(), 448.0);
        assert_eq!(MiniFloat::F8E4M3FNUZ.max(), 240.0);
        assert_eq!(MiniFloat::F8E5M2.max(), 57344.0);
        assert_eq!(MiniFloat::F8E5M2FNUZ.max(), 57344.0);
        assert_eq!(MiniFloat::F4E2M1.max(), 6.0);
        // Ties to even: 464 lies halfway between 448 (mantissa 110) and 480 (not finite).
        assert_eq!(MiniFloat::F8E4M3FN.encode(464.0, false), 0x7E);
        assert_eq!(MiniFloat::F8E4M3FN.encode(465.0, false), 0x7F);
        assert_eq!(MiniFloat::F8E4M3FN.encode(-465.0, true), 0xFE);
        assert_eq!(MiniFloat::F8E5M2.encode(f32::INFINITY, false), 0x7C);
        assert_eq!(MiniFloat::F8E5M2.encode(1e9, true), 0x7B);
        assert_eq!(MiniFloat::F8E4M3FNUZ.encode(-0.0, true), 0x00);
        assert_eq!(MiniFloat::F4E2M1.encode(0.25, true), 0x0);
        assert_eq!(MiniFloat::F4E2M1.encode(0.75, true), 0x2);
        assert_eq!(MiniFloat::F4E2M1.encode(f32::NAN, true), 0x8);
        assert_eq!(e8m0_encode(0.0, true, E8M0Rounding::Up), 0x00);
        assert_eq!(e8m0_encode(1.1, true, E8M0Rounding::Up), 128);
        assert_eq!(e8m0_encode(f32::MAX, true, E8M0Rounding::Up), 0xFE);
        assert_eq!(e8m0_encode(f32::MAX, false, E8M0Rounding::Up), 0xFF);
        assert_eq!(wrap_int(9, 4, true), -7);
        assert_eq!(wrap_int(-3, 2, true), 1);
        assert_eq!(wrap_int(-1, 2, false), 3);
    }
}
