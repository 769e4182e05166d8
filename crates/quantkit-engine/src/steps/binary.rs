//! The element-wise step on two tensors of 8-bit codes, produced by `compile/binary.rs`:
//! `DQ(a) ∘ DQ(b) [→ Relu | Clip] → Q` for ∘ ∈ {Add, Sub, Mul, Div} (QLinearAdd,
//! QLinearMul, ...), equal to the QDQ graph on the float executor bit for bit.
//!
//! Per element: `y = clamp(Q(f32(DQ_a(a) ∘ DQ_b(b))), lo, hi)`, where `DQ_a`/`DQ_b` are
//! 256-entry f32 tables made by the graph's own DequantizeLinear (so each is the exact f32
//! the graph computes), `∘` is one f32 operation (the graph's Add/Sub/Mul/Div compute in
//! f32), `Q` is `quantkit_core::quantize_code` (the graph QuantizeLinear's per-tensor 8-bit
//! rule: f32 division by the scale, round half to even, + zero point, saturate), and
//! `[lo, hi]` the fused Relu/Clip as a clamp on codes (Q is monotone, so
//! `Q(clip(v)) = clamp(Q(v), Q(lo), Q(hi))`). Nothing is approximated: the step performs the
//! reference's f32 operations in the reference's order, so the codes are the graph's.
//!
//! Layouts: operands of one shape and layout run as one flat loop (above 2^15 elements
//! through the 65,536-entry table of every code pair, each entry computed by the same
//! per-element arithmetic, built on the first such call and kept for the plan's later
//! runs: 65,536 evaluations once instead of one per element every run); an operand of one element, or a per-channel operand
//! (`[n|1, C, 1, 1]`) beside an NCHW operand, becomes one 256-entry row per channel (again
//! the same arithmetic, once per code instead of once per element) when a channel has
//! enough pixels to pay for it (`ROW_MIN_PIXELS`), and is applied element by element below;
//! a per-channel operand beside an NHWC operand (a squeeze-and-excite scale) is applied
//! element by element with the channel values repeated along the pixels. Every per-element
//! loop is the dispatched `quantkit_kernels::quantize::binary_codes` (the same f32
//! operation and `Q`, vectorised on AVX2 and above); any other
//! broadcast runs the graph's Add/Sub/Mul/Div on the two dequantized tensors (ONNX order),
//! then the same `Q`: slower, still exact.
//!
//! Threads: the flat, one-element and per-channel loops split their output into contiguous
//! chunks across the pool (`par::for_chunks`, by estimated work); every output byte is
//! computed from its own index, so any split gives the same bytes.

use super::{bad, check_dtype, GraphOp, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::ops::binary::{Arith, Num};
use quantkit_graph::{DType, Data, Tensor};
use quantkit_kernels::par::{self, SplitKind};
use quantkit_kernels::quantize::{binary_codes, ChainOp, Operand};

/// Estimated ns per element on one core (for `par::for_chunks`): the per-element f32
/// arithmetic (vectorised, `quantize::binary_codes`), a lookup in the 64 KiB pair table, a
/// lookup in a 256-entry row.
const PAIR_NS: f64 = 0.5;
const PAIR_TABLE_NS: f64 = 1.0;
const ROW_NS: f64 = 0.5;

/// Pixels per channel below which a per-channel operand of an NCHW tensor is applied element
/// by element rather than through one 256-entry row per channel: a row costs 256
/// evaluations of the arithmetic, the per-element path one per pixel. (NHWC tensors always
/// take the vectorised per-element path.)
const ROW_MIN_PIXELS: usize = 256;

/// `DQ(a) ∘ DQ(b) → Q` on codes (see the module doc for the exact arithmetic).
pub(crate) struct BinaryStep {
    pub op: Arith,
    /// Dequantized value of each code of `a` / `b`, indexed by the code's byte.
    pub da: Box<[f32; 256]>,
    pub db: Box<[f32; 256]>,
    pub a_dtype: DType,
    pub b_dtype: DType,
    /// Output scale, zero point and code type.
    pub scale: f32,
    pub zp: i32,
    pub out: DType,
    /// Clamp of the output codes (fused Relu/Clip; the type's range otherwise).
    pub clamp: (i32, i32),
    /// The graph's operator (`Add`, ...) for the general broadcasting path.
    pub graph_op: GraphOp,
    /// The 65,536-entry table of every code pair, built on the first large flat call.
    pub pairs: std::sync::OnceLock<Vec<u8>>,
}

/// The bytes of an 8-bit code tensor.
fn bytes(t: &Tensor) -> Option<&[u8]> {
    match &t.data {
        Data::U8(d) => Some(d),
        // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
        Data::I8(d) => Some(unsafe { std::slice::from_raw_parts(d.as_ptr().cast(), d.len()) }),
        _ => None,
    }
}

impl BinaryStep {
    #[inline(always)]
    fn code(&self, v: f32) -> i32 {
        let c = match self.out {
            DType::U8 => i32::from(quantkit_core::quantize_code::<u8>(v, self.scale, self.zp)),
            _ => i32::from(quantkit_core::quantize_code::<i8>(v, self.scale, self.zp)),
        };
        c.clamp(self.clamp.0, self.clamp.1)
    }

    /// `codes` holds each output code's byte (an i8 code as its two's-complement byte).
    fn finish(&self, shape: Vec<usize>, codes: Vec<u8>, nhwc: bool) -> Val {
        let tensor = match self.out {
            DType::U8 => tensor_u8(shape, codes),
            _ => tensor_i8(shape, codes.into_iter().map(|c| c as i8).collect()),
        };
        Val { tensor, nhwc }
    }

    /// `code(op(da[x], db[y]))` for one pair of codes, as the output code's byte.
    #[inline(always)]
    fn pair(&self, x: u8, y: u8) -> u8 {
        self.code(f32::apply(
            self.op,
            self.da[x as usize],
            self.db[y as usize],
        )) as u8
    }

    /// `out[i] = code(full[i] ∘ b[i])` as bytes through the dispatched
    /// `quantkit_kernels::quantize::binary_codes` (the same f32 operation and `Q` as
    /// `pair`, vectorised): `full` is read through `dfull`; `swapped`: `full` is the graph's
    /// second operand, so the operation is `b[i] ∘ full[i]`.
    fn codes(
        &self,
        dfull: &[f32; 256],
        full: &[u8],
        b: Operand<'_>,
        swapped: bool,
        out: &mut [u8],
    ) {
        let op = match (self.op, swapped) {
            (Arith::Add, _) => ChainOp::Add,
            (Arith::Sub, false) => ChainOp::Sub,
            (Arith::Sub, true) => ChainOp::SubFrom,
            (Arith::Mul, _) => ChainOp::Mul,
            (Arith::Div, false) => ChainOp::Div,
            (Arith::Div, true) => ChainOp::DivInto,
        };
        match self.out {
            DType::U8 => {
                binary_codes::<u8>(op, dfull, full, b, self.scale, self.zp, self.clamp, out)
            }
            _ => binary_codes::<i8>(op, dfull, full, b, self.scale, self.zp, self.clamp, out),
        }
    }

    /// The 256 output bytes for every code of the full operand against one code `s` of the
    /// other (`swapped`: the full operand is the second): the same `pair` arithmetic, made
    /// once per channel instead of once per element.
    fn row(&self, s: u8, swapped: bool) -> [u8; 256] {
        let mut out = [0u8; 256];
        let all: [u8; 256] = std::array::from_fn(|i| i as u8);
        let (dfull, dsmall) = if swapped {
            (&self.db, &self.da)
        } else {
            (&self.da, &self.db)
        };
        let c = [dsmall[s as usize]; 256];
        self.codes(dfull, &all, Operand::Values(&c), swapped, &mut out);
        out
    }

    /// Element by element over equal-length `a` and `b`; above 2^15 elements through the
    /// 65,536-entry table of every code pair (each entry is `pair` itself, so exact; built
    /// on the first such call, kept in the step).
    fn zip(&self, a: &[u8], b: &[u8], out: &mut [u8]) {
        if a.len() > 1 << 15 {
            let t = self.pairs.get_or_init(|| {
                (0..1usize << 16)
                    .map(|i| self.pair((i >> 8) as u8, i as u8))
                    .collect()
            });
            par::for_chunks(SplitKind::Eltwise, out, PAIR_TABLE_NS, 1, |off, out| {
                for ((o, &x), &y) in out.iter_mut().zip(&a[off..]).zip(&b[off..]) {
                    *o = t[(x as usize) << 8 | y as usize];
                }
            });
            return;
        }
        par::for_chunks(SplitKind::Eltwise, out, PAIR_NS, 1, |off, out| {
            let n = out.len();
            let b = Operand::Codes(&self.db, &b[off..][..n]);
            self.codes(&self.da, &a[off..][..n], b, false, out);
        });
    }

    /// Every code of `full` through one 256-entry row.
    fn through_row(row: &[u8; 256], full: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; full.len()];
        par::for_chunks(SplitKind::Eltwise, &mut out, ROW_NS, 1, |off, out| {
            for (o, &x) in out.iter_mut().zip(&full[off..]) {
                *o = row[x as usize];
            }
        });
        out
    }

    /// `a` (the full tensor) against a per-channel `b`, in `a`'s layout; `swapped`: the
    /// full tensor is the second operand. `[n, c, hw]` are the full tensor's sizes.
    #[allow(clippy::too_many_arguments)]
    fn per_channel(
        &self,
        full: &[u8],
        small: &[u8],
        swapped: bool,
        nhwc: bool,
        batched: bool,
        [c, hw]: [usize; 2],
        out: &mut [u8],
    ) {
        if full.is_empty() || c * hw == 0 {
            return;
        }
        if nhwc {
            // The vectorised per-element kernel beats the 256-entry rows at every plane size
            // (PP-OCR's classifier on AVX2: its SE scales, planes of 288-1,152 pixels, went
            // from 0.222 to 0.137 ms per run with the rows dropped). Chunks of whole pixels;
            // per run of pixels of one image, the channel values repeated so that one call
            // covers ~1,024 elements whatever the channel count.
            let (dfull, dsmall) = if swapped {
                (&self.db, &self.da)
            } else {
                (&self.da, &self.db)
            };
            let run = (1024 / c).max(1);
            par::for_chunks(SplitKind::Eltwise, out, PAIR_NS, c, |off, out| {
                let mut vs = Vec::with_capacity(c * run);
                let mut vs_img = usize::MAX;
                let (mut p, mut done) = (off / c, 0);
                while done < out.len() {
                    let img = p / hw;
                    let n = run.min((img + 1) * hw - p).min((out.len() - done) / c);
                    let s_img = if batched { img } else { 0 };
                    if s_img != vs_img {
                        vs.clear();
                        for _ in 0..run {
                            vs.extend(small[s_img * c..][..c].iter().map(|&s| dsmall[s as usize]));
                        }
                        vs_img = s_img;
                    }
                    let len = n * c;
                    let v = Operand::Values(&vs[..len]);
                    let o = &mut out[done..done + len];
                    self.codes(dfull, &full[p * c..][..len], v, swapped, o);
                    p += n;
                    done += len;
                }
            });
            return;
        }
        if hw < ROW_MIN_PIXELS {
            for (img, (src, dst)) in full.chunks(c * hw).zip(out.chunks_mut(c * hw)).enumerate() {
                let b = &small[if batched { img * c } else { 0 }..][..c];
                // Fewer pixels per channel than a row has entries: `pair` per element costs
                // less than the rows, and is the rows' own arithmetic.
                for ((plane, o), &s) in src.chunks(hw).zip(dst.chunks_mut(hw)).zip(b) {
                    for (o, &x) in o.iter_mut().zip(plane) {
                        *o = if swapped {
                            self.pair(s, x)
                        } else {
                            self.pair(x, s)
                        };
                    }
                }
            }
            return;
        }
        let n_img = full.len() / (c * hw);
        // One 256-entry row per (image, channel): the channel's operand is one code.
        let rows: Vec<[u8; 256]> = (0..if batched { n_img } else { 1 })
            .flat_map(|img| small[img * c..][..c].iter())
            .map(|&s| self.row(s, swapped))
            .collect();
        let row = |img: usize, ch: usize| &rows[if batched { img * c + ch } else { ch }];
        // Chunks of whole planes: one row per plane.
        par::for_chunks(SplitKind::Eltwise, out, ROW_NS, hw, |off, out| {
            for (k, (o, plane)) in out.chunks_mut(hw).zip(full[off..].chunks(hw)).enumerate() {
                let p = off / hw + k;
                let r = row(p / c, p % c);
                for (o, &x) in o.iter_mut().zip(plane) {
                    *o = r[x as usize];
                }
            }
        });
    }

    /// The general broadcast: the graph operator on the dequantized ONNX-ordered tensors.
    fn general(&self, a: &Tensor, b: &Tensor) -> Result<Val> {
        let deq = |t: &Tensor, d: &[f32; 256]| -> Tensor {
            let v = bytes(t).unwrap_or(&[]);
            Tensor::from_f32(&t.shape, v.iter().map(|&c| d[c as usize]).collect())
        };
        let fa = deq(a, &self.da);
        let fb = deq(b, &self.db);
        let y = self.graph_op.eval(&[Some(&fa), Some(&fb)])?.remove(0);
        let shape = y.shape.clone();
        let codes = y
            .to_f32_vec()
            .into_iter()
            .map(|v| self.code(v) as u8)
            .collect();
        Ok(self.finish(shape, codes, false))
    }
}

/// The channel count when `small` is a per-channel operand (`[n|1, C, 1, 1]` in ONNX order)
/// of the 4-D `big` (`[N, C, H, W]`), with whether `small` has a batch axis.
fn per_channel(big: &[usize], small: &[usize]) -> Option<bool> {
    let s: Vec<usize> = std::iter::repeat_n(1, 4usize.saturating_sub(small.len()))
        .chain(small.iter().copied())
        .collect();
    if big.len() != 4 || s.len() != 4 || s[2] != 1 || s[3] != 1 || s[1] != big[1] {
        return None;
    }
    match s[0] {
        1 => Some(false),
        n if n == big[0] => Some(true),
        _ => None,
    }
}

impl Kernel for BinaryStep {
    fn per_image(&self, _consts: &[Option<&Tensor>]) -> bool {
        // Element-wise with numpy broadcasting: an operand with one image (a constant, or
        // computed from the chunk's own images) is broadcast, never mixed across images.
        true
    }
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let get = |k: usize| {
            inputs
                .get(k)
                .copied()
                .flatten()
                .ok_or_else(|| bad(step, &format!("input {k}"), "missing".into()))
        };
        let (a, b) = (get(0)?, get(1)?);
        check_dtype(step, a, self.a_dtype)?;
        check_dtype(step, b, self.b_dtype)?;
        let (ab, bb) = (bytes(&a.tensor), bytes(&b.tensor));
        let (Some(ab), Some(bb)) = (ab, bb) else {
            return Err(bad(step, "input 0", "not 8-bit codes".into()));
        };
        // Same shape and layout: one flat loop.
        if a.tensor.shape == b.tensor.shape && a.nhwc == b.nhwc {
            let mut codes = vec![0u8; ab.len()];
            self.zip(ab, bb, &mut codes);
            return Ok(vec![self.finish(a.tensor.shape.clone(), codes, a.nhwc)]);
        }
        if bb.len() == 1 && a.tensor.rank() >= b.tensor.rank() {
            let codes = Self::through_row(&self.row(bb[0], false), ab);
            return Ok(vec![self.finish(a.tensor.shape.clone(), codes, a.nhwc)]);
        }
        if ab.len() == 1 && b.tensor.rank() >= a.tensor.rank() {
            let codes = Self::through_row(&self.row(ab[0], true), bb);
            return Ok(vec![self.finish(b.tensor.shape.clone(), codes, b.nhwc)]);
        }
        // A per-channel operand ([n|1, C, 1, 1]: its NCHW and NHWC orders agree).
        let onnx = |v: &Val| -> Vec<usize> {
            let s = &v.tensor.shape;
            if v.nhwc {
                vec![s[0], s[3], s[1], s[2]]
            } else {
                s.clone()
            }
        };
        let (a_onnx, b_onnx) = (onnx(a), onnx(b));
        for (swapped, full, small, f_onnx, s_onnx) in [
            (false, a, b, &a_onnx, &b_onnx),
            (true, b, a, &b_onnx, &a_onnx),
        ] {
            if let Some(batched) = per_channel(f_onnx, s_onnx) {
                let (fb, sb) = if swapped { (bb, ab) } else { (ab, bb) };
                let mut codes = vec![0u8; fb.len()];
                let dims = [f_onnx[1], f_onnx[2] * f_onnx[3]];
                self.per_channel(fb, sb, swapped, full.nhwc, batched, dims, &mut codes);
                let _ = small;
                return Ok(vec![self.finish(
                    full.tensor.shape.clone(),
                    codes,
                    full.nhwc,
                )]);
            }
        }
        Ok(vec![self.general(&a.to_nchw(), &b.to_nchw())?])
    }
    fn describe(&self) -> String {
        format!(
            "{:?} of {} and {} codes → {} (exact f32)",
            self.op, self.a_dtype, self.b_dtype, self.out
        )
    }
}
