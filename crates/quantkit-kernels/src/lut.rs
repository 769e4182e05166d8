//! 256-entry lookup tables for element-wise functions on 8-bit tensors.
//!
//! `table[q] = saturate(round_half_even(f(s_in·(q − z_in)) / s_out) + z_out)` with `f`
//! evaluated in f64 — the exact quantized value of the function at every representable input,
//! so applying the table is as accurate as an 8-bit output can be.

use crate::eltwise::QParams;
use crate::output::QuantType;

/// Functions with ready-made tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// `1 / (1 + e^−x)`.
    Sigmoid,
    /// `tanh x`.
    Tanh,
    /// `x · relu6(x + 3) / 6` (ONNX HardSwish).
    HardSwish,
    /// `x · Φ(x) = x/2 · (1 + erf(x/√2))` (exact GELU).
    Gelu,
    /// `e^x`.
    Exp,
}

impl Function {
    /// Evaluates the function in f64.
    pub fn eval(self, x: f64) -> f64 {
        match self {
            Function::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Function::Tanh => x.tanh(),
            Function::HardSwish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
            Function::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
            Function::Exp => x.exp(),
        }
    }
}

/// erf: Maclaurin series for `|x| < 0.5`, Abramowitz–Stegun 7.1.26 rational approximation
/// (`|error| ≤ 1.5·10⁻⁷`, far below an 8-bit output step) elsewhere.
pub fn erf(x: f64) -> f64 {
    let s = x.signum();
    let x = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let mut y = 1.0 - poly * (-x * x).exp();
    if x < 0.5 {
        let mut term = x;
        let mut sum = x;
        for n in 1..20 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        y = sum * 2.0 / std::f64::consts::PI.sqrt();
    }
    s * y
}

/// A 256-entry table indexed by the input's byte pattern.
#[derive(Debug, Clone)]
pub struct Lut8 {
    table: [i32; 256],
}

impl Lut8 {
    /// Builds the table of `f` for input type `I` with parameters `qi` and output type `O`
    /// with parameters `qo`.
    pub fn new<I: QuantType, O: QuantType>(
        f: impl Fn(f64) -> f64,
        qi: QParams,
        qo: QParams,
    ) -> Self {
        let mut table = [0i32; 256];
        for q in I::MIN..=I::MAX {
            let x = qi.scale as f64 * (q - qi.zero_point) as f64;
            let y = f(x) / qo.scale as f64;
            let r = if y.is_nan() { 0.0 } else { y.round_ties_even() };
            let v = (r + qo.zero_point as f64).clamp(O::MIN as f64, O::MAX as f64) as i32;
            table[(q & 0xff) as usize] = v;
        }
        Lut8 { table }
    }

    /// Table of one of the built-in [`Function`]s.
    pub fn function<I: QuantType, O: QuantType>(f: Function, qi: QParams, qo: QParams) -> Self {
        Self::new::<I, O>(|x| f.eval(x), qi, qo)
    }

    /// Output value for input `x`.
    #[inline]
    pub fn lookup<I: QuantType, O: QuantType>(&self, x: I) -> O {
        O::from_clamped(self.table[(x.to_i32() & 0xff) as usize])
    }

    /// Applies the table element-wise; `x` and `y` have the same length (extra elements of
    /// the longer one are left alone).
    pub fn apply<I: QuantType, O: QuantType>(&self, x: &[I], y: &mut [O]) {
        for (d, &s) in y.iter_mut().zip(x) {
            *d = self.lookup(s);
        }
    }
}

/// Applies a 256-entry map of 8-bit codes in place, `data[i] = table[data[i]]` (a code
/// table built by [`Lut8`] or by composing tables), on the dispatched ISA: AVX-512 VBMI
/// `vpermi2b` where the CPU has it (64 bytes per three shuffles), AVX2 `vpshufb` on 16 rows
/// of 16 entries (32 bytes per 64 vector operations) otherwise, scalar without AVX2. Every
/// path gives the same bytes.
pub fn apply_codes(table: &[u8; 256], data: &mut [u8]) {
    (crate::dispatch::kernels().lut())(table, data)
}

/// [`apply_codes`] with the kernel of `isa`'s table; `UnsupportedIsa` when the CPU lacks it.
pub fn apply_codes_with(
    isa: crate::Isa,
    table: &[u8; 256],
    data: &mut [u8],
) -> crate::error::Result<()> {
    (crate::dispatch::table_for(isa)?.lut())(table, data);
    Ok(())
}
