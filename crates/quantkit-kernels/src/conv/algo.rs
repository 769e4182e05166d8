//! Which algorithm runs a convolution: a small cost model per instruction set, and the
//! `QUANTKIT_CONV_ALGO` override.
//!
//! Every algorithm gives the same exact sums (`Σ (x − za)(w − zw)`), so the choice is
//! about speed only. The model estimates the cycles one output pixel costs on one core with
//! each algorithm the conv is eligible for, and picks the cheapest:
//!
//! ```text
//! im2col   9·C_in·C_out / R_u8  +  K·p_pack            (K = kh·kw·C_in bytes gathered and packed)
//! pairs    2·W·C_out / R_pair   +  W·p_word            (W words of channel/row pairs, C_in ≤ 4)
//! winograd 4·C_in·C_out / R_i16 +  4·C_in·p_in + 4·C_out·p_out
//! ```
//!
//! (a 2×2 Winograd tile is 16 products per input/output channel pair for 4 pixels, its
//! input transform 16 values per input channel and its output transform 16 sums per output
//! channel; the output stage costs every algorithm the same and is left out). The rates
//! `R` (multiply-accumulates per cycle the micro-kernel sustains) and the per-element costs
//! `p` (cycles) are per ISA, in [`Rates::of`]; they were measured on the machines the
//! project runs on with `quantkit bench conv --algo …` (BENCHMARKS.md) and are rough, but
//! the choices they make only have to be right where the algorithms differ by more than
//! the model's error. `QUANTKIT_CONV_ALGO=auto|im2col|winograd|pairs` (or
//! [`ConvWeights::for_isa`](super::ConvWeights::for_isa) with an explicit choice) overrides
//! the model for every conv the forced algorithm can run, so a measurement can confirm or
//! correct it.

use std::sync::OnceLock;

use crate::dispatch::Isa;

/// How a convolution that is not depthwise is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConvAlgorithm {
    /// The cost model's choice for the ISA the weights are packed for (module docs):
    /// among the algorithms below that the conv is eligible for, the cheapest estimate.
    #[default]
    Auto,
    /// im2col + GEMM (the reference path the others are tested against): every conv.
    Im2col,
    /// Exact integer Winograd F(2×2, 3×3) ([`crate::winograd`]) wherever it applies: 3×3,
    /// stride 1, undilated, one group, at least 8 input channels, within its exactness
    /// bound; the model's choice elsewhere.
    Winograd,
    /// im2col + GEMM with k-pairs of channel pairs and row pairs packed from planes of the
    /// padded input (`small_cin`) wherever it applies: one group, C_in ≤ 4, not 1×1
    /// stride-1 unpadded, weight zero points in the i8 range; the model's choice elsewhere.
    Pairs,
}

/// Names accepted by `QUANTKIT_CONV_ALGO` and [`ConvAlgorithm::parse`].
pub const CONV_ALGO_NAMES: [&str; 4] = ["auto", "im2col", "winograd", "pairs"];

impl ConvAlgorithm {
    /// Its name as `QUANTKIT_CONV_ALGO` spells it.
    pub fn name(self) -> &'static str {
        match self {
            ConvAlgorithm::Auto => "auto",
            ConvAlgorithm::Im2col => "im2col",
            ConvAlgorithm::Winograd => "winograd",
            ConvAlgorithm::Pairs => "pairs",
        }
    }

    /// Parses a name of [`CONV_ALGO_NAMES`] (case-insensitive; `direct` and `gemm` are
    /// accepted for `im2col`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => ConvAlgorithm::Auto,
            "im2col" | "gemm" | "direct" => ConvAlgorithm::Im2col,
            "winograd" => ConvAlgorithm::Winograd,
            "pairs" | "small-cin" => ConvAlgorithm::Pairs,
            _ => return None,
        })
    }

    /// `QUANTKIT_CONV_ALGO`, read once per process: [`ConvAlgorithm::Auto`] when unset; an
    /// unknown value is reported once on stderr and ignored.
    pub fn from_env() -> Self {
        static CHOSEN: OnceLock<ConvAlgorithm> = OnceLock::new();
        *CHOSEN.get_or_init(|| match std::env::var("QUANTKIT_CONV_ALGO") {
            Ok(v) => ConvAlgorithm::parse(&v).unwrap_or_else(|| {
                eprintln!(
                    "quantkit: QUANTKIT_CONV_ALGO={v:?} is not one of {}; using auto",
                    CONV_ALGO_NAMES.join(", ")
                );
                ConvAlgorithm::Auto
            }),
            Err(_) => ConvAlgorithm::Auto,
        })
    }
}

/// What the model needs to know about a conv (one group's view for grouped convs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConvShape {
    pub(crate) c_in: usize,
    pub(crate) c_out: usize,
    pub(crate) kernel: [usize; 2],
    /// Words per output pixel of the pairs packing (0 when it does not apply).
    pub(crate) pair_words: usize,
}

/// An algorithm the model weighs (depthwise and 1×1 convs have one path each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Candidate {
    Im2col,
    Pairs,
    Winograd,
}

/// Per-ISA rates of the cost model (module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rates {
    /// u8×i8 MACs per cycle of the GEMM micro-kernel on packed panels.
    r_u8: f64,
    /// MACs per cycle of the pairs GEMM (the few-channel conv's kernel).
    r_pair: f64,
    /// i16 MACs per cycle of Winograd's GEMMs.
    r_i16: f64,
    /// Cycles per byte of K gathered (implicit im2col) and packed.
    p_pack: f64,
    /// Cycles per word of the pairs packing.
    p_word: f64,
    /// Cycles per value of Winograd's input transform.
    p_in: f64,
    /// Cycles per value of Winograd's output transform.
    p_out: f64,
}

impl Rates {
    /// The model's rates for `isa` (module docs; BENCHMARKS.md has the measurements).
    pub(crate) fn of(isa: Isa) -> Rates {
        match isa {
            // Portable code: the compiler's own vectorisation at the baseline ISA.
            Isa::Scalar => Rates {
                r_u8: 4.0,
                r_pair: 4.0,
                r_i16: 4.0,
                p_pack: 1.0,
                p_word: 1.0,
                p_in: 2.0,
                p_out: 2.0,
            },
            // vpmaddwd on ymm: 16 MACs per multiply uop, two per cycle.
            Isa::Avx2 => Rates {
                r_u8: 24.0,
                r_pair: 24.0,
                r_i16: 24.0,
                p_pack: 0.15,
                p_word: 0.3,
                p_in: 0.25,
                p_out: 0.25,
            },
            // vpdpbusd on zmm: 64 MACs per instruction; vpdpwssd (Winograd): 32.
            Isa::Avx512Vnni => Rates {
                r_u8: 48.0,
                r_pair: 24.0,
                r_i16: 28.0,
                p_pack: 0.3,
                p_word: 0.3,
                p_in: 0.25,
                p_out: 0.25,
            },
        }
    }

    /// Estimated cycles per output pixel of `shape` with `algo`.
    pub(crate) fn cycles(&self, shape: &ConvShape, algo: Candidate) -> f64 {
        let (ci, co) = (shape.c_in as f64, shape.c_out as f64);
        let k = (shape.kernel[0] * shape.kernel[1]) as f64 * ci;
        match algo {
            Candidate::Im2col => k * co / self.r_u8 + k * self.p_pack,
            Candidate::Pairs => {
                let w = shape.pair_words as f64;
                2.0 * w * co / self.r_pair + w * self.p_word
            }
            Candidate::Winograd => {
                4.0 * ci * co / self.r_i16 + 4.0 * (ci * self.p_in + co * self.p_out)
            }
        }
    }

    /// The cheapest of `eligible` (in order of preference on ties), `Im2col` if empty.
    pub(crate) fn cheapest(&self, shape: &ConvShape, eligible: &[Candidate]) -> Candidate {
        eligible
            .iter()
            .copied()
            .min_by(|&a, &b| self.cycles(shape, a).total_cmp(&self.cycles(shape, b)))
            .unwrap_or(Candidate::Im2col)
    }
}
