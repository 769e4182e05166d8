//! Which algorithm runs a transposed convolution, and the `QUANTKIT_DECONV_ALGO` override.
//!
//! Both algorithms run the same int8 GEMM `[N·H·W, C_in/g] × [C_in/g, kh·kw·C_out/g]`
//! (weights packed once, tap-major columns) and give bit-identical outputs; they differ in
//! what happens to its result:
//!
//! ```text
//! col2im  T·C_out·C_in/R_u8 + T·C_out·(p_i32 + p_add) + s²·C_out·p_stage   per input pixel
//! blocks  T·C_out·C_in/R_u8 + T·C_out·(p_stage + p_copy)                  per input pixel
//! ```
//!
//! (T = kh·kw taps, s² output pixels per input pixel.) `col2im` writes the GEMM's i32 sums
//! to a column buffer (`p_i32`, 4 bytes per sum), adds each into an i32 output image
//! (`p_add`: the overlap-add, needed when taps of neighbouring input pixels land on the
//! same output pixel), then runs the output stage over the image. `blocks` applies only
//! where taps never overlap (`dilation·(kernel − 1) < stride` on both axes: each output
//! pixel receives at most one product sum, e.g. `kernel == stride`, the 2×2 stride-2 deconv
//! of U-Nets and detection heads): the GEMM's own fused output stage (SIMD stores, as every
//! conv) turns each block of rows into codes in a cache-resident buffer, whose bytes are
//! copied straight to their shuffled positions (`p_copy` per byte). Every term of `blocks`
//! is at most the matching one of `col2im` (`p_copy < p_i32 + p_add`, and the output stage
//! runs once per sum in both when taps cover the output; where they leave gaps, `blocks`
//! fills them with the per-channel constant `stage(0)`, which `col2im` also computes per
//! pixel), so the model reduces to eligibility: `auto` picks `blocks` wherever it applies.
//! Measured on the PP-OCRv4 detector's two 2×2 stride-2 deconvs and `quantkit bench
//! conv`'s U-Net deconv (BENCHMARKS.md). `QUANTKIT_DECONV_ALGO=auto|col2im|blocks` (or
//! [`DeconvWeights::with_algorithm`](super::DeconvWeights::with_algorithm)) forces one
//! where it applies, so a measurement can confirm or correct the choice.

use std::sync::OnceLock;

use crate::conv::ConvParams;

/// How a transposed conv is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeconvAlgorithm {
    /// `blocks` wherever it applies, else `col2im` (module docs).
    #[default]
    Auto,
    /// GEMM to i32 columns, exact overlap-add, then the output stage: every transposed conv.
    Col2im,
    /// GEMM with the fused output stage per block of rows, codes copied to their shuffled
    /// positions: transposed convs whose taps never overlap; `col2im` elsewhere.
    Blocks,
}

/// Names accepted by `QUANTKIT_DECONV_ALGO` and [`DeconvAlgorithm::parse`].
pub const DECONV_ALGO_NAMES: [&str; 3] = ["auto", "col2im", "blocks"];

impl DeconvAlgorithm {
    /// Its name as `QUANTKIT_DECONV_ALGO` spells it.
    pub fn name(self) -> &'static str {
        match self {
            DeconvAlgorithm::Auto => "auto",
            DeconvAlgorithm::Col2im => "col2im",
            DeconvAlgorithm::Blocks => "blocks",
        }
    }

    /// Parses a name of [`DECONV_ALGO_NAMES`] (case-insensitive).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => DeconvAlgorithm::Auto,
            "col2im" | "gemm" => DeconvAlgorithm::Col2im,
            "blocks" | "shuffle" => DeconvAlgorithm::Blocks,
            _ => return None,
        })
    }

    /// `QUANTKIT_DECONV_ALGO`, read once per process: [`DeconvAlgorithm::Auto`] when unset;
    /// an unknown value is reported once on stderr and ignored.
    pub fn from_env() -> Self {
        static CHOSEN: OnceLock<DeconvAlgorithm> = OnceLock::new();
        *CHOSEN.get_or_init(|| match std::env::var("QUANTKIT_DECONV_ALGO") {
            Ok(v) => DeconvAlgorithm::parse(&v).unwrap_or_else(|| {
                eprintln!(
                    "quantkit: QUANTKIT_DECONV_ALGO={v:?} is not one of {}; using auto",
                    DECONV_ALGO_NAMES.join(", ")
                );
                DeconvAlgorithm::Auto
            }),
            Err(_) => DeconvAlgorithm::Auto,
        })
    }

    /// The algorithm that runs a transposed conv of `params` when `self` is asked for:
    /// [`DeconvAlgorithm::Col2im`] or [`DeconvAlgorithm::Blocks`], never `Auto`.
    pub fn resolve(self, params: &ConvParams) -> DeconvAlgorithm {
        match self {
            DeconvAlgorithm::Col2im => DeconvAlgorithm::Col2im,
            DeconvAlgorithm::Auto | DeconvAlgorithm::Blocks => {
                if taps_never_overlap(params) {
                    DeconvAlgorithm::Blocks
                } else {
                    DeconvAlgorithm::Col2im
                }
            }
        }
    }
}

/// True when no two (input pixel, tap) pairs reach the same output pixel: on each axis
/// the taps of one input pixel, at `i·s + k·d` for `k < kernel`, stay inside its own stride
/// window `[i·s, i·s + s)`, i.e. `d·(kernel − 1) < s`. Then the output position determines
/// the input pixel (`pos / s`) and the tap (`(pos mod s) / d`).
pub(crate) fn taps_never_overlap(p: &ConvParams) -> bool {
    (0..2).all(|i| p.dilation[i] * (p.kernel[i] - 1) < p.stride[i])
}

/// True when every output pixel receives a tap (`kernel == stride`, undilated, no output
/// padding, on both axes), so the blocks path need not fill gaps first.
pub(crate) fn taps_cover_output(p: &ConvParams, output_padding: [usize; 2]) -> bool {
    (0..2).all(|i| p.kernel[i] == p.stride[i] && p.dilation[i] == 1 && output_padding[i] == 0)
}
