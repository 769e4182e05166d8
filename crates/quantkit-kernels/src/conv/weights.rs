//! Conv weights packed once, and the choice of path they are packed for (GEMM, Winograd,
//! few channels, depthwise).

use super::algo::{Candidate, ConvAlgorithm, ConvShape, Rates};
use super::direct::{direct_kgroups, DirectWeights};
use super::dw_blocks::DwBlocks;
use super::params::ConvParams;
use super::small_cin;
use crate::dispatch::{self, Isa};
use crate::error::{KernelError, Result};
use crate::gemm::{PackedWeights, PanelGeometry};
use crate::winograd::{self, WinogradWeights};

pub(super) enum Kind {
    Gemm(Vec<PackedWeights>),
    Winograd(WinogradWeights),
    /// The direct `vpdpbusd` convolution ([`super::direct`]): one group, weight zero points 0.
    Direct(DirectWeights),
    /// im2col + GEMM with k-pairs of channel pairs or row pairs, packed from precomputed
    /// planes of words ([`super::small_cin`]); the weights have its packed K.
    SmallCin(PackedWeights),
    Depthwise {
        /// `[ky][kx][co]` of `w − zw`.
        taps: Vec<i32>,
        multiplier: usize,
        /// The 16-channel-block packing (multiplier 1, values in i16), which runs convs
        /// with a float output stage.
        blocks: Option<DwBlocks>,
    },
}

/// Convolution weights packed once for [`conv2d_i32`](super::conv2d_i32) / [`conv2d_quant`](super::conv2d_quant).
pub struct ConvWeights {
    pub(super) params: ConvParams,
    pub(super) c_in: usize,
    pub(super) c_out: usize,
    pub(super) kind: Kind,
    /// The cost model's estimate of one output pixel on one core, in ns (all groups):
    /// what [`crate::par`] weighs to split a call across threads.
    pub(super) ns_per_px: f64,
}

impl ConvWeights {
    /// Packs ONNX-ordered i8 weights `[c_out, c_in/groups, kh, kw]` with zero point(s)
    /// `zero_points` (1 or `c_out` entries), for the dispatched ISA with the algorithm of
    /// `QUANTKIT_CONV_ALGO` (the cost model's choice when unset).
    pub fn new(
        weights: &[i8],
        c_out: usize,
        c_in: usize,
        params: ConvParams,
        zero_points: &[i32],
    ) -> Result<Self> {
        Self::with_algorithm(
            weights,
            c_out,
            c_in,
            params,
            zero_points,
            ConvAlgorithm::from_env(),
        )
    }

    /// [`ConvWeights::new`] with an explicit choice of algorithm (every choice gives the
    /// same, exact result).
    pub fn with_algorithm(
        weights: &[i8],
        c_out: usize,
        c_in: usize,
        params: ConvParams,
        zero_points: &[i32],
        algorithm: ConvAlgorithm,
    ) -> Result<Self> {
        Self::for_isa(
            weights,
            c_out,
            c_in,
            params,
            zero_points,
            algorithm,
            dispatch::isa(),
        )
    }

    /// [`ConvWeights::new`] for a conv whose output planes are `out_hw` (`[oh, ow]`, known
    /// when the model's shapes are): the cost model then counts what the plane's size
    /// costs each algorithm (Winograd's tiles past an odd edge). Any input size still runs.
    pub fn for_output(
        weights: &[i8],
        c_out: usize,
        c_in: usize,
        params: ConvParams,
        zero_points: &[i32],
        out_hw: [usize; 2],
    ) -> Result<Self> {
        Self::for_isa_sized(
            weights,
            c_out,
            c_in,
            params,
            zero_points,
            ConvAlgorithm::from_env(),
            dispatch::isa(),
            Some(out_hw),
        )
    }

    /// [`ConvWeights::with_algorithm`] with `Auto` weighing the costs of `isa` and the
    /// GEMM weights packed for `isa`'s kernels (they run on any ISA; another one repacks
    /// them per call).
    pub fn for_isa(
        weights: &[i8],
        c_out: usize,
        c_in: usize,
        params: ConvParams,
        zero_points: &[i32],
        algorithm: ConvAlgorithm,
        isa: Isa,
    ) -> Result<Self> {
        Self::for_isa_sized(
            weights,
            c_out,
            c_in,
            params,
            zero_points,
            algorithm,
            isa,
            None,
        )
    }

    /// [`ConvWeights::for_isa`] with the output plane `out_hw` when known
    /// ([`ConvWeights::for_output`]).
    #[allow(clippy::too_many_arguments)]
    pub fn for_isa_sized(
        weights: &[i8],
        c_out: usize,
        c_in: usize,
        params: ConvParams,
        zero_points: &[i32],
        algorithm: ConvAlgorithm,
        isa: Isa,
        out_hw: Option<[usize; 2]>,
    ) -> Result<Self> {
        const OP: &str = "conv2d";
        let g = params.groups;
        if g == 0 || !c_in.is_multiple_of(g) || !c_out.is_multiple_of(g) || c_in == 0 || c_out == 0
        {
            return Err(KernelError::InvalidArgument {
                op: OP,
                arg: "groups",
                reason: format!("groups {g} must divide C_in {c_in} and C_out {c_out}"),
            });
        }
        let [kh, kw] = params.kernel;
        let (cin_g, cout_g) = (c_in / g, c_out / g);
        let expected = c_out * cin_g * kh * kw;
        if weights.len() != expected {
            return Err(KernelError::BufferLength {
                op: OP,
                arg: "weights",
                expected,
                got: weights.len(),
            });
        }
        if zero_points.len() != 1 && zero_points.len() != c_out {
            return Err(KernelError::ChannelCount {
                op: OP,
                arg: "weight zero_points",
                channels: c_out,
                got: zero_points.len(),
            });
        }
        let zp = |co: usize| {
            if zero_points.len() == 1 {
                zero_points[0]
            } else {
                zero_points[co]
            }
        };
        let widx =
            |co: usize, ci: usize, ky: usize, kx: usize| ((co * cin_g + ci) * kh + ky) * kw + kx;
        let one_by_one =
            params.kernel == [1, 1] && params.stride == [1, 1] && params.pads == [0; 4];
        let depthwise = cin_g == 1 && g == c_in && g > 1;
        let winograd_shape = g == 1
            && params.kernel == [3, 3]
            && params.stride == [1, 1]
            && params.dilation == [1, 1]
            && c_in >= winograd::MIN_C_IN;
        let pairs_shape = g == 1
            && c_in <= small_cin::MAX_C_IN
            && !one_by_one
            && (0..c_out).all(|co| (-128..=127).contains(&zp(co)));
        let packed_k = pairs_shape.then(|| small_cin::PackedK::new(c_in, params.kernel));
        // The candidates this conv can run, the forced one alone when it is among them.
        let mut eligible = vec![Candidate::Im2col];
        if pairs_shape {
            eligible.push(Candidate::Pairs);
        }
        if winograd_shape {
            eligible.push(Candidate::Winograd);
            eligible.push(Candidate::Winograd4);
        }
        // The direct conv needs zw = 0 (no activation row sums) and one group.
        let direct_shape = g == 1 && !one_by_one && (0..c_out).all(|co| zp(co) == 0);
        if direct_shape {
            eligible.push(Candidate::Direct);
        }
        let forced = match algorithm {
            ConvAlgorithm::Auto => None,
            ConvAlgorithm::Im2col => Some(Candidate::Im2col),
            ConvAlgorithm::Winograd => Some(Candidate::Winograd),
            ConvAlgorithm::Winograd4 => Some(Candidate::Winograd4),
            ConvAlgorithm::Pairs => Some(Candidate::Pairs),
            ConvAlgorithm::Direct => Some(Candidate::Direct),
        };
        let shape = ConvShape {
            c_in: cin_g,
            c_out: cout_g,
            kernel: params.kernel,
            pair_words: packed_k.as_ref().map_or(0, |p| p.k() / 2),
            direct_words: direct_kgroups(cin_g, params.kernel, params.dilation[1]).0,
            out_hw,
        };
        let rates = Rates::of(isa);
        let mut choice = match forced.filter(|f| eligible.contains(f)) {
            Some(f) => f,
            None => rates.cheapest(&shape, &eligible),
        };
        let mut winograd = None;
        if choice == Candidate::Winograd4 && !depthwise {
            winograd = WinogradWeights::new_f4(weights, c_out, c_in, zp);
            if winograd.is_none() {
                // Outside F(4×4)'s exactness bound: F(2×2) when the choice was forced
                // (the same family), the next best otherwise.
                eligible.retain(|&c| c != Candidate::Winograd4);
                choice = if forced == Some(Candidate::Winograd4) {
                    Candidate::Winograd
                } else {
                    rates.cheapest(&shape, &eligible)
                };
            }
        }
        if choice == Candidate::Winograd && !depthwise {
            winograd = WinogradWeights::new(weights, c_out, c_in, zp);
            if winograd.is_none() {
                // Outside Winograd's exactness bound: the next best.
                eligible.retain(|&c| c != Candidate::Winograd && c != Candidate::Winograd4);
                choice = rates.cheapest(&shape, &eligible);
            }
        }
        let kind = if let Some(ww) = winograd {
            Kind::Winograd(ww)
        } else if choice == Candidate::Direct {
            Kind::Direct(DirectWeights::new(
                weights,
                c_out,
                c_in,
                params.kernel,
                params.dilation[1],
            ))
        } else if let (Candidate::Pairs, Some(packed)) = (choice, &packed_k) {
            let zps: Vec<i32> = (0..c_out).map(zp).collect();
            // Pairs geometry whatever the ISA: the planes are words of pairs.
            Kind::SmallCin(PackedWeights::from_fn(
                PanelGeometry::PAIRS,
                packed.k(),
                c_out,
                &zps,
                |kk, j| packed.weight(kk, zps[j], |ci, ky, kx| weights[widx(j, ci, ky, kx)]),
            )?)
        } else if depthwise {
            let mut taps = vec![0i32; kh * kw * c_out];
            for co in 0..c_out {
                for ky in 0..kh {
                    for kx in 0..kw {
                        taps[(ky * kw + kx) * c_out + co] =
                            weights[widx(co, 0, ky, kx)] as i32 - zp(co);
                    }
                }
            }
            let blocks = (cout_g == 1)
                .then(|| DwBlocks::new(&taps, c_out, &params))
                .flatten();
            Kind::Depthwise {
                taps,
                multiplier: cout_g,
                blocks,
            }
        } else {
            let k = kh * kw * cin_g;
            let mut packs = Vec::with_capacity(g);
            for gi in 0..g {
                let zps: Vec<i32> = (0..cout_g).map(|j| zp(gi * cout_g + j)).collect();
                packs.push(PackedWeights::from_fn(
                    PanelGeometry::of(isa),
                    k,
                    cout_g,
                    &zps,
                    |kk, j| {
                        let (tap, ci) = (kk / cin_g, kk % cin_g);
                        weights[widx(gi * cout_g + j, ci, tap / kw, tap % kw)]
                    },
                )?);
            }
            Kind::Gemm(packs)
        };
        let ns_per_px = match &kind {
            // The blocked kernel runs every float-stage call (what QDQ models take).
            Kind::Depthwise {
                blocks: Some(_), ..
            } => rates.depthwise_blocks_cost(kh * kw, c_out),
            Kind::Depthwise { .. } => rates.depthwise_cost(kh * kw, c_out),
            Kind::Winograd(ww) if ww.is_f4() => rates.cost(&shape, Candidate::Winograd4),
            Kind::Winograd(_) => rates.cost(&shape, Candidate::Winograd),
            Kind::Direct(_) => rates.cost(&shape, Candidate::Direct),
            Kind::SmallCin(_) => rates.cost(&shape, Candidate::Pairs),
            Kind::Gemm(_) => g as f64 * rates.cost(&shape, Candidate::Im2col),
        };
        Ok(ConvWeights {
            params,
            c_in,
            c_out,
            kind,
            ns_per_px,
        })
    }

    /// Output channels.
    pub fn c_out(&self) -> usize {
        self.c_out
    }

    /// The geometry.
    pub fn params(&self) -> &ConvParams {
        &self.params
    }

    /// Whether the dedicated depthwise kernel is used.
    pub fn is_depthwise(&self) -> bool {
        matches!(self.kind, Kind::Depthwise { .. })
    }

    /// The kernel family that runs this conv: `"depthwise"`, `"winograd"` (F(2×2, 3×3)),
    /// `"winograd4"` (F(4×4, 3×3)), `"direct"`
    /// (the im2col-free `vpdpbusd` conv), `"gemm-pairs"` (im2col + GEMM over channels
    /// padded to pairs, for C_in ≤ 4) or `"gemm"`.
    pub fn method(&self) -> &'static str {
        match self.kind {
            Kind::Depthwise { .. } => "depthwise",
            Kind::Winograd(ref ww) if ww.is_f4() => "winograd4",
            Kind::Winograd(_) => "winograd",
            Kind::Direct(_) => "direct",
            Kind::SmallCin(_) => "gemm-pairs",
            Kind::Gemm(_) => "gemm",
        }
    }
}
