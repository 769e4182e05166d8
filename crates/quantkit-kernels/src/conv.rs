//! Quantized 2-D convolution on NHWC tensors.
//!
//! Weights come in ONNX order `[C_out, C_in/groups, kh, kw]` (i8, zero point per tensor or
//! per output channel) and are packed once into a [`ConvWeights`]. Paths:
//! - **1×1, stride 1, no padding, one group**: the NHWC input *is* the GEMM's A matrix
//!   `[N·H·W, C_in]`; no copy.
//! - **k×k, strided, dilated, grouped**: im2col per group into rows of
//!   `kh·kw·C_in/groups` values (ordered `ky, kx, ci`), padding filled with the input zero
//!   point (it represents real 0, so padded taps contribute `(za − za)·(w − zw) = 0`, exactly
//!   as ONNX QLinearConv/ConvInteger define it), then the int8 GEMM of [`crate::gemm`], writing
//!   each group's output channels in place (row stride `C_out`).
//! - **3×3, stride 1, one group, C_in ≥ 8**: exact integer Winograd F(2×2, 3×3)
//!   ([`crate::winograd`]) when its exactness bound holds, im2col otherwise.
//! - **one group, C_in ≤ 4** (a first layer): im2col + GEMM whose k-pairs are channel pairs
//!   and, for an odd C_in, pairs of rows of the last channel (6 words instead of 9 per pixel
//!   for a 3×3 grey conv), packed from precomputed planes of the padded input (`small_cin`).
//! - **depthwise** (`groups = C_in`, one input channel per group, any channel multiplier):
//!   its own direct kernel, `Σ_{ky,kx} (x − za)(w − zw)` per output channel, skipping
//!   padded taps (which contribute 0). Output rows run in parallel; the one portable body
//!   is compiled again with AVX2 and AVX-512 enabled (integer wrapping arithmetic and IEEE
//!   f32 steps only, so every ISA gives the scalar result bit for bit).
//!
//! The output stage is the GEMM's ([`OutputStage`]), per output channel.
//! [`conv2d_quant_max_pool`] runs a conv and a following max pool in one call; a 2×2
//! stride-2 pool is reduced on the exact sums before a monotone output stage.

use crate::dispatch::{self, table_for, Body, Isa, Kernels};
use crate::error::{KernelError, Result};
use crate::gemm::{
    gemm_strided, gemm_sums_serial, Activations, PackedWeights, PanelSums, SerialBuf, Tile,
    TileWriter, MR, NR, TILE,
};
use crate::output::{float_requant, OutputStage, QuantType, Requant};
use crate::pool::{max_pool, PoolElem};
use crate::small_cin::{self, SmallCin};
use crate::winograd::{self, WinogradConv, WinogradWeights};
use rayon::prelude::*;

/// Geometry of a 2-D convolution (ONNX attribute names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvParams {
    /// Kernel `[kh, kw]`.
    pub kernel: [usize; 2],
    /// Strides `[sh, sw]` (≥ 1).
    pub stride: [usize; 2],
    /// Dilations `[dh, dw]` (≥ 1).
    pub dilation: [usize; 2],
    /// Padding `[top, left, bottom, right]` (ONNX `pads` order is `[t, l, b, r]` for 2-D).
    pub pads: [usize; 4],
    /// Number of groups (divides C_in and C_out).
    pub groups: usize,
}

impl ConvParams {
    /// A `kh×kw` kernel with stride 1, dilation 1, no padding, one group.
    pub fn new(kh: usize, kw: usize) -> Self {
        ConvParams {
            kernel: [kh, kw],
            stride: [1, 1],
            dilation: [1, 1],
            pads: [0; 4],
            groups: 1,
        }
    }

    /// Whether this is the 2×2 stride-2 window without dilation or padding: each output
    /// reads its own 2×2 block of inputs (the pooling window with fast paths).
    pub fn is_pair_window(&self) -> bool {
        self.kernel == [2, 2]
            && self.stride == [2, 2]
            && self.dilation == [1, 1]
            && self.pads == [0; 4]
    }

    /// Output `[oh, ow]` for an input of `[h, w]`, or an error if the kernel does not fit.
    pub fn output_size(&self, h: usize, w: usize) -> Result<[usize; 2]> {
        let mut out = [0; 2];
        for (i, (&x, (p0, p1))) in [h, w]
            .iter()
            .zip([(self.pads[0], self.pads[2]), (self.pads[1], self.pads[3])])
            .enumerate()
        {
            let span = self.dilation[i] * (self.kernel[i] - 1) + 1;
            let padded = x + p0 + p1;
            if self.stride[i] == 0 || self.dilation[i] == 0 || self.kernel[i] == 0 || padded < span
            {
                return Err(KernelError::InvalidArgument {
                    op: "conv2d",
                    arg: "params",
                    reason: format!("kernel {:?} (dilation {:?}) does not fit input {h}×{w} with pads {:?}, or a zero stride/dilation", self.kernel, self.dilation, self.pads),
                });
            }
            out[i] = (padded - span) / self.stride[i] + 1;
        }
        Ok(out)
    }
}

/// An 8-bit activation element type (u8 or i8) for the conv entry points.
pub trait ActElem: QuantType {
    /// True for i8.
    const SIGNED: bool;
    /// Wraps a `[m, k]` matrix of this type as GEMM activations.
    fn activations(data: &[Self], m: usize, k: usize, zero_point: i32) -> Activations<'_>;
    /// The values' bytes (u8 as is, i8 as bit patterns).
    fn as_bytes(data: &[Self]) -> &[u8];
}
impl ActElem for u8 {
    const SIGNED: bool = false;
    fn activations(data: &[u8], m: usize, k: usize, zero_point: i32) -> Activations<'_> {
        Activations::u8(data, m, k, zero_point)
    }
    fn as_bytes(data: &[u8]) -> &[u8] {
        data
    }
}
impl ActElem for i8 {
    const SIGNED: bool = true;
    fn activations(data: &[i8], m: usize, k: usize, zero_point: i32) -> Activations<'_> {
        Activations::i8(data, m, k, zero_point)
    }
    fn as_bytes(data: &[i8]) -> &[u8] {
        // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
        unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, data.len()) }
    }
}

/// An NHWC input tensor with its zero point.
#[derive(Debug, Clone, Copy)]
pub struct NhwcInput<'a, T> {
    /// Elements in `[n, h, w, c]` order.
    pub data: &'a [T],
    /// `[n, h, w, c]`.
    pub shape: [usize; 4],
    /// Zero point (fills the padding).
    pub zero_point: i32,
}

enum Kind {
    Gemm(Vec<PackedWeights>),
    Winograd(WinogradWeights),
    /// im2col + GEMM with k-pairs of channel pairs or row pairs, packed from precomputed
    /// planes of words ([`crate::small_cin`]); the weights have its packed K.
    SmallCin(PackedWeights),
    Depthwise {
        /// `[ky][kx][co]` of `w − zw`.
        taps: Vec<i32>,
        multiplier: usize,
    },
}

/// How a convolution that is not depthwise is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConvAlgorithm {
    /// Winograd F(2×2, 3×3) for 3×3 stride-1 undilated single-group convs with at least
    /// 8 input channels whose exactness bound holds ([`crate::winograd`]); for single-group
    /// convs with at most 4 input channels (other than 1×1 stride-1 unpadded ones, which
    /// need no im2col), im2col + GEMM with channels padded to pairs and panels packed
    /// directly from widened pixels; im2col + GEMM otherwise.
    #[default]
    Auto,
    /// Always the plain im2col + GEMM (the reference path Winograd and the few-channel
    /// packing are tested against).
    Im2col,
}

/// Convolution weights packed once for [`conv2d_i32`] / [`conv2d_quant`].
pub struct ConvWeights {
    params: ConvParams,
    c_in: usize,
    c_out: usize,
    kind: Kind,
}

impl ConvWeights {
    /// Packs ONNX-ordered i8 weights `[c_out, c_in/groups, kh, kw]` with zero point(s)
    /// `zero_points` (1 or `c_out` entries).
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
            ConvAlgorithm::Auto,
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
        let winograd_shape = g == 1
            && params.kernel == [3, 3]
            && params.stride == [1, 1]
            && params.dilation == [1, 1]
            && c_in >= winograd::MIN_C_IN;
        let winograd = if algorithm == ConvAlgorithm::Auto && winograd_shape {
            WinogradWeights::new(weights, c_out, c_in, zp)
        } else {
            None
        };
        let one_by_one =
            params.kernel == [1, 1] && params.stride == [1, 1] && params.pads == [0; 4];
        let kind = if let Some(ww) = winograd {
            Kind::Winograd(ww)
        } else if algorithm == ConvAlgorithm::Auto
            && g == 1
            && c_in <= small_cin::MAX_C_IN
            && !one_by_one
            && (0..c_out).all(|co| (-128..=127).contains(&zp(co)))
        {
            let packed = small_cin::PackedK::new(c_in, params.kernel);
            let zps: Vec<i32> = (0..c_out).map(zp).collect();
            Kind::SmallCin(PackedWeights::from_fn(packed.k(), c_out, &zps, |kk, j| {
                packed.weight(kk, zps[j], |ci, ky, kx| weights[widx(j, ci, ky, kx)])
            })?)
        } else if cin_g == 1 && g == c_in && g > 1 {
            let mut taps = vec![0i32; kh * kw * c_out];
            for co in 0..c_out {
                for ky in 0..kh {
                    for kx in 0..kw {
                        taps[(ky * kw + kx) * c_out + co] =
                            weights[widx(co, 0, ky, kx)] as i32 - zp(co);
                    }
                }
            }
            Kind::Depthwise {
                taps,
                multiplier: cout_g,
            }
        } else {
            let k = kh * kw * cin_g;
            let mut packs = Vec::with_capacity(g);
            for gi in 0..g {
                let zps: Vec<i32> = (0..cout_g).map(|j| zp(gi * cout_g + j)).collect();
                packs.push(PackedWeights::from_fn(k, cout_g, &zps, |kk, j| {
                    let (tap, ci) = (kk / cin_g, kk % cin_g);
                    weights[widx(gi * cout_g + j, ci, tap / kw, tap % kw)]
                })?);
            }
            Kind::Gemm(packs)
        };
        Ok(ConvWeights {
            params,
            c_in,
            c_out,
            kind,
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

    /// The kernel family that runs this conv: `"depthwise"`, `"winograd"`, `"gemm-pairs"`
    /// (im2col + GEMM over channels padded to pairs, for C_in ≤ 4) or `"gemm"`.
    pub fn method(&self) -> &'static str {
        match self.kind {
            Kind::Depthwise { .. } => "depthwise",
            Kind::Winograd(_) => "winograd",
            Kind::SmallCin(_) => "gemm-pairs",
            Kind::Gemm(_) => "gemm",
        }
    }
}

/// Output shape `[n, oh, ow, c_out]` of a conv.
pub fn conv2d_output_shape(input_shape: [usize; 4], w: &ConvWeights) -> Result<[usize; 4]> {
    let [oh, ow] = w.params.output_size(input_shape[1], input_shape[2])?;
    Ok([input_shape[0], oh, ow, w.c_out])
}

fn check<T>(x: &NhwcInput<'_, T>, w: &ConvWeights, out_len: usize) -> Result<[usize; 4]> {
    let [n, h, wd, c] = x.shape;
    if c != w.c_in {
        return Err(KernelError::InvalidArgument {
            op: "conv2d",
            arg: "input",
            reason: format!("input has {c} channels, weights expect {}", w.c_in),
        });
    }
    if x.data.len() != n * h * wd * c {
        return Err(KernelError::BufferLength {
            op: "conv2d",
            arg: "input",
            expected: n * h * wd * c,
            got: x.data.len(),
        });
    }
    let os = conv2d_output_shape(x.shape, w)?;
    let total = os.iter().product::<usize>();
    if out_len != total {
        return Err(KernelError::BufferLength {
            op: "conv2d",
            arg: "output",
            expected: total,
            got: out_len,
        });
    }
    Ok(os)
}

/// The output pixel `(b, oy, ox)` of the flat index `(b·oh + oy)·ow + ox`, moved on without
/// divisions (the row gatherers walk panels pixel by pixel).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PixelPos {
    pub b: usize,
    pub oy: usize,
    pub ox: usize,
}

impl PixelPos {
    /// The position of flat pixel `pixel` in an `oh × ow` output.
    pub(crate) fn at(pixel: usize, oh: usize, ow: usize) -> Self {
        PixelPos {
            b: pixel / (oh * ow),
            oy: pixel / ow % oh,
            ox: pixel % ow,
        }
    }

    /// Moves `n` pixels on, `n ≤ ow − ox` (to the end of the current row at most).
    #[inline(always)]
    pub(crate) fn advance(&mut self, n: usize, oh: usize, ow: usize) {
        self.ox += n;
        if self.ox == ow {
            self.ox = 0;
            self.oy += 1;
            if self.oy == oh {
                self.oy = 0;
                self.b += 1;
            }
        }
    }
}

/// The implicit im2col of group `gi`: row `(n, oy, ox)` holds columns `(ky, kx, ci)` of the
/// NHWC input, the zero point where a tap falls in the padding. The GEMM calls it for one
/// panel of rows at a time right before packing them (so the `[M, K]` matrix never exists:
/// no buffer the size of the batch's patches to fill and stream back). Without dilation and
/// with one group, the `kx` taps of a kernel row read adjacent pixels, so their valid run is
/// one copy of `run·C` bytes.
struct Im2col<'a> {
    x: &'a [u8],
    shape: [usize; 4],
    p: &'a ConvParams,
    gi: usize,
    cin_g: usize,
    oh: usize,
    ow: usize,
    pad: u8,
    /// Valid kx range of every output column.
    cols: Vec<(usize, usize)>,
}

impl<'a> Im2col<'a> {
    fn new<T: ActElem>(
        x: &'a NhwcInput<'a, T>,
        p: &'a ConvParams,
        gi: usize,
        cin_g: usize,
        oh: usize,
        ow: usize,
    ) -> Self {
        let wd = x.shape[2];
        let kw = p.kernel[1];
        let pad = T::from_clamped(x.zero_point.clamp(T::MIN, T::MAX));
        let cols = (0..ow)
            .map(|ox| {
                let base = (ox * p.stride[1]) as isize - p.pads[1] as isize;
                let d = p.dilation[1] as isize;
                let lo = (0..kw)
                    .find(|&kx| base + kx as isize * d >= 0)
                    .unwrap_or(kw);
                let hi = (lo..kw)
                    .take_while(|&kx| base + (kx as isize) * d < wd as isize)
                    .last()
                    .map_or(lo, |kx| kx + 1);
                (lo, hi)
            })
            .collect();
        Im2col {
            x: T::as_bytes(x.data),
            shape: x.shape,
            p,
            gi,
            cin_g,
            oh,
            ow,
            pad: T::as_bytes(std::slice::from_ref(&pad))[0],
            cols,
        }
    }

    /// Writes the rows of pixels `first..` (`(n·oh + oy)·ow + ox`), `kh·kw·cin_g` bytes
    /// each, into `out`. Pixels advance incrementally (no division per row), only the padded
    /// taps are filled with the zero point, and runs of up to 16 bytes (a 3×3 kernel row over
    /// 1–5 channels) are copied as one fixed 16-byte move instead of a `memcpy` call: the
    /// bytes it writes past the run belong to the same row's right padding (filled right
    /// after) or to later segments and rows (written after), and it is only used when the
    /// 16 bytes lie inside both buffers.
    fn rows(&self, first: usize, out: &mut [u8]) {
        let [_, h, wd, c] = self.shape;
        let (p, cin_g) = (self.p, self.cin_g);
        let [kh, kw] = p.kernel;
        let k = kh * kw * cin_g;
        if k == 0 {
            return;
        }
        let seg_len = kw * cin_g;
        let contiguous = p.dilation[1] == 1 && cin_g == c;
        let mut pos = PixelPos::at(first, self.oh, self.ow);
        for r in 0..out.len() / k {
            let PixelPos { b, oy, ox } = pos;
            let (kx_lo, kx_hi) = self.cols[ox];
            for ky in 0..kh {
                let base = r * k + ky * seg_len;
                let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize - p.pads[0] as isize;
                if iy < 0 || iy >= h as isize || kx_lo >= kx_hi {
                    out[base..base + seg_len].fill(self.pad);
                    continue;
                }
                let ix0 = ox * p.stride[1] + kx_lo * p.dilation[1] - p.pads[1];
                let src0 = ((b * h + iy as usize) * wd + ix0) * c + self.gi * cin_g;
                let dst0 = base + kx_lo * cin_g;
                if contiguous {
                    let len = (kx_hi - kx_lo) * c;
                    if len <= 16 && dst0 + 16 <= out.len() && src0 + 16 <= self.x.len() {
                        let mut v = [0u8; 16];
                        v.copy_from_slice(&self.x[src0..src0 + 16]);
                        out[dst0..dst0 + 16].copy_from_slice(&v);
                    } else {
                        out[dst0..dst0 + len].copy_from_slice(&self.x[src0..src0 + len]);
                    }
                } else {
                    for t in 0..kx_hi - kx_lo {
                        let src = src0 + t * p.dilation[1] * c;
                        out[dst0 + t * cin_g..][..cin_g].copy_from_slice(&self.x[src..src + cin_g]);
                    }
                }
                if kx_lo > 0 {
                    out[base..dst0].fill(self.pad);
                }
                if kx_hi < kw {
                    out[base + kx_hi * cin_g..base + seg_len].fill(self.pad);
                }
            }
            pos.advance(1, self.oh, self.ow);
        }
    }
}

fn group_stage(stage: &OutputStage, lo: usize, len: usize) -> OutputStage {
    let mut s = stage.clone();
    s.bias = stage.bias.as_ref().map(|b| b[lo..lo + len].to_vec());
    s.requant = match &stage.requant {
        Requant::Float(v) if v.len() > 1 => Requant::Float(v[lo..lo + len].to_vec()),
        Requant::FixedPoint {
            multipliers,
            rounding,
        } if multipliers.len() > 1 => Requant::FixedPoint {
            multipliers: multipliers[lo..lo + len].to_vec(),
            rounding: *rounding,
        },
        other => other.clone(),
    };
    s
}

/// Tiles per parallel chunk of the Winograd path: enough 6-row blocks to amortise the
/// 16 weight panels, few enough that the transformed input (`16·tiles·C_in` i16) stays in L2.
const WINOGRAD_TILES: usize = 48;

/// Shared driver: `emit(pixel_row, co, acc)` for the depthwise path, GEMM otherwise.
fn conv_impl<T: ActElem, O: QuantType>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    stage: Option<&OutputStage>,
    mut out_i32: Option<&mut [i32]>,
    mut out_q: Option<&mut [O]>,
) -> Result<()> {
    let out_len = out_i32
        .as_ref()
        .map(|o| o.len())
        .or(out_q.as_ref().map(|o| o.len()))
        .unwrap_or(0);
    let [n, oh, ow, c_out] = check(x, w, out_len)?;
    if let Some(st) = stage {
        st.validate("conv2d", c_out)?;
    }
    let p = &w.params;
    let m = n * oh * ow;
    match &w.kind {
        Kind::Depthwise { taps, multiplier } => {
            let body = table_for(isa)?.depthwise();
            let dw = Depthwise {
                x,
                p,
                taps,
                multiplier: *multiplier,
                c_out,
                oh,
                ow,
            };
            let row_len = ow * c_out;
            if let Some(o) = out_i32.as_deref_mut() {
                o.par_chunks_mut(row_len.max(1))
                    .enumerate()
                    .for_each(|(row, acc)| body.run(DwRow { dw: &dw, row, acc }));
            } else if let (Some(o), Some(st)) = (out_q.as_deref_mut(), stage) {
                let epi = DwEpilogue::new(st, c_out, st.range::<O>());
                o.par_chunks_mut(row_len.max(1)).enumerate().for_each_init(
                    || vec![0i32; row_len],
                    |acc, (row, out)| {
                        body.run(DwRow { dw: &dw, row, acc });
                        body.run(DwEmit {
                            epi: &epi,
                            acc,
                            out,
                        });
                    },
                );
            }
        }
        Kind::Winograd(ww) => {
            let k = table_for(isa)?;
            let wc = winograd_call(x, ww, p, oh, ow, false)?;
            let writer = TileWriter::new(k, c_out, stage, out_i32, out_q);
            run_winograd(k, &wc, &writer);
        }
        Kind::SmallCin(pw) => {
            let sc = SmallCin::new(x, p, oh, ow, !pw.zero_points_all_zero());
            let rows = |first: usize, out: &mut [u8]| sc.rows(first, out);
            let panel = |q: usize, dst: &mut [u32], sums: &mut [i32]| sc.panel(q, dst, sums);
            let a = Activations::gather(&rows, Some(&panel), T::SIGNED, m, sc.k(), x.zero_point);
            match stage {
                None => {
                    let o = out_i32.as_deref_mut().expect("i32 output");
                    gemm_strided::<O>(isa, &a, pw, None, Some(o), None, c_out)?;
                }
                Some(st) => {
                    let o = out_q.as_deref_mut().expect("quantized output");
                    gemm_strided::<O>(isa, &a, pw, Some(st), None, Some(o), c_out)?;
                }
            }
        }
        Kind::Gemm(packs) => {
            let g = p.groups;
            let (cin_g, cout_g) = (w.c_in / g, c_out / g);
            let direct = g == 1 && p.kernel == [1, 1] && p.stride == [1, 1] && p.pads == [0; 4];
            for (gi, pw) in packs.iter().enumerate() {
                let gather;
                let gather_fn;
                let a = if direct {
                    T::activations(x.data, m, pw.k(), x.zero_point)
                } else {
                    gather = Im2col::new(x, p, gi, cin_g, oh, ow);
                    gather_fn = |first: usize, rows: &mut [u8]| gather.rows(first, rows);
                    Activations::gather(&gather_fn, None, T::SIGNED, m, pw.k(), x.zero_point)
                };
                let off = gi * cout_g;
                match stage {
                    None => {
                        let o = out_i32.as_deref_mut().expect("i32 output");
                        gemm_strided::<O>(isa, &a, pw, None, Some(&mut o[off..]), None, c_out)?;
                    }
                    Some(st) => {
                        let sub = if g == 1 {
                            st.clone()
                        } else {
                            group_stage(st, off, cout_g)
                        };
                        let o = out_q.as_deref_mut().expect("quantized output");
                        gemm_strided::<O>(
                            isa,
                            &a,
                            pw,
                            Some(&sub),
                            None,
                            Some(&mut o[off..]),
                            c_out,
                        )?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The Winograd call of `x` (output `oh × ow`, or its 2×2 max pool when `pool`), after
/// checking what its exactness bound assumes.
fn winograd_call<'a, T: ActElem>(
    x: &'a NhwcInput<'a, T>,
    ww: &'a WinogradWeights,
    p: &ConvParams,
    oh: usize,
    ow: usize,
    pool: bool,
) -> Result<WinogradConv<'a, T>> {
    // The exactness bound assumes |x − za| ≤ 255, i.e. a zero point of the activation type
    // (as ONNX requires).
    if !(T::MIN..=T::MAX).contains(&x.zero_point) {
        return Err(KernelError::InvalidArgument {
            op: "conv2d",
            arg: "input zero point",
            reason: format!(
                "{} is outside the activation type's range {}..={}",
                x.zero_point,
                T::MIN,
                T::MAX
            ),
        });
    }
    Ok(if pool {
        WinogradConv::pooled(x, ww, p.pads, oh, ow)
    } else {
        WinogradConv::new(x, ww, p.pads, oh, ow)
    })
}

/// Runs a Winograd call into `writer` with the kernels of `k`: chunks of whole bands,
/// about [`WINOGRAD_TILES`] tiles each, in parallel.
fn run_winograd<T: ActElem, O: QuantType>(
    k: &Kernels,
    wc: &WinogradConv<'_, T>,
    writer: &TileWriter<'_, O>,
) {
    thread_local! {
        /// Per-thread buffers, kept across calls: growing them zeroes memory, reusing does not.
        static SCRATCH: std::cell::RefCell<winograd::Scratch> = Default::default();
    }
    let (wino, i16) = (k.winograd(), k.i16());
    let per_chunk = (WINOGRAD_TILES / wc.tiles_per_band().max(1)).max(1);
    let bands = wc.band_count();
    (0..bands.div_ceil(per_chunk))
        .into_par_iter()
        .for_each(|c| {
            let range = c * per_chunk..((c + 1) * per_chunk).min(bands);
            // `bands` starts no parallel work, so the borrow is never re-entered.
            SCRATCH.with_borrow_mut(|s| {
                // SAFETY: the caller sized the writer's output for the call (checked shapes),
                // and the chunks' band ranges (hence their pixels) are disjoint.
                unsafe { wc.bands(wino, i16, range, s, writer) }
            })
        });
}

/// QLinearConv followed by an ONNX MaxPool (NHWC, floor output size; `pool.groups` is
/// ignored) in one call, on the dispatched ISA: `out` is the pooled output, whose shape is
/// returned. The result equals [`conv2d_quant`] followed by [`max_pool`] bit for bit. A
/// Winograd conv with a 2×2 stride-2 unpadded pool and a monotone stage
/// ([`OutputStage::is_monotone_within`]) pools the exact sums inside the conv (one stage
/// per window instead of four, no full-size intermediate); other convs and pools run one
/// after the other.
pub fn conv2d_quant_max_pool<T: ActElem, O: QuantType + PoolElem>(
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    stage: &OutputStage,
    pool: &ConvParams,
    out: &mut [O],
) -> Result<[usize; 4]> {
    conv2d_quant_max_pool_with(dispatch::isa(), x, w, stage, pool, out)
}

/// [`conv2d_quant_max_pool`] on an explicit ISA.
pub fn conv2d_quant_max_pool_with<T: ActElem, O: QuantType + PoolElem>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    stage: &OutputStage,
    pool: &ConvParams,
    out: &mut [O],
) -> Result<[usize; 4]> {
    let [n, oh, ow, c_out] = conv2d_output_shape(x.shape, w)?;
    let [ph, pw] = pool.output_size(oh, ow)?;
    let shape = [n, ph, pw, c_out];
    if out.len() != n * ph * pw * c_out {
        return Err(KernelError::BufferLength {
            op: "conv2d_max_pool",
            arg: "output",
            expected: n * ph * pw * c_out,
            got: out.len(),
        });
    }
    if pool.is_pair_window() {
        match &w.kind {
            // |Y| < 2^29 under the Winograd bound (module docs of `winograd`).
            Kind::Winograd(ww) if stage.is_monotone_within(1 << 29) => {
                check(x, w, n * oh * ow * c_out)?;
                stage.validate("conv2d", c_out)?;
                let k = table_for(isa)?;
                let wc = winograd_call(x, ww, &w.params, oh, ow, true)?;
                let writer = TileWriter::new(k, c_out, Some(stage), None, Some(out));
                run_winograd(k, &wc, &writer);
                return Ok(shape);
            }
            Kind::SmallCin(_) | Kind::Gemm(_) => {
                let pw = match &w.kind {
                    Kind::Gemm(packs) if w.params.groups == 1 => packs.first(),
                    Kind::SmallCin(pw) => Some(pw),
                    _ => None,
                };
                // |x − za| ≤ span and |w − zw| ≤ 511 bound every exact sum.
                let span = (T::MIN - x.zero_point)
                    .unsigned_abs()
                    .max((T::MAX - x.zero_point).unsigned_abs());
                let monotone = |pw: &&PackedWeights| {
                    stage.is_monotone_within((pw.k() as i64).saturating_mul(span as i64 * 511))
                };
                if let Some(pw) = pw.filter(monotone) {
                    check(x, w, n * oh * ow * c_out)?;
                    stage.validate("conv2d", c_out)?;
                    let k = table_for(isa)?;
                    let small = matches!(w.kind, Kind::SmallCin(_));
                    if !(small && pooled_small_cin(k, x, w, pw, stage, [oh, ow], out)) {
                        pooled_gemm(k, x, w, pw, stage, [oh, ow], out);
                    }
                    return Ok(shape);
                }
            }
            _ => {}
        }
    }
    let mut full = vec![O::default(); n * oh * ow * c_out];
    conv2d_quant_with(isa, x, w, stage, &mut full)?;
    max_pool(&full, [n, oh, ow, c_out], pool, out)?;
    Ok(shape)
}

/// Conv + 2×2 stride-2 max pool of a few-channel conv (the stage is monotone, checked by the
/// caller), on ISAs with the pairs geometry (returns `false` otherwise): per pooled output
/// row, stretches of 6 pixels of its two conv rows are packed as two panels, their register
/// tiles of exact sums are reduced window by window right away, and the 3 maxima go
/// through the output stage. No block of sums is written and read back.
fn pooled_small_cin<T: ActElem, O: QuantType>(
    k: &Kernels,
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    pw: &PackedWeights,
    stage: &OutputStage,
    [oh, ow]: [usize; 2],
    out: &mut [O],
) -> bool {
    let za = x.zero_point + if T::SIGNED { 128 } else { 0 };
    let Some(ps) = PanelSums::new(k, pw, za) else {
        return false;
    };
    let (n, c_out) = (x.shape[0], w.c_out);
    let (ph, pwid) = (oh / 2, ow / 2);
    if ph == 0 || pwid == 0 {
        return true;
    }
    let sc = SmallCin::new(x, &w.params, oh, ow, !pw.zero_points_all_zero());
    let writer = TileWriter::new(k, c_out, Some(stage), None, Some(out));
    let body = k.pooling();
    thread_local! {
        /// Kept across calls (see `run_winograd`).
        static BUFS: std::cell::RefCell<PooledBufs> = Default::default();
    }
    let row = PooledRow {
        sc: &sc,
        ps: &ps,
        writer: &writer,
        ph,
        pwid,
        c_out,
    };
    (0..n * ph).into_par_iter().for_each(|r| {
        // A row starts no parallel work, so the borrow is never re-entered.
        BUFS.with_borrow_mut(|bufs| body.run(PooledRowJob { row: &row, r, bufs }))
    });
    true
}

/// One pooled output row of [`pooled_small_cin`].
struct PooledRow<'a, O> {
    sc: &'a SmallCin<'a>,
    ps: &'a PanelSums<'a>,
    writer: &'a TileWriter<'a, O>,
    ph: usize,
    pwid: usize,
    c_out: usize,
}

/// [`PooledRow::run`] of row `r`, as a [`Body`] for the table's pooling copy.
struct PooledRowJob<'a, O> {
    row: &'a PooledRow<'a, O>,
    r: usize,
    bufs: &'a mut PooledBufs,
}

impl<O: QuantType> Body for PooledRowJob<'_, O> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        self.row.run(self.r, self.bufs)
    }
}

impl<O: QuantType> PooledRow<'_, O> {
    #[inline(always)]
    fn run(&self, r: usize, bufs: &mut PooledBufs) {
        const PIXELS: usize = TILE / NR;
        let (b, py) = (r / self.ph, r % self.ph);
        let kg = self.sc.k() / 2;
        let np = self.ps.n_panels();
        let PooledBufs {
            a0,
            a1,
            pooled,
            offs,
        } = bufs;
        a0.resize(kg * MR, 0);
        a1.resize(kg * MR, 0);
        pooled.resize_with(np, || Tile([0; TILE]));
        // Full stretches at stride 1 without weight zero points read the planes in place.
        let indirect = self.sc.indirect().filter(|_| self.ps.has_indirect());
        if let Some((_, o)) = indirect {
            offs.resize(2 * o.len(), 0);
        }
        let (mut s0, mut s1) = ([0i32; MR], [0i32; MR]);
        let (mut t0, mut t1) = (Tile([0; TILE]), Tile([0; TILE]));
        // Pooled pixels `start..start + filled` of the row wait in `pooled` (one tile per
        // column panel) and go to the output stage up to 16 at a time.
        let (mut start, mut filled) = (0, 0);
        for x0 in (0..2 * self.pwid).step_by(MR) {
            let len = MR.min(2 * self.pwid - x0);
            let direct = match indirect {
                Some((words, o)) if len == MR => {
                    let (top, bottom) = offs.split_at_mut(o.len());
                    let base0 = self.sc.pixel_base(b, 2 * py, x0);
                    let base1 = self.sc.pixel_base(b, 2 * py + 1, x0);
                    for ((t, u), &off) in top.iter_mut().zip(bottom.iter_mut()).zip(o) {
                        *t = base0 + off;
                        *u = base1 + off;
                    }
                    Some((words, &*top, &*bottom))
                }
                _ => {
                    self.sc.panel_stretch((b, 2 * py, x0), len, a0, &mut s0);
                    self.sc.panel_stretch((b, 2 * py + 1, x0), len, a1, &mut s1);
                    None
                }
            };
            for (p, pt) in pooled.iter_mut().enumerate() {
                if let Some((words, top, bottom)) = direct {
                    self.ps.tile_indirect(words, top, p, &mut t0);
                    self.ps.tile_indirect(words, bottom, p, &mut t1);
                } else {
                    self.ps.tile(a0, &s0, len, p, &mut t0);
                    self.ps.tile(a1, &s1, len, p, &mut t1);
                }
                let top = t0.0[..len * NR].chunks_exact(2 * NR);
                let bottom = t1.0[..len * NR].chunks_exact(2 * NR);
                let outs = pt.0[filled * NR..].chunks_exact_mut(NR);
                for ((o, t), u) in outs.zip(top).zip(bottom) {
                    // Fixed-size rows, so the maxima are 16-lane vector operations.
                    #[inline(always)]
                    fn row(v: &[i32], k: usize) -> &[i32; NR] {
                        v[k * NR..(k + 1) * NR].try_into().expect("16 columns")
                    }
                    let o: &mut [i32; NR] = o.try_into().expect("16 columns");
                    let (a, c, d, e) = (row(t, 0), row(t, 1), row(u, 0), row(u, 1));
                    for l in 0..NR {
                        o[l] = a[l].max(c[l]).max(d[l].max(e[l]));
                    }
                }
            }
            filled += len / 2;
            if filled + MR / 2 > PIXELS || x0 + MR >= 2 * self.pwid {
                let pixel = (b * self.ph + py) * self.pwid + start;
                for (p, pt) in pooled.iter().enumerate() {
                    let c0 = p * NR;
                    // SAFETY: pooled pixels `pixel..pixel + filled` of row `py` belong to
                    // this row only, and channels `c0..c0+cols` exist; the caller sized the
                    // output.
                    unsafe {
                        self.writer.write(
                            pt,
                            filled,
                            pixel,
                            c0,
                            NR.min(self.c_out - c0),
                            self.c_out,
                        )
                    };
                }
                start += filled;
                filled = 0;
            }
        }
    }
}

/// Per-thread buffers of [`PooledRow`]: the two packed panels and a tile of pooled sums per
/// column panel.
#[derive(Default)]
struct PooledBufs {
    a0: Vec<u32>,
    a1: Vec<u32>,
    pooled: Vec<Tile>,
    /// Word offsets of the two rows' stretches for the indirect micro-kernel.
    offs: Vec<usize>,
}

/// Pooled conv rows per block of [`pooled_gemm`]: 6 conv rows, so a block's `6·ow` GEMM
/// rows are whole 6-row panels.
const POOLED_ROWS: usize = 3;

/// Conv + 2×2 stride-2 max pool on the GEMM paths (few-channel and single-group im2col
/// convs; the stage is monotone, checked by the caller). Blocks of up to [`POOLED_ROWS`]
/// pooled rows of one image are summed exactly into an i32 block (their conv rows are
/// consecutive GEMM rows), each window's four sums reduced to their maximum, and only those
/// go through the output stage: a quarter of the stage's work, and no full-size conv output.
fn pooled_gemm<T: ActElem, O: QuantType>(
    k: &Kernels,
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    pw: &PackedWeights,
    stage: &OutputStage,
    [oh, ow]: [usize; 2],
    out: &mut [O],
) {
    let n = x.shape[0];
    let c_out = w.c_out;
    let p = &w.params;
    let (ph, pwid) = (oh / 2, ow / 2);
    if ph == 0 || pwid == 0 || c_out == 0 {
        return;
    }
    let blocks = ph.div_ceil(POOLED_ROWS);
    let small = matches!(w.kind, Kind::SmallCin(_))
        .then(|| SmallCin::new(x, p, oh, ow, !pw.zero_points_all_zero()));
    let direct = p.kernel == [1, 1] && p.stride == [1, 1] && p.pads == [0; 4];
    let im2col = (small.is_none() && !direct).then(|| Im2col::new(x, p, 0, w.c_in, oh, ow));
    let writer = TileWriter::new(k, c_out, Some(stage), None, Some(out));
    let (mmm, body) = (k.mmm(), k.pooling());
    let k = pw.k();
    thread_local! {
        /// Per-thread buffers, kept across calls (see `run_winograd`).
        static SCRATCH: std::cell::RefCell<(SerialBuf, Vec<i32>, Tile)> =
            std::cell::RefCell::new((SerialBuf::default(), Vec::new(), Tile([0; TILE])));
    }
    (0..n * blocks).into_par_iter().for_each(|bi| {
        // The block starts no parallel work, so the borrow is never re-entered.
        SCRATCH.with_borrow_mut(|(buf, sums, tile)| {
            let (b, py0) = (bi / blocks, bi % blocks * POOLED_ROWS);
            let prows = POOLED_ROWS.min(ph - py0);
            let first = (b * oh + 2 * py0) * ow;
            let m = 2 * prows * ow;
            sums.resize(m * c_out, 0);
            let small_rows;
            let small_panel;
            let im2col_rows;
            let a = if let Some(sc) = &small {
                small_rows = move |r: usize, o: &mut [u8]| sc.rows(first + r, o);
                small_panel =
                    move |q: usize, d: &mut [u32], s: &mut [i32]| sc.panel_at(first + q * MR, d, s);
                Activations::gather(
                    &small_rows,
                    Some(&small_panel),
                    T::SIGNED,
                    m,
                    k,
                    x.zero_point,
                )
            } else if let Some(im) = &im2col {
                im2col_rows = move |r: usize, o: &mut [u8]| im.rows(first + r, o);
                Activations::gather(&im2col_rows, None, T::SIGNED, m, k, x.zero_point)
            } else {
                T::activations(&x.data[first * k..(first + m) * k], m, k, x.zero_point)
            };
            gemm_sums_serial(mmm, &a, pw, sums, c_out, buf);
            // Each window's maximum, up to 16 pixels × 16 channels per stage call.
            for r in 0..prows {
                let row0 = &sums[2 * r * ow * c_out..][..ow * c_out];
                let row1 = &sums[(2 * r + 1) * ow * c_out..][..ow * c_out];
                for x0 in (0..pwid).step_by(TILE / NR) {
                    let cnt = (TILE / NR).min(pwid - x0);
                    for c0 in (0..c_out).step_by(NR) {
                        let cols = NR.min(c_out - c0);
                        body.run(WindowMax {
                            rows: [row0, row1],
                            at: 2 * x0 * c_out + c0,
                            cnt,
                            cols,
                            c_out,
                            tile,
                        });
                        let pixel = (b * ph + py0 + r) * pwid + x0;
                        // SAFETY: pooled pixels `pixel..pixel+cnt` of row `py0 + r` belong
                        // to this block only, and channels `c0..c0+cols` exist; the caller
                        // sized the output for `n·ph·pwid` pixels.
                        unsafe { writer.write(tile, cnt, pixel, c0, cols, c_out) };
                    }
                }
            }
        })
    });
}

/// `tile[i·16 + l]` = the maximum of the 2×2 window of pooled pixel `i < cnt`, channel
/// `l < cols`, from the two conv rows `rows` (pixels of `c_out` sums, the first window's
/// top-left sum at `at`). Run in the table's pooling copy (AVX2 has `vpmaxsd`; baseline
/// x86-64 has no packed i32 maximum).
struct WindowMax<'a> {
    rows: [&'a [i32]; 2],
    at: usize,
    cnt: usize,
    cols: usize,
    c_out: usize,
    tile: &'a mut Tile,
}

impl Body for WindowMax<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let WindowMax {
            rows,
            at,
            cnt,
            cols,
            c_out,
            tile,
        } = self;
        for i in 0..cnt {
            let at = at + 2 * i * c_out;
            let t = &mut tile.0[i * NR..i * NR + cols];
            let (a0, a1) = (&rows[0][at..at + cols], &rows[0][at + c_out..][..cols]);
            let (b0, b1) = (&rows[1][at..at + cols], &rows[1][at + c_out..][..cols]);
            for ((((t, &p), &q), &r), &s) in t.iter_mut().zip(a0).zip(a1).zip(b0).zip(b1) {
                *t = p.max(q).max(r.max(s));
            }
        }
    }
}

/// ConvInteger: `out[n,oy,ox,co] = Σ (x − zx)(w − zw)` as i32, NHWC, on the dispatched ISA.
pub fn conv2d_i32<T: ActElem>(
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    out: &mut [i32],
) -> Result<()> {
    conv2d_i32_with(dispatch::isa(), x, w, out)
}

/// [`conv2d_i32`] on an explicit ISA.
pub fn conv2d_i32_with<T: ActElem>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    out: &mut [i32],
) -> Result<()> {
    conv_impl::<T, u8>(isa, x, w, None, Some(out), None)
}

/// QLinearConv: the conv followed by the fused output stage (bias, per-channel
/// requantization, zero point, activation clamp), NHWC, on the dispatched ISA.
pub fn conv2d_quant<T: ActElem, O: QuantType>(
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    stage: &OutputStage,
    out: &mut [O],
) -> Result<()> {
    conv2d_quant_with(dispatch::isa(), x, w, stage, out)
}

/// [`conv2d_quant`] on an explicit ISA.
pub fn conv2d_quant_with<T: ActElem, O: QuantType>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    stage: &OutputStage,
    out: &mut [O],
) -> Result<()> {
    conv_impl::<T, O>(isa, x, w, Some(stage), None, Some(out))
}

/// The depthwise direct kernel's operands: one output row `(b, oy)` at a time.
struct Depthwise<'a, T> {
    x: &'a NhwcInput<'a, T>,
    p: &'a ConvParams,
    /// `[ky][kx][co]` of `w − zw`.
    taps: &'a [i32],
    multiplier: usize,
    c_out: usize,
    oh: usize,
    ow: usize,
}

/// Raw sums `acc[ox·c_out + co] = Σ_{ky,kx} (x − za)(w − zw)` of output row `row`
/// (`= b·oh + oy`): a [`Body`], run in the table's depthwise copy.
struct DwRow<'a, T> {
    dw: &'a Depthwise<'a, T>,
    row: usize,
    acc: &'a mut [i32],
}

impl<T: ActElem> Body for DwRow<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        self.dw.row_body(self.row, self.acc)
    }
}

impl<T: ActElem> Depthwise<'_, T> {
    /// The one implementation; `inline(always)` so that each compiled copy of [`DwRow`]
    /// gets its own vectorised loop.
    #[inline(always)]
    fn row_body(&self, row: usize, acc: &mut [i32]) {
        let [_, h, wd, c] = self.x.shape;
        let [kh, kw] = self.p.kernel;
        let (b, oy) = (row / self.oh, row % self.oh);
        let (c_out, m) = (self.c_out, self.multiplier);
        let za = self.x.zero_point;
        for (ox, a) in acc.chunks_exact_mut(c_out).enumerate().take(self.ow) {
            a.fill(0);
            for ky in 0..kh {
                let iy = (oy * self.p.stride[0] + ky * self.p.dilation[0]) as isize
                    - self.p.pads[0] as isize;
                if iy < 0 || iy >= h as isize {
                    continue;
                }
                let src_row = &self.x.data[(b * h + iy as usize) * wd * c..][..wd * c];
                for kx in 0..kw {
                    let ix = (ox * self.p.stride[1] + kx * self.p.dilation[1]) as isize
                        - self.p.pads[1] as isize;
                    if ix < 0 || ix >= wd as isize {
                        continue;
                    }
                    let src = &src_row[ix as usize * c..][..c];
                    let t = &self.taps[(ky * kw + kx) * c_out..][..c_out];
                    if m == 1 {
                        for ((a, &xv), &tv) in a.iter_mut().zip(src).zip(t) {
                            *a = a.wrapping_add((xv.to_i32() - za).wrapping_mul(tv));
                        }
                    } else {
                        for ((ac, &xv), tc) in a.chunks_exact_mut(m).zip(src).zip(t.chunks_exact(m))
                        {
                            let xv = xv.to_i32() - za;
                            for (a, &tv) in ac.iter_mut().zip(tc) {
                                *a = a.wrapping_add(xv.wrapping_mul(tv));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The output stage of the depthwise kernel with per-channel vectors expanded once, so the
/// float path is a straight loop the compiler vectorises.
struct DwEpilogue<'a> {
    stage: &'a OutputStage,
    bias: Vec<i32>,
    /// Per-channel f32 multipliers for [`Requant::Float`]; empty for fixed point.
    scales: Vec<f32>,
    lo: i32,
    hi: i32,
}

impl<'a> DwEpilogue<'a> {
    fn new(stage: &'a OutputStage, c_out: usize, (lo, hi): (i32, i32)) -> Self {
        let bias = stage.bias.clone().unwrap_or_else(|| vec![0; c_out]);
        let scales = match &stage.requant {
            Requant::Float(s) if s.len() == 1 => vec![s[0]; c_out],
            Requant::Float(s) => s.clone(),
            Requant::FixedPoint { .. } => Vec::new(),
        };
        DwEpilogue {
            stage,
            bias,
            scales,
            lo,
            hi,
        }
    }

    /// Equations (K2)–(K4) for one output row.
    #[inline(always)]
    fn emit_body<O: QuantType>(&self, acc: &[i32], out: &mut [O]) {
        let c_out = self.bias.len();
        let (z, lo, hi) = (self.stage.zero_point, self.lo, self.hi);
        for (a, o) in acc.chunks_exact(c_out).zip(out.chunks_exact_mut(c_out)) {
            if self.scales.is_empty() {
                for (j, (&a, o)) in a.iter().zip(o.iter_mut()).enumerate() {
                    let t = a.wrapping_add(self.bias[j]);
                    *o = O::from_clamped(self.stage.requant_one(t, j, lo, hi));
                }
            } else {
                for (((&a, o), &b), &s) in
                    a.iter().zip(o.iter_mut()).zip(&self.bias).zip(&self.scales)
                {
                    *o = O::from_clamped(float_requant(a.wrapping_add(b), s, z, lo, hi));
                }
            }
        }
    }
}

/// [`DwEpilogue::emit_body`] of one output row: a [`Body`], run in the table's depthwise
/// copy.
struct DwEmit<'a, 'b, O> {
    epi: &'a DwEpilogue<'b>,
    acc: &'a [i32],
    out: &'a mut [O],
}

impl<O: QuantType> Body for DwEmit<'_, '_, O> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        self.epi.emit_body(self.acc, self.out)
    }
}
