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
//!   runs in the kernel table's depthwise copy (compiled with AVX2 or AVX-512 enabled by
//!   those ISAs' plugs; integer wrapping arithmetic and IEEE f32 steps only, so every ISA
//!   gives the scalar result bit for bit).
//!
//! The output stage is the GEMM's ([`OutputStage`]), per output channel.
//! [`conv2d_quant_max_pool`] runs a conv and a following max pool in one call; a 2×2
//! stride-2 pool is reduced on the exact sums before a monotone output stage.
//!
//! Which of im2col, Winograd and the few-channel packing runs a conv is chosen per ISA by a
//! small cost model (`algo`), overridable with `QUANTKIT_CONV_ALGO`.
//!
//! Files: `algo` (the cost model and the override), `params` (geometry, input types),
//! `weights` (packing and the choice of path),
//! `im2col` (the implicit im2col), `small_cin` (planes of words for C_in ≤ 4), `depthwise`,
//! `winograd` (running `crate::winograd`), `pool_fusion` (conv + max pool); this file holds
//! the entry points and the driver.

mod algo;
mod depthwise;
mod direct;
pub(crate) mod dw_blocks;
mod im2col;
mod params;
mod pool_fusion;
mod small_cin;
mod weights;
mod winograd;

pub use algo::{ConvAlgorithm, CONV_ALGO_NAMES};
pub use params::{ActElem, ConvParams, NhwcInput};
pub use pool_fusion::{conv2d_quant_max_pool, conv2d_quant_max_pool_with};
pub use weights::ConvWeights;

use crate::dispatch::{self, table_for, Isa};
use crate::error::{KernelError, Result};
use crate::gemm::{gemm_strided, Activations, TileWriter};
use crate::output::{OutputStage, QuantType, Requant};
use crate::par::{self, SplitKind};
use depthwise::{Depthwise, DwEmit, DwEpilogue, DwRow};
use dw_blocks::DwCall;
use im2col::Im2col;
use rayon::prelude::*;
use small_cin::SmallCin;
use weights::Kind;
use winograd::{run_winograd, winograd_call};

/// Output shape `[n, oh, ow, c_out]` of a conv.
pub fn conv2d_output_shape(input_shape: [usize; 4], w: &ConvWeights) -> Result<[usize; 4]> {
    let [oh, ow] = w.params.output_size(input_shape[1], input_shape[2])?;
    Ok([input_shape[0], oh, ow, w.c_out])
}

pub(super) fn check<T>(
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    out_len: usize,
) -> Result<[usize; 4]> {
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

/// Whether the blocked depthwise kernel (`dw_blocks`) computes a conv with this stage
/// into `O`: a float output stage and one-byte codes (the fixed-point stage and i32
/// outputs take the row kernel of `depthwise`).
fn blocks_apply<O: QuantType>(stage: Option<&OutputStage>) -> bool {
    std::mem::size_of::<O>() == 1
        && matches!(
            stage,
            Some(OutputStage {
                requant: Requant::Float(_),
                ..
            })
        )
}

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
        Kind::Depthwise {
            blocks: Some(blocks),
            ..
        } if blocks_apply::<O>(stage) && out_q.is_some() => {
            let (Some(st), Some(o)) = (stage, out_q.as_deref_mut()) else {
                unreachable!("checked by the guard")
            };
            let Requant::Float(scale) = &st.requant else {
                unreachable!("checked by the guard")
            };
            let (lo, hi) = st.range::<O>();
            let call = DwCall::new(
                table_for(isa)?.dw_blocks(),
                blocks,
                x,
                p,
                [oh, ow],
                st.bias.as_deref(),
                scale,
                (st.zero_point, lo, hi),
            );
            let row_len = (ow * c_out).max(1);
            let rows = n * oh;
            let tasks = par::tasks(w.ns_per_px * m as f64, rows);
            let per = rows.div_ceil(tasks).max(1);
            let job = |(t, chunk): (usize, &mut [O])| {
                for (i, out) in chunk.chunks_mut(row_len).enumerate() {
                    call.row(t * per + i, out);
                }
            };
            if tasks > 1 {
                par::note(SplitKind::Depthwise);
                o.par_chunks_mut(per * row_len).enumerate().for_each(job);
            } else {
                o.chunks_mut(per * row_len).enumerate().for_each(job);
            }
        }
        Kind::Depthwise {
            taps, multiplier, ..
        } => {
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
            let row_len = (ow * c_out).max(1);
            // Output rows in tasks of `per` rows, as many as the work pays for.
            let rows = n * oh;
            let tasks = par::tasks(w.ns_per_px * m as f64, rows);
            let per = rows.div_ceil(tasks).max(1);
            if tasks > 1 {
                par::note(SplitKind::Depthwise);
            }
            if let Some(o) = out_i32.as_deref_mut() {
                let job = |(t, chunk): (usize, &mut [i32])| {
                    for (i, acc) in chunk.chunks_mut(row_len).enumerate() {
                        body.run(
                            &DwRow {
                                dw: &dw,
                                row: t * per + i,
                            },
                            acc,
                            &mut [],
                        );
                    }
                };
                if tasks > 1 {
                    o.par_chunks_mut(per * row_len).enumerate().for_each(job);
                } else {
                    o.chunks_mut(per * row_len).enumerate().for_each(job);
                }
            } else if let (Some(o), Some(st)) = (out_q.as_deref_mut(), stage) {
                let epi = DwEpilogue::new(st, c_out, st.range::<O>());
                let emit = DwEmit { epi: &epi };
                let job = |acc: &mut Vec<i32>, (t, chunk): (usize, &mut [O])| {
                    for (i, out) in chunk.chunks_mut(row_len).enumerate() {
                        body.run(
                            &DwRow {
                                dw: &dw,
                                row: t * per + i,
                            },
                            acc,
                            &mut [],
                        );
                        body.run(&emit, acc, out);
                    }
                };
                if tasks > 1 {
                    o.par_chunks_mut(per * row_len)
                        .enumerate()
                        .for_each_init(|| vec![0i32; row_len], job);
                } else {
                    let mut acc = vec![0i32; row_len];
                    o.chunks_mut(per * row_len)
                        .enumerate()
                        .for_each(|c| job(&mut acc, c));
                }
            }
        }
        Kind::Direct(dw) => {
            let k = table_for(isa)?;
            let mut writer = TileWriter::new(k, c_out, stage, out_i32, out_q);
            let work = w.ns_per_px * m as f64;
            direct::run_direct(k, x, dw, p, [oh, ow], c_out, false, work, &mut writer);
        }
        Kind::Winograd(ww) => {
            let k = table_for(isa)?;
            let wc = winograd_call(x, ww, p, oh, ow, false)?;
            let writer = TileWriter::new(k, c_out, stage, out_i32, out_q);
            run_winograd(k, &wc, &writer, w.ns_per_px * m as f64);
        }
        Kind::SmallCin(pw) => {
            let sc = SmallCin::new(x, p, oh, ow, !pw.zero_points_all_zero());
            let k = table_for(isa)?;
            let za = x.zero_point + if T::SIGNED { 128 } else { 0 };
            // Without weight zero points: 6-pixel tiles read in place in the planes.
            if let Some(ps) = crate::gemm::PanelSums::new(k, pw, za).filter(|s| s.has_indirect()) {
                let mut writer = TileWriter::new(k, c_out, stage, out_i32, out_q);
                writer.add_column_terms(ps.column_terms());
                let work = w.ns_per_px * m as f64;
                small_cin::run_rows(&sc, &ps, [n, oh, ow], c_out, work, &writer);
                return Ok(());
            }
            let rows = |first: usize, out: &mut [u8]| sc.rows(first, out);
            let panel = |q: usize, dst: &mut [u32], sums: &mut [i32]| sc.panel(q, dst, sums);
            let a = Activations::gather(&rows, Some(&panel), T::SIGNED, m, sc.k(), x.zero_point);
            match stage {
                None => {
                    let o = out_i32.as_deref_mut().expect("i32 output");
                    gemm_strided::<O>(isa, true, &a, pw, None, Some(o), None, c_out)?;
                }
                Some(st) => {
                    let o = out_q.as_deref_mut().expect("quantized output");
                    gemm_strided::<O>(isa, true, &a, pw, Some(st), None, Some(o), c_out)?;
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
                        gemm_strided::<O>(
                            isa,
                            false,
                            &a,
                            pw,
                            None,
                            Some(&mut o[off..]),
                            None,
                            c_out,
                        )?;
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
                            false,
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
