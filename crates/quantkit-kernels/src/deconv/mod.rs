//! Quantized 2-D transposed convolution (ONNX ConvTranspose / QLinearConvTranspose) on NHWC.
//!
//! `out[n, iy·s + ky·d − pad_top, ix·s + kx·d − pad_left, co] += (x[n,iy,ix,ci] − zx)·(w[ci,co,ky,kx] − zw[co])`.
//! Computed as one int8 GEMM `[N·H·W, C_in] × [C_in, kh·kw·C_out]` (weights packed once,
//! zero points per output channel handled by the GEMM's (K1)), then an exact i32 scatter-add
//! ("col2im") and the per-channel output stage — so per-output-channel weight scales work
//! as in conv. With `groups = g`, each group is its own GEMM `[N·H·W, C_in/g] ×
//! [C_in/g, kh·kw·C_out/g]` on its slice of input channels, scattered into its slice of
//! output channels (ONNX: input channel `ci` of group `ci / (C_in/g)` feeds output channels
//! `g·C_out/g + co`, `co < C_out/g`, through `w[ci, co, ·, ·]`).
//!
//! # Exactness
//! Every output sums at most `(C_in/g)·kh·kw` products `(x − zx)(w − zw)`; the constructor
//! requires that to be at most the GEMM's [`MAX_K`], so the i32 sums (wrapping, exact modulo
//! 2^32) are the exact values. The scatter is plain integer addition, the same on every
//! ISA; only the GEMM is dispatched, and it is bit-exact across ISAs.
//!
//! # Two algorithms
//! Where taps never overlap (`dilation·(kernel − 1) < stride`, e.g. `kernel == stride`),
//! the `blocks` path ([`DeconvAlgorithm`], `blocks.rs`) skips the i32 columns and the
//! scatter-add: the GEMM's fused output stage writes codes per block of input rows, copied
//! straight to their output pixels. The choice is made when the weights are packed
//! (`algo.rs`: the cost model, `QUANTKIT_DECONV_ALGO`); both give the same bytes.

mod algo;
mod blocks;

pub use algo::{DeconvAlgorithm, DECONV_ALGO_NAMES};

use crate::conv::{ActElem, ConvParams, NhwcInput};
use crate::dispatch::{self, Isa};
use crate::error::{KernelError, Result};
use crate::gemm::{gemm_i32_with, PackedWeights, MAX_K};
use crate::output::{OutputStage, QuantType};

/// Transposed-conv weights packed once.
pub struct DeconvWeights {
    params: ConvParams,
    output_padding: [usize; 2],
    c_in: usize,
    c_out: usize,
    /// One packed `[C_in/g, kh·kw·C_out/g]` matrix per group (columns tap-major).
    packed: Vec<PackedWeights>,
    /// The algorithm of the quantized calls, resolved (never `Auto`).
    algo: DeconvAlgorithm,
}

impl DeconvWeights {
    /// Output channels.
    pub fn c_out(&self) -> usize {
        self.c_out
    }

    /// The parameters the weights were packed with.
    pub fn params(&self) -> &ConvParams {
        &self.params
    }

    /// The algorithm quantized calls run ([`DeconvAlgorithm::Col2im`] or
    /// [`DeconvAlgorithm::Blocks`]).
    pub fn algorithm(&self) -> DeconvAlgorithm {
        self.algo
    }

    /// The same weights with `algo` asked for instead of `QUANTKIT_DECONV_ALGO`'s choice
    /// (resolved: `blocks` only where the taps never overlap).
    pub fn with_algorithm(mut self, algo: DeconvAlgorithm) -> Self {
        self.algo = algo.resolve(&self.params);
        self
    }

    /// A short name of the algorithm, for reports (`deconv col2im`, `deconv blocks`).
    pub fn method(&self) -> &'static str {
        match self.algo {
            DeconvAlgorithm::Blocks => "deconv blocks",
            _ => "deconv col2im",
        }
    }

    /// Packs ONNX-ordered i8 weights `[c_in, c_out/groups, kh, kw]` with zero point(s) (1
    /// or `c_out`); `c_in` and `c_out` are the whole tensor's channel counts, both
    /// multiples of `params.groups`; `output_padding` as ONNX's attribute. The algorithm
    /// is `QUANTKIT_DECONV_ALGO`'s ([`DeconvAlgorithm::from_env`], `auto` by default).
    pub fn new(
        weights: &[i8],
        c_in: usize,
        c_out: usize,
        params: ConvParams,
        output_padding: [usize; 2],
        zero_points: &[i32],
    ) -> Result<Self> {
        const OP: &str = "deconv2d";
        let bad = |arg: &'static str, reason: String| KernelError::InvalidArgument {
            op: OP,
            arg,
            reason,
        };
        let g = params.groups;
        if g == 0 || !c_in.is_multiple_of(g) || !c_out.is_multiple_of(g) || c_in == 0 || c_out == 0
        {
            return Err(bad(
                "groups",
                format!("groups = {g} must divide c_in = {c_in} and c_out = {c_out}"),
            ));
        }
        let [kh, kw] = params.kernel;
        if kh == 0 || kw == 0 || params.stride.contains(&0) || params.dilation.contains(&0) {
            return Err(bad("params", "zero kernel, stride or dilation".into()));
        }
        // ONNX: output_padding must be smaller than the stride or the dilation.
        for i in 0..2 {
            if output_padding[i] >= params.stride[i].max(params.dilation[i]) {
                return Err(bad(
                    "output_padding",
                    format!(
                        "output_padding {output_padding:?} must be smaller than stride {:?} or dilation {:?}",
                        params.stride, params.dilation
                    ),
                ));
            }
        }
        let (cig, cog) = (c_in / g, c_out / g);
        let taps = kh.checked_mul(kw).and_then(|t| t.checked_mul(cig));
        if taps.is_none_or(|t| t > MAX_K) {
            return Err(bad(
                "weights",
                format!(
                    "{cig} input channels per group × {kh}×{kw} taps exceed {MAX_K}, beyond which i32 accumulation is not exact"
                ),
            ));
        }
        let expected = c_in * cog * kh * kw;
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
        let n = kh * kw * cog;
        let geom = crate::dispatch::kernels().geometry();
        let packed = (0..g)
            .map(|gi| {
                let zps: Vec<i32> = (0..n)
                    .map(|j| {
                        if zero_points.len() == 1 {
                            zero_points[0]
                        } else {
                            zero_points[gi * cog + j % cog]
                        }
                    })
                    .collect();
                PackedWeights::from_fn(geom, cig, n, &zps, |ci, j| {
                    let (tap, co) = (j / cog, j % cog);
                    weights[(((gi * cig + ci) * cog + co) * kh + tap / kw) * kw + tap % kw]
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(DeconvWeights {
            params,
            output_padding,
            c_in,
            c_out,
            packed,
            algo: DeconvAlgorithm::from_env().resolve(&params),
        })
    }

    /// Output `[n, oh, ow, c_out]` for an NHWC input shape:
    /// `o = (i − 1)·s − pad_begin − pad_end + d·(k − 1) + 1 + output_padding`.
    pub fn output_shape(&self, input: [usize; 4]) -> Result<[usize; 4]> {
        self.output_shape_padded(input, self.params.pads)
    }

    /// [`DeconvWeights::output_shape`] with `pads` (`[top, left, bottom, right]`) instead
    /// of the ones the weights were packed with (`auto_pad` and `output_shape` make the
    /// pads depend on the input's size).
    pub fn output_shape_padded(&self, input: [usize; 4], pads: [usize; 4]) -> Result<[usize; 4]> {
        let p = &ConvParams {
            pads,
            ..self.params
        };
        let mut o = [0usize; 2];
        for i in 0..2 {
            // Checked: the geometry comes from a model file.
            let full = (input[1 + i].max(1) - 1)
                .checked_mul(p.stride[i])
                .and_then(|v| v.checked_add(p.dilation[i].checked_mul(p.kernel[i] - 1)?))
                .and_then(|v| v.checked_add(1 + self.output_padding[i]));
            let pads = p.pads[i].checked_add(p.pads[i + 2]);
            let (Some(full), Some(pads)) = (full, pads) else {
                return Err(KernelError::InvalidArgument {
                    op: "deconv2d",
                    arg: "params",
                    reason: format!("output size of input {input:?} overflows"),
                });
            };
            if input[1 + i] == 0 || full <= pads {
                return Err(KernelError::InvalidArgument {
                    op: "deconv2d",
                    arg: "params",
                    reason: format!("padding {pads} leaves no output for input {:?}", input),
                });
            }
            o[i] = full - pads;
        }
        Ok([input[0], o[0], o[1], self.c_out])
    }
}

fn accumulate<T: ActElem>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    pads: [usize; 4],
) -> Result<(Vec<i32>, [usize; 4])> {
    let [n, h, wd, c] = x.shape;
    let os = check_input(x, w, pads)?;
    let [_, oh, ow, c_out] = os;
    let p = &ConvParams { pads, ..w.params };
    let [kh, kw] = p.kernel;
    let m = n * h * wd;
    let g = p.groups;
    let (cig, cog) = (c / g, c_out / g);
    let cols_n = kh * kw * cog;
    let mut cols = vec![0i32; m * cols_n];
    let mut acc = vec![0i32; n * oh * ow * c_out];
    // A group's input channels, gathered contiguous (groups > 1 only).
    let mut slice: Vec<T> = Vec::new();
    for (gi, packed) in w.packed.iter().enumerate() {
        let data = if g == 1 {
            x.data
        } else {
            slice.clear();
            slice.extend(
                x.data
                    .chunks_exact(c)
                    .flat_map(|px| px[gi * cig..][..cig].iter().copied()),
            );
            &slice[..]
        };
        gemm_i32_with(
            isa,
            &T::activations(data, m, cig, x.zero_point),
            packed,
            &mut cols,
        )?;
        col2im(
            &cols,
            &mut acc,
            [n, h, wd],
            [oh, ow, c_out],
            p,
            gi * cog,
            cog,
        );
    }
    Ok((acc, os))
}

/// The output shape of input `x` with `pads`, after checking its length and channels.
fn check_input<T: ActElem>(
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    pads: [usize; 4],
) -> Result<[usize; 4]> {
    let [n, h, wd, c] = x.shape;
    if c != w.c_in || x.data.len() != n * h * wd * c {
        return Err(KernelError::BufferLength {
            op: "deconv2d",
            arg: "input",
            expected: n * h * wd * w.c_in,
            got: x.data.len(),
        });
    }
    w.output_shape_padded(x.shape, pads)
}

/// The exact scatter ("col2im") of one group's GEMM rows `cols` (`[n·h·w, kh·kw·cog]`, tap
/// major) into `acc` (`[n, oh, ow, c_out]`) at output channels `c0..c0 + cog`:
/// `acc[b, iy·s + ky·d − pad, ix·s + kx·d − pad, c0 + co] += cols[(b, iy, ix), (ky, kx, co)]`,
/// taps landing outside the output dropped (that is what the pads crop).
fn col2im(
    cols: &[i32],
    acc: &mut [i32],
    [n, h, wd]: [usize; 3],
    [oh, ow, c_out]: [usize; 3],
    p: &ConvParams,
    c0: usize,
    cog: usize,
) {
    let [kh, kw] = p.kernel;
    let cols_n = kh * kw * cog;
    for b in 0..n {
        for iy in 0..h {
            for ix in 0..wd {
                let row = &cols[((b * h + iy) * wd + ix) * cols_n..][..cols_n];
                for ky in 0..kh {
                    let oy = (iy * p.stride[0] + ky * p.dilation[0]) as isize - p.pads[0] as isize;
                    if oy < 0 || oy >= oh as isize {
                        continue;
                    }
                    for kx in 0..kw {
                        let ox =
                            (ix * p.stride[1] + kx * p.dilation[1]) as isize - p.pads[1] as isize;
                        if ox < 0 || ox >= ow as isize {
                            continue;
                        }
                        let dst = &mut acc
                            [((b * oh + oy as usize) * ow + ox as usize) * c_out + c0..][..cog];
                        let src = &row[(ky * kw + kx) * cog..][..cog];
                        for (d, &s) in dst.iter_mut().zip(src) {
                            *d = d.wrapping_add(s);
                        }
                    }
                }
            }
        }
    }
}

/// ConvTranspose with i32 output (no bias), NHWC; returns the output shape.
pub fn deconv2d_i32_with<T: ActElem>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    out: &mut [i32],
) -> Result<[usize; 4]> {
    let (acc, os) = accumulate(isa, x, w, w.params.pads)?;
    if out.len() != acc.len() {
        return Err(KernelError::BufferLength {
            op: "deconv2d",
            arg: "output",
            expected: acc.len(),
            got: out.len(),
        });
    }
    out.copy_from_slice(&acc);
    Ok(os)
}

/// QLinearConvTranspose: the transposed conv followed by the per-channel output stage.
pub fn deconv2d_quant_with<T: ActElem, O: QuantType>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    stage: &OutputStage,
    out: &mut [O],
) -> Result<[usize; 4]> {
    deconv2d_quant_padded_with(isa, x, w, w.params.pads, stage, out)
}

/// [`deconv2d_quant_with`] with `pads` (`[top, left, bottom, right]`) instead of the
/// packed ones (see [`DeconvWeights::output_shape_padded`]).
pub fn deconv2d_quant_padded_with<T: ActElem, O: QuantType>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    pads: [usize; 4],
    stage: &OutputStage,
    out: &mut [O],
) -> Result<[usize; 4]> {
    stage.validate("deconv2d", w.c_out)?;
    if w.algo == DeconvAlgorithm::Blocks {
        let os = check_input(x, w, pads)?;
        if out.len() != os.iter().product::<usize>() {
            return Err(KernelError::BufferLength {
                op: "deconv2d",
                arg: "output",
                expected: os.iter().product(),
                got: out.len(),
            });
        }
        let p = ConvParams { pads, ..w.params };
        blocks::run(isa, x, w, &p, os, stage, out)?;
        return Ok(os);
    }
    let (acc, os) = accumulate(isa, x, w, pads)?;
    if out.len() != acc.len() {
        return Err(KernelError::BufferLength {
            op: "deconv2d",
            arg: "output",
            expected: acc.len(),
            got: out.len(),
        });
    }
    // Per pixel, so the channel is the inner index (no division per element).
    for (po, pa) in out.chunks_exact_mut(w.c_out).zip(acc.chunks_exact(w.c_out)) {
        for (j, (o, &a)) in po.iter_mut().zip(pa).enumerate() {
            *o = stage.apply(a, j);
        }
    }
    Ok(os)
}

/// [`deconv2d_quant_padded_with`] on the dispatched ISA.
pub fn deconv2d_quant_padded<T: ActElem, O: QuantType>(
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    pads: [usize; 4],
    stage: &OutputStage,
    out: &mut [O],
) -> Result<[usize; 4]> {
    deconv2d_quant_padded_with(dispatch::isa(), x, w, pads, stage, out)
}

/// [`deconv2d_quant_with`] on the dispatched ISA.
pub fn deconv2d_quant<T: ActElem, O: QuantType>(
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    stage: &OutputStage,
    out: &mut [O],
) -> Result<[usize; 4]> {
    deconv2d_quant_with(dispatch::isa(), x, w, stage, out)
}
