//! PRelu on u8 codes with one slope per channel, computed rather than looked up:
//! `y = Q(PRelu(DQ(x)))` with quantkit-core's equations (2) and (1) in f32,
//!
//! ```text
//! v = f32(x − z_in) · s_in                       (DequantizeLinear, eq. 2)
//! v = v < 0 ? slope[c] · v : v                   (PRelu, ONNX: where(x < 0, slope·x, x))
//! y = clamp(round_half_even(v / s_out) + z_out, 0, 255)   (QuantizeLinear, eq. 1)
//! ```
//!
//! the same IEEE f32 steps in the same order as `quantize_code(prelu(dequantize_code(x)))`,
//! so the portable loop and the AVX2 and AVX-512 kernels (`x86_64/*/prelu.rs`, 8 and 16
//! channels per step) give the same bytes. A
//! per-channel 256-entry table gives the same bytes too, but one lookup per byte with a
//! different table every byte does not vectorise; this loop does (16 channels per
//! instruction on AVX-512). The engine uses it only after checking that it reproduces the
//! graph's own operators on all 256 codes of every channel.

use quantkit_core::{dequantize_code, quantize_code};

use crate::dispatch::{Body, Isa};
use crate::error::{KernelError, Result};

/// The parameters of a per-channel PRelu on u8 codes (NHWC: the channel is the last axis).
#[derive(Debug, Clone)]
pub struct PreluCodes {
    slopes: Vec<f32>,
    s_in: f32,
    z_in: i32,
    s_out: f32,
    z_out: i32,
}

impl PreluCodes {
    /// `None` unless every number is finite, the scales positive and normal, the slopes at
    /// most 10⁶ in magnitude (no f32 overflow for 8-bit inputs: `|v / s_out|` stays finite)
    /// and the zero points u8 codes.
    pub fn new(slopes: Vec<f32>, s_in: f32, z_in: i32, s_out: f32, z_out: i32) -> Option<Self> {
        let scale_ok = |s: f32| s.is_normal() && s > 0.0;
        let ok = !slopes.is_empty()
            && slopes.iter().all(|k| k.is_finite() && k.abs() <= 1e6)
            && scale_ok(s_in)
            && scale_ok(s_out)
            && (s_in / s_out).is_finite()
            && (0..=255).contains(&z_in)
            && (0..=255).contains(&z_out);
        ok.then_some(PreluCodes {
            slopes,
            s_in,
            z_in,
            s_out,
            z_out,
        })
    }

    /// Channels.
    pub fn channels(&self) -> usize {
        self.slopes.len()
    }

    /// The output code of input code `x` in channel `c` (the reference the loops equal).
    pub fn code(&self, x: u8, c: usize) -> u8 {
        let v = dequantize_code::<u8>(x, self.s_in, self.z_in);
        let v = if v < 0.0 { self.slopes[c] * v } else { v };
        quantize_code::<u8>(v, self.s_out, self.z_out)
    }

    /// Maps `data` (whole pixels of [`Self::channels`] codes) in place on the dispatched
    /// ISA.
    pub fn apply(&self, data: &mut [u8]) -> Result<()> {
        self.apply_with(crate::dispatch::isa(), data)
    }

    /// [`Self::apply`] with the loop copy of `isa`; `UnsupportedIsa` when the CPU lacks it,
    /// `BufferLength` when `data` is not whole pixels.
    pub fn apply_with(&self, isa: Isa, data: &mut [u8]) -> Result<()> {
        let c = self.channels();
        if !data.len().is_multiple_of(c) {
            return Err(KernelError::BufferLength {
                op: "prelu_codes",
                arg: "data",
                expected: data.len().next_multiple_of(c),
                got: data.len(),
            });
        }
        let body = PreluBody {
            slopes: &self.slopes,
            s_in: self.s_in,
            z_in: self.z_in as f32,
            s_out: self.s_out,
            z_out: self.z_out as f32,
        };
        let table = crate::dispatch::table_for(isa)?;
        // Counts the call as SIMD when it is.
        let copy = table.elementwise();
        #[cfg(target_arch = "x86_64")]
        {
            use crate::x86_64::{avx2, avx512vnni};
            let args = avx512vnni::prelu::PreluArgs {
                slopes: body.slopes,
                s_in: body.s_in,
                z_in: body.z_in,
                s_out: body.s_out,
                z_out: body.z_out,
            };
            match table.isa() {
                // SAFETY (both arms): `table_for` gives an ISA's table only when the CPU has
                // its instructions (`Isa::is_supported`: AVX-512 F/BW/VL/VNNI, AVX2);
                // `data` is whole pixels (checked above).
                Isa::Avx512Vnni => {
                    unsafe { avx512vnni::prelu::avx512_prelu_u8_16(&args, data) };
                    return Ok(());
                }
                Isa::Avx2 => {
                    unsafe { avx2::prelu::avx2_prelu_u8_8(&args, data) };
                    return Ok(());
                }
                Isa::Scalar => {}
            }
        }
        copy.run(&body, data, &mut [] as &mut [u8]);
        Ok(())
    }
}

/// The loop of [`PreluCodes::apply`], compiled once per ISA ([`Body`]).
struct PreluBody<'a> {
    slopes: &'a [f32],
    s_in: f32,
    z_in: f32,
    s_out: f32,
    z_out: f32,
}

impl Body<u8, u8> for PreluBody<'_> {
    #[inline(always)]
    fn run(&self, a: &mut [u8], _: &mut [u8]) {
        // quantize_code's rounding: (d + 1.5·2^23) − 1.5·2^23 is round-half-even for
        // |d| < 2^22 and the clamp below takes care of larger values; NaN cannot occur
        // (finite, bounded parameters: `PreluCodes::new`).
        const MAGIC: f32 = 12_582_912.0;
        let c = self.slopes.len();
        for px in a.chunks_exact_mut(c) {
            for (q, &k) in px.iter_mut().zip(self.slopes) {
                // (x − z_in) is exact in f32 (|x − z_in| ≤ 255), as dequantize_code's i32
                // difference converted.
                let v = (*q as f32 - self.z_in) * self.s_in;
                let v = if v < 0.0 { k * v } else { v };
                let r = (v / self.s_out + MAGIC) - MAGIC;
                // max/min as quantize_code has them (clamp's assertion keeps loops scalar).
                #[allow(clippy::manual_clamp)]
                let y = (r + self.z_out).max(0.0).min(255.0);
                *q = y as u8;
            }
        }
    }
}
