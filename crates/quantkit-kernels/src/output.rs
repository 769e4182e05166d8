//! Output stages: what happens to an int32 accumulator after the GEMM/conv inner loop.
//!
//! The stage applied to the zero-point-corrected accumulator `acc` of output column `j`
//! (see `docs/kernels.md`, equations K1–K4):
//!
//! ```text
//! (K2)  t = acc + bias[j]                                  (i32, wrapping)
//! (K3a) float mode (ONNX Runtime MLAS `MlasRequantizeOutput`):
//!       v = f32(t) · scale[j]                              (f32 conversion and multiply,
//!                                                          round to nearest even)
//!       v = min(max(v, f32(lo − z)), f32(hi − z))
//!       y = round_half_even(v) + z
//! (K3b) fixed-point mode (TFLite / gemmlowp):
//!       y = clamp(M0[j]·2^shift[j] applied to t with the chosen rounding + z, lo, hi)
//! (K4)  [lo, hi] = activation range ∩ range of the output type; fused ReLU/ReLU6 are
//!       just a narrower range.
//! ```
//!
//! Float mode clamps before rounding exactly like MLAS does; since `lo − z` and `hi − z` are
//! integers this equals `clamp(round_half_even(v) + z, lo, hi)`, so results equal ONNX
//! Runtime's QLinearMatMul/QLinearConv bit for bit when the caller passes the same f32
//! multiplier (ONNX Runtime computes it as `f32(a_scale · b_scale / y_scale)` in f32).

use quantkit_core::fixed_point::{FixedPointRounding, QuantizedMultiplier};

use crate::error::{KernelError, Result};

/// An 8-bit quantized output type: quantkit-core's one code trait, re-exported here where
/// the kernels have always named it.
pub use quantkit_core::QuantType;

/// How the int32 accumulator is scaled to the output scale.
#[derive(Debug, Clone, PartialEq)]
pub enum Requant {
    /// f32 multiplier per tensor (1 entry) or per output channel, `s_a·s_w/s_out`;
    /// equation (K3a). The default for ONNX models.
    Float(Vec<f32>),
    /// Fixed-point multiplier `M0·2^shift` per tensor or per channel; equation (K3b).
    FixedPoint {
        /// One entry or one per output channel.
        multipliers: Vec<QuantizedMultiplier>,
        /// Rounding variant of the final shift.
        rounding: FixedPointRounding,
    },
}

impl Requant {
    fn len(&self) -> usize {
        match self {
            Requant::Float(s) => s.len(),
            Requant::FixedPoint { multipliers, .. } => multipliers.len(),
        }
    }
}

/// A fused output stage: bias, requantization, output zero point, activation clamp.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputStage {
    /// Optional int32 bias per output channel (scale `s_a·s_w`, zero point 0).
    pub bias: Option<Vec<i32>>,
    /// Requantization multiplier(s).
    pub requant: Requant,
    /// Output zero point.
    pub zero_point: i32,
    /// Lower end of the activation range, in the output's quantized domain.
    pub act_min: i32,
    /// Upper end of the activation range, in the output's quantized domain.
    pub act_max: i32,
}

impl OutputStage {
    /// Float-scale requantization (K3a) with no bias and no activation clamp.
    pub fn float(scales: Vec<f32>, zero_point: i32) -> Self {
        OutputStage {
            bias: None,
            requant: Requant::Float(scales),
            zero_point,
            act_min: i32::MIN,
            act_max: i32::MAX,
        }
    }

    /// Fixed-point requantization (K3b) with no bias and no activation clamp.
    pub fn fixed_point(
        multipliers: Vec<QuantizedMultiplier>,
        rounding: FixedPointRounding,
        zero_point: i32,
    ) -> Self {
        OutputStage {
            bias: None,
            requant: Requant::FixedPoint {
                multipliers,
                rounding,
            },
            zero_point,
            act_min: i32::MIN,
            act_max: i32::MAX,
        }
    }

    /// Adds an int32 bias per output channel.
    pub fn with_bias(mut self, bias: Vec<i32>) -> Self {
        self.bias = Some(bias);
        self
    }

    /// Clamps the output to `[min, max]` (quantized domain), e.g. a fused ReLU is
    /// `with_clamp(zero_point, 255)` for u8 output.
    pub fn with_clamp(mut self, min: i32, max: i32) -> Self {
        self.act_min = min;
        self.act_max = max;
        self
    }

    /// Checks the per-channel vectors against `channels` output channels.
    pub fn validate(&self, op: &'static str, channels: usize) -> Result<()> {
        let n = self.requant.len();
        if n != 1 && n != channels {
            return Err(KernelError::ChannelCount {
                op,
                arg: "requant",
                channels,
                got: n,
            });
        }
        if let Some(b) = &self.bias {
            if b.len() != channels {
                return Err(KernelError::BufferLength {
                    op,
                    arg: "bias",
                    expected: channels,
                    got: b.len(),
                });
            }
        }
        if let Requant::Float(s) = &self.requant {
            if let Some(bad) = s.iter().find(|s| !s.is_finite() || **s < 0.0) {
                return Err(KernelError::InvalidArgument {
                    op,
                    arg: "requant",
                    reason: format!("scale {bad} is not a finite non-negative number"),
                });
            }
        }
        if self.act_min > self.act_max {
            return Err(KernelError::InvalidArgument {
                op,
                arg: "act_min/act_max",
                reason: format!("empty range [{}, {}]", self.act_min, self.act_max),
            });
        }
        Ok(())
    }

    /// Whether the stage is non-decreasing in the accumulator over `|acc| ≤ bound`, so
    /// that `stage(max(a, b)) = max(stage(a), stage(b))` there (a max pool can then run on
    /// the sums before the stage). Float requantization is (scales are ≥ 0, and conversion,
    /// product, clamp and rounding are each monotone); fixed-point is with non-negative
    /// multipliers. The bias must not wrap: `bound + |bias| ≤ i32::MAX`.
    pub fn is_monotone_within(&self, bound: i64) -> bool {
        let bias_ok = self
            .bias
            .as_deref()
            .unwrap_or(&[])
            .iter()
            .all(|&b| bound.saturating_add((b as i64).abs()) <= i32::MAX as i64)
            && bound <= i32::MAX as i64;
        let requant_ok = match &self.requant {
            Requant::Float(s) => s.iter().all(|&s| s >= 0.0),
            Requant::FixedPoint { multipliers, .. } => {
                multipliers.iter().all(|m| m.multiplier >= 0)
            }
        };
        bias_ok && requant_ok
    }

    /// The clamp range intersected with the output type's range (K4).
    pub fn range<T: QuantType>(&self) -> (i32, i32) {
        (self.act_min.max(T::MIN), self.act_max.min(T::MAX))
    }

    /// Applies the stage to one accumulator of output channel `j` (scalar reference of
    /// equations K2–K4). SIMD epilogues must equal this bit for bit.
    #[inline(always)]
    pub fn apply<T: QuantType>(&self, acc: i32, j: usize) -> T {
        let (lo, hi) = self.range::<T>();
        let t = match &self.bias {
            Some(b) => acc.wrapping_add(b[j]),
            None => acc,
        };
        T::from_clamped(self.requant_one(t, j, lo, hi))
    }

    /// (K3)+(K4) for one already-biased accumulator, result in `[lo, hi]`.
    #[inline(always)]
    pub(crate) fn requant_one(&self, t: i32, j: usize, lo: i32, hi: i32) -> i32 {
        let z = self.zero_point;
        match &self.requant {
            Requant::Float(s) => {
                let s = if s.len() == 1 { s[0] } else { s[j] };
                float_requant(t, s, z, lo, hi)
            }
            Requant::FixedPoint {
                multipliers,
                rounding,
            } => {
                let m = if multipliers.len() == 1 {
                    multipliers[0]
                } else {
                    multipliers[j]
                };
                let v = (m.apply(t, *rounding) as i64) + z as i64;
                v.clamp(lo as i64, hi as i64) as i32
            }
        }
    }
}

/// Equation (K3a): `min(max(f32(t)·s, lo−z), hi−z)` rounded half to even, plus `z` —
/// quantkit-core's [`quantkit_core::requantize_float`], the one definition (MLAS's clamp
/// before rounding, f32 multiply, wrapping add of `z`).
#[inline(always)]
pub fn float_requant(t: i32, s: f32, z: i32, lo: i32, hi: i32) -> i32 {
    quantkit_core::requantize_float(t, s, z, lo, hi)
}

/// Round half to even of an f32 without a libm call: quantkit-core's
/// [`quantkit_core::linear::round_half_even`] (`(v + 1.5·2^23) − 1.5·2^23` below 2^22,
/// `round_ties_even` above), re-exported for the SIMD epilogues' scalar tails.
pub use quantkit_core::linear::round_half_even;
