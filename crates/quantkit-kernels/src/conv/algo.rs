//! Which algorithm runs a convolution: a small cost model per instruction set, and the
//! `QUANTKIT_CONV_ALGO` override.
//!
//! Every algorithm gives the same exact sums (`Σ (x − za)(w − zw)`), so the choice is
//! about speed only. The model estimates the cycles one output pixel costs on one core with
//! each algorithm the conv is eligible for, and picks the cheapest:
//!
//! ```text
//! im2col   K·C_out / R_u8        + K·p_pack + T·p_tap   (K = T·C_in bytes gathered and packed, T taps)
//! pairs    2·W·C_out / R_pair    + p_pair               (W words of channel/row pairs, C_in ≤ 4)
//! winograd 4·C_in·C_out / R_i16  + 4·(C_in + C_out)·p_wino
//! wino4    2.25·C_in·C_out / R_i16 + 2.25·(C_in + C_out)·p_wino4
//! direct   4·W_d·C_out / R_direct + p_direct            (W_d words: T·⌈C_in/4⌉ channel quads, or
//!                                                        kh·⌈kw·C_in/4⌉ row words when fewer)
//! ```
//!
//! (a 2×2 Winograd tile is 16 products per input/output channel pair for 4 pixels, its
//! input transform 16 values per input channel and its output transform 16 sums per output
//! channel; F(4×4, 3×3): 36 products per pair for 16 pixels, 36 values per channel each
//! way; the output stage costs every algorithm the same and is left out). When the
//! output plane's size is known (the engine passes it,
//! [`ConvWeights::for_output`](super::ConvWeights::for_output)),
//! Winograd's estimate is multiplied by its tile cover, `t²·⌈oh/t⌉·⌈ow/t⌉ / (oh·ow)` for
//! tiles of `t×t` outputs: the tiles past an edge that is not a multiple of `t` are
//! computed in full and thrown away, 10 % of a 21×21 plane with F(2×2) (MTCNN O-Net's
//! second conv, where that made Winograd 0.058 ms against the direct conv's 0.050 ms) and
//! 31 % of LeNet's 14×14 plane with F(4×4) (which made LeNet 5–8 % slower than F(2×2);
//! BENCHMARKS.md 2026-11-25). The rates
//! `R` (multiply-accumulates per nanosecond the micro-kernel sustains on one core) and the
//! per-element costs `p` (nanoseconds) are per ISA, in [`Rates::of`]: fitted to
//! `quantkit bench conv --algo …` (BENCHMARKS.md) and rough, but the choices they make only
//! have to be right where the algorithms differ by more than the model's error.
//! `QUANTKIT_CONV_ALGO=auto|im2col|winograd|winograd4|pairs|direct` (or
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
    /// Exact integer Winograd F(4×4, 3×3) ([`crate::winograd`], "F(4×4, 3×3)"): 2.25
    /// products per output instead of F(2×2)'s 4, wherever it applies (as
    /// [`Self::Winograd`]) and every output channel's `255·Σ|w − zw|` is below 2^25;
    /// F(2×2) where only that one is exact; the model's choice elsewhere.
    Winograd4,
    /// The direct (im2col-free) convolution: the `vpdpbusd` tile reads the words of four
    /// channels straight from a padded copy of the input (`conv/direct.rs`) wherever it
    /// applies: one group, weight zero points 0, not 1×1 stride-1 unpadded; the model's
    /// choice elsewhere. Portable code on ISAs without AVX-512 VNNI (slow there).
    Direct,
}

/// Names accepted by `QUANTKIT_CONV_ALGO` and [`ConvAlgorithm::parse`].
pub const CONV_ALGO_NAMES: [&str; 6] =
    ["auto", "im2col", "winograd", "winograd4", "pairs", "direct"];

impl ConvAlgorithm {
    /// Its name as `QUANTKIT_CONV_ALGO` spells it.
    pub fn name(self) -> &'static str {
        match self {
            ConvAlgorithm::Auto => "auto",
            ConvAlgorithm::Im2col => "im2col",
            ConvAlgorithm::Winograd => "winograd",
            ConvAlgorithm::Winograd4 => "winograd4",
            ConvAlgorithm::Pairs => "pairs",
            ConvAlgorithm::Direct => "direct",
        }
    }

    /// Parses a name of [`CONV_ALGO_NAMES`] (case-insensitive; `gemm` is accepted for
    /// `im2col`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => ConvAlgorithm::Auto,
            "im2col" | "gemm" => ConvAlgorithm::Im2col,
            "direct" => ConvAlgorithm::Direct,
            "winograd" => ConvAlgorithm::Winograd,
            "winograd4" => ConvAlgorithm::Winograd4,
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
    /// Words (k-groups of 4 bytes) per output pixel of the direct conv: channel quads per
    /// tap, or row words when fewer (`conv/direct.rs`, [`super::direct::direct_kgroups`]).
    pub(crate) direct_words: usize,
    /// The output plane `[oh, ow]` when the caller knows it.
    pub(crate) out_hw: Option<[usize; 2]>,
}

impl ConvShape {
    /// Pixels Winograd with `tile×tile` output tiles (2 for F(2×2, 3×3), 4 for F(4×4, 3×3))
    /// computes per output pixel: its tiles cover the plane rounded up to multiples of
    /// `tile` (1 when the plane is unknown or empty).
    pub(crate) fn winograd_cover(&self, tile: usize) -> f64 {
        match self.out_hw {
            Some([oh, ow]) if oh > 0 && ow > 0 => {
                (oh.next_multiple_of(tile) * ow.next_multiple_of(tile)) as f64 / (oh * ow) as f64
            }
            _ => 1.0,
        }
    }
}

/// An algorithm the model weighs (depthwise and 1×1 convs have one path each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Candidate {
    Im2col,
    Pairs,
    Winograd,
    Winograd4,
    Direct,
}

/// Per-ISA rates of the cost model (module docs): MACs per nanosecond of one core for the
/// micro-kernels, nanoseconds for the per-element overheads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rates {
    /// u8×i8 MACs/ns of the GEMM on packed panels (im2col).
    r_u8: f64,
    /// ns per byte of K gathered (implicit im2col) and packed.
    p_pack: f64,
    /// ns per tap and pixel of the gather (one copy of `C_in` bytes each).
    p_tap: f64,
    /// MACs/ns of the pairs GEMM (the few-channel conv).
    r_pair: f64,
    /// ns per output pixel of the pairs packing.
    p_pair: f64,
    /// i16 MACs/ns of Winograd's GEMMs.
    r_i16: f64,
    /// ns per value of Winograd's input and output transforms.
    p_wino: f64,
    /// ns per value of F(4×4, 3×3)'s transforms (6-point, with small multipliers).
    p_wino4: f64,
    /// u8×i8 MACs/ns of the direct conv's tile (channels padded to quads).
    r_direct: f64,
    /// ns per output pixel of the direct conv (padded copy, tile set-up).
    p_direct: f64,
    /// MACs/ns of the depthwise row kernel (not a choice: only the work estimate of
    /// [`crate::par`] reads it).
    r_dw: f64,
    /// MACs/ns of the depthwise kernel in 16-channel blocks (`dw_blocks.rs`; per padded
    /// channel), likewise only a work estimate.
    r_dw_blocks: f64,
}

impl Rates {
    /// The model's rates for `isa`, fitted to `quantkit bench conv --algo …` on the
    /// LeNet, conv-net and ResNet layers, one thread, on an AMD EPYC (Zen 4) with AVX-512
    /// VNNI (the AVX2 rates with `--isa avx2` on the same machine); BENCHMARKS.md
    /// (`p_wino4`: the conv net's three Winograd layers at batch 1, 2026-11-25; AVX2's
    /// refitted to 0.25 from 0.33 on the same layers, 2026-11-27, after the F(4×4)
    /// transforms were vectorised: 0.276, 0.236, 0.252 ns per value, branch `speed3`).
    pub(crate) fn of(isa: Isa) -> Rates {
        match isa {
            // Portable code: only a forced choice or a machine without SIMD runs it, and
            // there the relative costs follow the instruction counts.
            Isa::Scalar => Rates {
                r_u8: 8.0,
                p_pack: 0.5,
                p_tap: 4.0,
                r_pair: 8.0,
                p_pair: 18.0,
                r_i16: 8.0,
                p_wino: 0.3,
                p_wino4: 0.5,
                r_direct: 4.0,
                p_direct: 18.0,
                r_dw: 1.0,
                r_dw_blocks: 0.7,
            },
            // vpmaddwd on ymm: 16 MACs per multiply uop; the direct tile is portable code.
            Isa::Avx2 => Rates {
                r_u8: 84.0,
                p_pack: 0.04,
                p_tap: 3.9,
                r_pair: 66.0,
                p_pair: 9.2,
                r_i16: 80.0,
                p_wino: 0.074,
                p_wino4: 0.25,
                r_direct: 4.0,
                p_direct: 18.0,
                r_dw: 3.0,
                r_dw_blocks: 18.0,
            },
            // vpdpbusd on zmm (64 MACs; im2col and direct), vpdpwssd for Winograd (32 i16
            // MACs), the pairs family is AVX2's.
            Isa::Avx512Vnni => Rates {
                r_u8: 220.0,
                p_pack: 0.032,
                p_tap: 4.2,
                r_pair: 64.0,
                p_pair: 17.7,
                r_i16: 113.0,
                p_wino: 0.087,
                p_wino4: 0.25,
                r_direct: 200.0,
                p_direct: 18.0,
                r_dw: 4.0,
                r_dw_blocks: 20.0,
            },
        }
    }

    /// Estimated nanoseconds per output pixel of `shape` with `algo`.
    pub(crate) fn cost(&self, shape: &ConvShape, algo: Candidate) -> f64 {
        let (ci, co) = (shape.c_in as f64, shape.c_out as f64);
        let taps = (shape.kernel[0] * shape.kernel[1]) as f64;
        let k = taps * ci;
        match algo {
            Candidate::Im2col => k * co / self.r_u8 + k * self.p_pack + taps * self.p_tap,
            Candidate::Pairs => 2.0 * shape.pair_words as f64 * co / self.r_pair + self.p_pair,
            Candidate::Winograd => {
                (4.0 * ci * co / self.r_i16 + 4.0 * (ci + co) * self.p_wino)
                    * shape.winograd_cover(2)
            }
            Candidate::Winograd4 => {
                (2.25 * ci * co / self.r_i16 + 2.25 * (ci + co) * self.p_wino4)
                    * shape.winograd_cover(4)
            }
            Candidate::Direct => {
                4.0 * shape.direct_words as f64 * co / self.r_direct + self.p_direct
            }
        }
    }

    /// Estimated nanoseconds per output pixel of a depthwise conv with `taps` taps and
    /// `c_out` output channels.
    pub(crate) fn depthwise_cost(&self, taps: usize, c_out: usize) -> f64 {
        (taps * c_out) as f64 / self.r_dw
    }

    /// [`Self::depthwise_cost`] for the kernel in 16-channel blocks: `taps` rounded up to
    /// pairs, channels to blocks.
    pub(crate) fn depthwise_blocks_cost(&self, taps: usize, c_out: usize) -> f64 {
        (taps.next_multiple_of(2) * c_out.next_multiple_of(16)) as f64 / self.r_dw_blocks
    }

    /// The cheapest of `eligible` (the first on ties), `Im2col` if empty.
    pub(crate) fn cheapest(&self, shape: &ConvShape, eligible: &[Candidate]) -> Candidate {
        eligible
            .iter()
            .copied()
            .min_by(|&a, &b| self.cost(shape, a).total_cmp(&self.cost(shape, b)))
            .unwrap_or(Candidate::Im2col)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(c_in: usize, c_out: usize, pair_words: usize) -> ConvShape {
        ConvShape {
            c_in,
            c_out,
            kernel: [3, 3],
            pair_words,
            direct_words: super::super::direct::direct_kgroups(c_in, [3, 3], 1).0,
            out_hw: None,
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_none() {
        for name in CONV_ALGO_NAMES {
            assert_eq!(ConvAlgorithm::parse(name).unwrap().name(), name);
        }
        assert_eq!(ConvAlgorithm::parse("GEMM"), Some(ConvAlgorithm::Im2col));
        assert_eq!(ConvAlgorithm::parse("fft"), None);
    }

    /// The choices the measurements behind the rates support (BENCHMARKS.md, 2026-11-24
    /// evening): on AVX2 the few-channel packing and Winograd; on AVX-512 VNNI the direct
    /// conv for an RGB first layer and Winograd for the conv net's wide layers; the plain
    /// GEMM never where Winograd is eligible on either.
    #[test]
    fn the_model_picks_what_was_measured_fastest() {
        use Candidate::*;
        let all = [Im2col, Pairs, Winograd, Direct];
        let three = [Im2col, Winograd, Direct];
        let avx2 = Rates::of(Isa::Avx2);
        assert_eq!(
            avx2.cheapest(&shape(3, 32, 15), &[Im2col, Pairs, Direct]),
            Pairs
        );
        assert_eq!(avx2.cheapest(&shape(32, 64, 0), &three), Winograd);
        assert_eq!(avx2.cheapest(&shape(128, 256, 0), &three), Winograd);
        let vnni = Rates::of(Isa::Avx512Vnni);
        assert_eq!(
            vnni.cheapest(&shape(3, 32, 15), &[Im2col, Pairs, Direct]),
            Direct
        );
        assert_eq!(vnni.cheapest(&shape(128, 256, 0), &three), Winograd);
        // F(4×4) wherever Winograd applies, on both (BENCHMARKS.md, 2026-11-25: the conv
        // net's 32→64, 64→128 and 128→256 layers at batch 1).
        let wino = [Im2col, Winograd, Winograd4, Direct];
        for (ci, co) in [(32, 64), (64, 128), (128, 256)] {
            assert_eq!(avx2.cheapest(&shape(ci, co, 0), &wino), Winograd4);
            assert_eq!(vnni.cheapest(&shape(ci, co, 0), &wino), Winograd4);
        }
        assert_ne!(vnni.cheapest(&shape(64, 128, 0), &all), Im2col);
        // Without Winograd (stride 2), the direct conv or the GEMM, never the portable tile
        // on AVX2.
        assert_eq!(avx2.cheapest(&shape(64, 128, 0), &[Im2col, Direct]), Im2col);
    }

    /// LeNet's first conv (3×3, 1 → 32, 28×28): row words make the direct conv 3 words
    /// per pixel instead of 9, and on AVX-512 VNNI the model moves it from the pairs GEMM
    /// to the direct conv, which measured 6 against 16 µs per image in
    /// the engine with the 2×2 pool fused (BENCHMARKS.md, 2026-11-25, branch `lenet`);
    /// AVX2 (portable direct tile) keeps the pairs GEMM.
    #[test]
    fn lenet_conv1_takes_the_direct_conv_on_vnni() {
        use Candidate::*;
        let pair_words = super::super::small_cin::PackedK::new(1, [3, 3]).k() / 2;
        let s = shape(1, 32, pair_words);
        assert_eq!(s.direct_words, 3);
        let cands = [Im2col, Pairs, Direct];
        assert_eq!(Rates::of(Isa::Avx512Vnni).cheapest(&s, &cands), Direct);
        assert_eq!(Rates::of(Isa::Avx2).cheapest(&s, &cands), Pairs);
        // RGB (3 channels) gets no row words: 9 words either way.
        assert_eq!(shape(3, 32, 15).direct_words, 9);
    }

    /// MTCNN O-Net's conv2d_9 (3×3, 32 → 64, 23×23 in, 21×21 out) on AVX-512 VNNI: the
    /// direct conv measured 0.050 ms, Winograd 0.058 ms (BENCHMARKS.md, 2026-11-25). With
    /// the plane known, its tile cover (484 / 441) makes the model pick the direct conv;
    /// without it the per-pixel estimate still picks Winograd.
    #[test]
    fn winograd_pays_for_the_tiles_past_an_odd_edge() {
        use Candidate::*;
        let three = [Im2col, Winograd, Direct];
        let vnni = Rates::of(Isa::Avx512Vnni);
        let mut s = shape(32, 64, 0);
        assert_eq!(vnni.cheapest(&s, &three), Winograd);
        s.out_hw = Some([21, 21]);
        assert!((s.winograd_cover(2) - 484.0 / 441.0).abs() < 1e-12);
        assert_eq!(vnni.cheapest(&s, &three), Direct);
        s.out_hw = Some([22, 22]);
        assert_eq!(s.winograd_cover(2), 1.0);
        assert_eq!(vnni.cheapest(&s, &three), Winograd);
        s.out_hw = Some([0, 5]);
        assert_eq!(s.winograd_cover(2), 1.0);
        // With F(4×4) eligible too: O-Net's 21×21 stays direct (24×24 computed), LeNet's
        // 14×14 second conv (16×16 computed) takes F(2×2), which the engine measured
        // faster (0.047 against 0.049 ms at batch 1, 2.19 against 2.38 at batch 64), and a
        // plane of multiples of 4 keeps F(4×4).
        let four = [Im2col, Winograd, Winograd4, Direct];
        s.out_hw = Some([21, 21]);
        assert!((s.winograd_cover(4) - 576.0 / 441.0).abs() < 1e-12);
        assert_eq!(vnni.cheapest(&s, &four), Direct);
        s.out_hw = Some([14, 14]);
        assert_eq!(vnni.cheapest(&s, &four), Winograd);
        assert_eq!(Rates::of(Isa::Avx2).cheapest(&s, &four), Winograd);
        s.out_hw = Some([16, 16]);
        assert_eq!(vnni.cheapest(&s, &four), Winograd4);
    }
}
