//! `Conv` (N-D, groups, strides, dilations, pads / auto_pad): im2col followed by the f32
//! GEMM, batches run in parallel with rayon.
//!
//! For batch n and group g: `Y[n, g] (M/g × P) = W[g] (M/g × C/g·∏k) · col (C/g·∏k × P)`,
//! where P is the number of output positions and col holds the receptive fields
//! (zeros where they fall on padding).

use super::{input, make, opt_input, per_axis, positive_ints, window_out, OpCtx, PadSpec};
use crate::error::OpError;
use crate::ir::Node;
use crate::linalg::{sgemm, MatRef};
use crate::tensor::{DType, Data, Tensor};
use rayon::prelude::*;

/// The attributes of Conv, ConvInteger and QLinearConv, parsed once and without input
/// shapes (the geometry, [`ConvGeom`], needs them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvAttrs {
    /// `group` (≥ 1).
    pub group: usize,
    /// `kernel_shape`, when given (it must equal the weight's spatial dims).
    pub kernel_shape: Option<Vec<usize>>,
    /// `strides` (positive), default 1 on every axis.
    pub strides: Option<Vec<usize>>,
    /// `dilations` (positive), default 1 on every axis.
    pub dilations: Option<Vec<usize>>,
    /// `pads` / `auto_pad`.
    pub pads: PadSpec,
}

impl ConvAttrs {
    /// Reads the attributes of `node`.
    pub fn parse(node: &Node) -> Result<ConvAttrs, OpError> {
        Ok(ConvAttrs {
            group: match node.attr_int("group", 1)? {
                g if g >= 1 => g as usize,
                g => return Err(OpError::attr("group", format!("expected ≥ 1, got {g}"))),
            },
            kernel_shape: match node.attr_ints("kernel_shape")? {
                None => None,
                Some(k) if k.iter().all(|&v| v >= 0) => {
                    Some(k.iter().map(|&v| v as usize).collect())
                }
                Some(k) => {
                    return Err(OpError::attr(
                        "kernel_shape",
                        format!("expected non-negative values, got {k:?}"),
                    ))
                }
            },
            strides: positive_ints(node, "strides")?,
            dilations: positive_ints(node, "dilations")?,
            pads: PadSpec::parse(node)?,
        })
    }
}

/// Geometry of a convolution (also used by ConvInteger and QLinearConv).
#[derive(Clone, Debug)]
pub struct ConvGeom {
    /// Batch size.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Output channels.
    pub m: usize,
    /// Groups.
    pub group: usize,
    /// Input spatial sizes.
    pub in_sp: Vec<usize>,
    /// Kernel sizes.
    pub k: Vec<usize>,
    /// Output spatial sizes.
    pub out_sp: Vec<usize>,
    /// Strides.
    pub strides: Vec<usize>,
    /// Dilations.
    pub dilations: Vec<usize>,
    /// Padding at the start of each axis.
    pub pad_begin: Vec<usize>,
    /// Padding at the end of each axis.
    pub pad_end: Vec<usize>,
}

impl ConvGeom {
    /// Reads the attributes of a Conv-like node for input shape `x` and weight shape `w`.
    pub fn new(ctx: &OpCtx, x: &[usize], w: &[usize]) -> Result<ConvGeom, OpError> {
        ConvGeom::with(&ConvAttrs::parse(ctx.node)?, x, w)
    }

    /// The geometry of parsed attributes `a` for input shape `x` and weight shape `w`.
    pub fn with(a: &ConvAttrs, x: &[usize], w: &[usize]) -> Result<ConvGeom, OpError> {
        if x.len() < 3 || w.len() != x.len() {
            return Err(OpError::shape(
                "input [N, C, D...] and weight [M, C/group, k...] of equal rank ≥ 3",
                (x, w),
            ));
        }
        let nd = x.len() - 2;
        let group = a.group;
        let k: Vec<usize> = a.kernel_shape.clone().unwrap_or_else(|| w[2..].to_vec());
        if k.as_slice() != &w[2..] {
            return Err(OpError::shape(format!("weight spatial dims {k:?}"), w));
        }
        let strides = per_axis("strides", &a.strides, nd)?;
        let dilations = per_axis("dilations", &a.dilations, nd)?;
        let (c, m) = (x[1], w[0]);
        if c != w[1] * group || m % group != 0 {
            return Err(OpError::shape(
                format!("weight [M, {}/{group}, ...] with M divisible by {group}", c),
                w,
            ));
        }
        let in_sp = x[2..].to_vec();
        let (pb, pe) = a.pads.resolve(&in_sp, &k, &strides, &dilations)?;
        let out_sp = (0..nd)
            .map(|i| {
                window_out(
                    in_sp[i],
                    k[i],
                    strides[i],
                    dilations[i],
                    pb[i],
                    pe[i],
                    false,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut y_shape = vec![x[0], m];
        y_shape.extend_from_slice(&out_sp);
        super::alloc_len("Conv output", &y_shape)?;
        let col_rows = (c / group).checked_mul(k.iter().try_fold(1usize, |a, &v| a.checked_mul(v)).unwrap_or(usize::MAX));
        let out_len: usize = out_sp.iter().product();
        super::alloc_len("Conv im2col buffer", &[col_rows.unwrap_or(usize::MAX), out_len])?;
        Ok(ConvGeom {
            n: x[0],
            c,
            m,
            group,
            in_sp,
            k,
            out_sp,
            strides,
            dilations,
            pad_begin: pb,
            pad_end: pe,
        })
    }
    /// Output positions per image.
    pub fn out_len(&self) -> usize {
        self.out_sp.iter().product()
    }
    /// Rows of the im2col matrix per group.
    pub fn col_rows(&self) -> usize {
        self.c / self.group * self.k.iter().product::<usize>()
    }
    /// Whether im2col is the identity (1×1 kernel, stride 1, no padding).
    pub fn is_pointwise(&self) -> bool {
        self.k.iter().all(|&k| k == 1)
            && self.strides.iter().all(|&s| s == 1)
            && self.pad_begin.iter().all(|&p| p == 0)
            && self.in_sp == self.out_sp
    }
    /// Writes the im2col matrix of `x` (one image, channels `c0..c0+C/group`) into `col`
    /// (`col_rows × out_len`), filling padding with `pad`.
    pub fn im2col<T: Copy>(&self, x: &[T], c0: usize, col: &mut [T], pad: T) {
        let nd = self.k.len();
        let in_len: usize = self.in_sp.iter().product();
        let p = self.out_len();
        let klen: usize = self.k.iter().product();
        let last = nd - 1;
        let (ow, iw, kw) = (self.out_sp[last], self.in_sp[last], self.k[last]);
        let (sw, dw, pw) = (
            self.strides[last],
            self.dilations[last],
            self.pad_begin[last] as isize,
        );
        let outer: usize = p / ow.max(1);
        let mut kidx = vec![0usize; nd];
        let mut oidx = vec![0usize; nd];
        for row in 0..self.col_rows() {
            let ci = c0 + row / klen;
            let mut rem = row % klen;
            for a in (0..nd).rev() {
                kidx[a] = rem % self.k[a];
                rem /= self.k[a];
            }
            let xc = &x[ci * in_len..(ci + 1) * in_len];
            let dst = &mut col[row * p..(row + 1) * p];
            // Columns j read input i = j·sw + k0; those with i in [0, iw) form one run
            // [j0, j1), the same for every output row: pad around it, copy (or
            // stride-gather) inside, with no bounds test per element.
            let k0 = (kidx[last] * dw) as isize - pw;
            let (sw_i, iw_i) = (sw as isize, iw as isize);
            let j0 = if k0 < 0 { (-k0 + sw_i - 1) / sw_i } else { 0 };
            let j1 = if iw_i > k0 {
                ((iw_i - k0 + sw_i - 1) / sw_i).min(ow as isize)
            } else {
                0
            };
            let (j0, j1) = (j0.min(ow as isize) as usize, j1.max(0) as usize);
            // `oidx` counts through the outer output axes like an odometer (a division
            // per output row cost more than copying the row).
            oidx.iter_mut().for_each(|v| *v = 0);
            // 2-D (the common case): the input row of output row `o` is a line of
            // arithmetic, not a walk over axis vectors.
            let row_2d = (nd == 2).then(|| {
                (
                    self.strides[0],
                    (kidx[0] * self.dilations[0]) as isize - self.pad_begin[0] as isize,
                    self.in_sp[0] as isize,
                )
            });
            for o in 0..outer {
                // Input offset of the outer (all but last) axes; None if in padding.
                let off = if let Some((sh, ky0, ih)) = row_2d {
                    let iy = (o * sh) as isize + ky0;
                    (iy >= 0 && iy < ih).then(|| iy as usize * iw)
                } else {
                    if o > 0 {
                        for a in (0..last).rev() {
                            oidx[a] += 1;
                            if oidx[a] < self.out_sp[a] {
                                break;
                            }
                            oidx[a] = 0;
                        }
                    }
                    let mut off = Some(0usize);
                    let mut stride_in = iw;
                    for a in (0..last).rev() {
                        let i = (oidx[a] * self.strides[a] + kidx[a] * self.dilations[a]) as isize
                            - self.pad_begin[a] as isize;
                        if i < 0 || i >= self.in_sp[a] as isize {
                            off = None;
                            break;
                        }
                        if let Some(v) = off.as_mut() {
                            *v += i as usize * stride_in;
                        }
                        stride_in *= self.in_sp[a];
                    }
                    off
                };
                let d = &mut dst[o * ow..(o + 1) * ow];
                match off {
                    None => d.fill(pad),
                    Some(base) => {
                        if j0 >= j1 {
                            d.fill(pad);
                        } else {
                            d[..j0].fill(pad);
                            d[j1..].fill(pad);
                            let start = (base as isize + j0 as isize * sw_i + k0) as usize;
                            let inner = &mut d[j0..j1];
                            if sw == 1 {
                                inner.copy_from_slice(&xc[start..start + inner.len()]);
                            } else {
                                for (v, &src) in
                                    inner.iter_mut().zip(xc[start..].iter().step_by(sw))
                                {
                                    *v = src;
                                }
                            }
                        }
                    }
                }
            }
            let _ = kw;
        }
    }

    /// The adjoint of [`ConvGeom::im2col`]: adds each entry of `col` (`col_rows × out_len`)
    /// to the input element of one image (channels `c0..c0+C/group`) it was read from;
    /// entries that fell on padding are dropped.
    pub fn col2im_add(&self, col: &[f32], c0: usize, dx: &mut [f32]) {
        let nd = self.k.len();
        let in_len: usize = self.in_sp.iter().product();
        let p = self.out_len();
        let klen: usize = self.k.iter().product();
        let mut kidx = vec![0usize; nd];
        let mut oidx = vec![0usize; nd];
        for row in 0..self.col_rows() {
            let ci = c0 + row / klen;
            let mut rem = row % klen;
            for a in (0..nd).rev() {
                kidx[a] = rem % self.k[a];
                rem /= self.k[a];
            }
            let xc = &mut dx[ci * in_len..(ci + 1) * in_len];
            let src = &col[row * p..(row + 1) * p];
            if nd == 2 {
                let (oh, ow) = (self.out_sp[0], self.out_sp[1]);
                let (ih, iw) = (self.in_sp[0] as isize, self.in_sp[1] as isize);
                let ky = (kidx[0] * self.dilations[0]) as isize - self.pad_begin[0] as isize;
                let kx = (kidx[1] * self.dilations[1]) as isize - self.pad_begin[1] as isize;
                let (sh, sw) = (self.strides[0] as isize, self.strides[1] as isize);
                for oy in 0..oh {
                    let iy = oy as isize * sh + ky;
                    if iy < 0 || iy >= ih {
                        continue;
                    }
                    let xrow = &mut xc[iy as usize * iw as usize..(iy as usize + 1) * iw as usize];
                    for (ox, &v) in src[oy * ow..(oy + 1) * ow].iter().enumerate() {
                        let ix = ox as isize * sw + kx;
                        if ix >= 0 && ix < iw {
                            xrow[ix as usize] += v;
                        }
                    }
                }
                continue;
            }
            oidx.iter_mut().for_each(|v| *v = 0);
            for (o, &v) in src.iter().enumerate() {
                if o > 0 {
                    for a in (0..nd).rev() {
                        oidx[a] += 1;
                        if oidx[a] < self.out_sp[a] {
                            break;
                        }
                        oidx[a] = 0;
                    }
                }
                let mut off = Some(0usize);
                for a in 0..nd {
                    let i = (oidx[a] * self.strides[a] + kidx[a] * self.dilations[a]) as isize
                        - self.pad_begin[a] as isize;
                    if i < 0 || i >= self.in_sp[a] as isize {
                        off = None;
                        break;
                    }
                    off = off.map(|f| f * self.in_sp[a] + i as usize);
                }
                if let Some(f) = off {
                    xc[f] += v;
                }
            }
        }
    }
}

/// Evaluates `Conv`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_fused(ctx, inputs, false)
}

/// Evaluates `Conv`, followed by `Relu` when `relu` is set (the executor fuses a Conv whose
/// only reader is a Relu, so the output is clamped while it is still in cache instead of in
/// a second pass over a new tensor; `max(v, 0)` is the same value either way).
pub fn eval_fused(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    relu: bool,
) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let w = input(inputs, 1)?;
    let g = ConvGeom::new(ctx, &x.shape, &w.shape)?;
    let xv = borrow_f32(x);
    let wv = borrow_f32(w);
    let bias = match opt_input(inputs, 2) {
        Some(b) if b.len() == g.m => Some(borrow_f32(b)),
        Some(b) => {
            return Err(OpError::shape(
                format!("bias of {} elements", g.m),
                &b.shape,
            ))
        }
        None => None,
    };
    let y = conv_f32_act(&g, &xv, &wv, bias.as_deref(), relu);
    let mut shape = vec![g.n, g.m];
    shape.extend_from_slice(&g.out_sp);
    let t = make(DType::F32, shape, Data::F32(y))?;
    Ok(vec![if x.dtype == DType::F32 {
        t
    } else {
        t.cast(x.dtype)
    }])
}

/// The tensor's values as f32: borrowed when it already is f32 (activations can be tens of
/// megabytes; copying them costs as much as a ReLU pass), converted otherwise.
pub(crate) fn borrow_f32(t: &Tensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_f32() {
        Some(v) => std::borrow::Cow::Borrowed(v),
        None => std::borrow::Cow::Owned(t.to_f32_vec()),
    }
}

/// f32 convolution of a whole batch (layout NCHW…, weights M × C/g × k…).
pub fn conv_f32(g: &ConvGeom, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    conv_f32_act(g, x, w, bias, false)
}

/// [`conv_f32`] with an optional fused ReLU, applied per image right after its GEMM.
pub fn conv_f32_act(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    relu: bool,
) -> Vec<f32> {
    let p = g.out_len();
    let in_len: usize = g.c * g.in_sp.iter().product::<usize>();
    let rows = g.col_rows();
    let mg = g.m / g.group;
    let mut y = vec![0f32; g.n * g.m * p];
    if y.is_empty() {
        return y;
    }
    // Parallelise over images when there are enough of them, inside GEMM otherwise.
    let par_batch = g.n >= rayon::current_num_threads().max(2);
    // The im2col buffer is reused by every image a worker runs (one allocation per worker,
    // not one page-faulting allocation per image).
    let new_col = || {
        if g.is_pointwise() {
            Vec::new()
        } else {
            vec![0f32; rows * p]
        }
    };
    let run = |col: &mut Vec<f32>, (ni, yn): (usize, &mut [f32])| {
        let xn = &x[ni * in_len..(ni + 1) * in_len];
        for gi in 0..g.group {
            let c0 = gi * (g.c / g.group);
            let colref: &[f32] = if g.is_pointwise() {
                &xn[c0 * p..(c0 + g.c / g.group) * p]
            } else {
                g.im2col(xn, c0, col, 0.0);
                col
            };
            let wg = &w[gi * mg * rows..(gi + 1) * mg * rows];
            let yg = &mut yn[gi * mg * p..(gi + 1) * mg * p];
            sgemm(
                mg,
                p,
                rows,
                MatRef {
                    data: wg,
                    rs: rows,
                    cs: 1,
                },
                MatRef {
                    data: colref,
                    rs: p,
                    cs: 1,
                },
                yg,
                false,
                !par_batch,
            );
            // Bias and ReLU in one pass over the group's output while it is still in cache
            // (filling the bias first and letting GEMM accumulate onto it, then clamping,
            // cost two more passes over the whole activation).
            for (mi, row) in yg.chunks_mut(p).enumerate() {
                let b = bias.map_or(0.0, |b| b[gi * mg + mi]);
                match (bias.is_some(), relu) {
                    (true, true) => row.iter_mut().for_each(|v| *v = (*v + b).max(0.0)),
                    (true, false) => row.iter_mut().for_each(|v| *v += b),
                    (false, true) => row.iter_mut().for_each(|v| *v = v.max(0.0)),
                    (false, false) => {}
                }
            }
        }
    };
    if par_batch {
        y.par_chunks_mut(g.m * p)
            .enumerate()
            .for_each_init(new_col, run);
    } else {
        let mut col = new_col();
        y.chunks_mut(g.m * p)
            .enumerate()
            .for_each(|item| run(&mut col, item));
    }
    y
}

/// Images per partial weight/bias gradient in [`backward`]. Fixed (not derived from the
/// thread count) so the summation order, hence the result, is the same on any number of
/// threads.
pub const GRAD_CHUNK: usize = 4;

/// Gradient of `Conv`, per image `n` and group `g` (`col` = im2col of the input):
/// `∂W[g] += G[n,g] · colᵀ`, `∂x[n] = col2im(W[g]ᵀ · G[n,g])`, `∂B = Σ G`.
///
/// The input gradient runs image by image in parallel, each writing its own slice of `∂x`
/// (a 1×1 stride-1 convolution writes the GEMM's result there directly, no col2im). The
/// weight and bias gradients are summed over fixed chunks of [`GRAD_CHUNK`] images, whose
/// partial sums are added in chunk order, so the result does not depend on the thread
/// count or on scheduling (test `conv_gradients_do_not_depend_on_thread_count`).
pub fn backward(
    ctx: &OpCtx,
    gi: &super::grad::GradIn,
) -> Result<Vec<Option<Tensor>>, OpError> {
    use super::grad::{f32s, tensor};
    let x = input(gi.inputs, 0)?;
    let w = input(gi.inputs, 1)?;
    let g = ConvGeom::new(ctx, &x.shape, &w.shape)?;
    let (xv, wv) = (f32s(gi.inputs, 0)?, f32s(gi.inputs, 1)?);
    let (need_x, need_w) = (gi.need(0), gi.need(1));
    let need_b = gi.need(2) && opt_input(gi.inputs, 2).is_some();
    let p = g.out_len();
    let in_len: usize = g.c * g.in_sp.iter().product::<usize>();
    let rows = g.col_rows();
    let mg = g.m / g.group;
    let cg = g.c / g.group;
    let gy = gi.grad;
    if gy.len() != g.n * g.m * p {
        return Err(OpError::shape(
            format!("output gradient of {} elements", g.n * g.m * p),
            gy.len(),
        ));
    }
    let pointwise = g.is_pointwise();
    // One image: split the GEMMs over threads instead.
    let par_inner = g.n < 2;
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if need_x && in_len > 0 {
        let mut dx = vec![0f32; x.len()];
        let new_col = || vec![0f32; if pointwise { 0 } else { rows * p }];
        let run = |dcol: &mut Vec<f32>, (dxn, gyn): (&mut [f32], &[f32])| {
            for gr in 0..g.group {
                let wg = MatRef {
                    data: &wv[gr * mg * rows..(gr + 1) * mg * rows],
                    rs: 1,
                    cs: rows,
                };
                let gyg = MatRef {
                    data: &gyn[gr * mg * p..(gr + 1) * mg * p],
                    rs: p,
                    cs: 1,
                };
                if pointwise {
                    // im2col is the identity: Wᵀ·G is the input gradient itself.
                    let dxg = &mut dxn[gr * cg * p..(gr + 1) * cg * p];
                    sgemm(rows, p, mg, wg, gyg, dxg, false, par_inner);
                } else {
                    sgemm(rows, p, mg, wg, gyg, dcol, false, par_inner);
                    g.col2im_add(dcol, gr * cg, dxn);
                }
            }
        };
        if par_inner {
            let mut dcol = new_col();
            dx.chunks_mut(in_len)
                .zip(gy.chunks(g.m * p.max(1)))
                .for_each(|item| run(&mut dcol, item));
        } else {
            dx.par_chunks_mut(in_len)
                .zip(gy.par_chunks(g.m * p.max(1)))
                .for_each_init(new_col, run);
        }
        out[0] = Some(tensor(&x.shape, dx)?);
    }
    if (need_w || need_b) && g.n > 0 && p > 0 {
        let chunk = |ci: usize| -> (Vec<f32>, Vec<f64>) {
            let (i0, i1) = (ci * GRAD_CHUNK, ((ci + 1) * GRAD_CHUNK).min(g.n));
            let mut dw = vec![0f32; if need_w { w.len() } else { 0 }];
            let mut db = vec![0f64; if need_b { g.m } else { 0 }];
            let mut col = vec![0f32; if need_w && !pointwise { rows * p } else { 0 }];
            for ni in i0..i1 {
                let gyn = &gy[ni * g.m * p..(ni + 1) * g.m * p];
                for (d, row) in db.iter_mut().zip(gyn.chunks_exact(p)) {
                    *d += sum8(row) as f64;
                }
                if !need_w {
                    continue;
                }
                let xn = &xv[ni * in_len..(ni + 1) * in_len];
                for gr in 0..g.group {
                    let c0 = gr * cg;
                    let colm: &[f32] = if pointwise {
                        &xn[c0 * p..(c0 + cg) * p]
                    } else {
                        g.im2col(xn, c0, &mut col, 0.0);
                        &col
                    };
                    sgemm(
                        mg,
                        rows,
                        p,
                        MatRef {
                            data: &gyn[gr * mg * p..(gr + 1) * mg * p],
                            rs: p,
                            cs: 1,
                        },
                        MatRef {
                            data: colm,
                            rs: 1,
                            cs: p,
                        },
                        &mut dw[gr * mg * rows..(gr + 1) * mg * rows],
                        true,
                        par_inner,
                    );
                }
            }
            (dw, db)
        };
        let chunks = g.n.div_ceil(GRAD_CHUNK);
        let parts: Vec<(Vec<f32>, Vec<f64>)> = if par_inner {
            (0..chunks).map(chunk).collect()
        } else {
            (0..chunks).into_par_iter().map(chunk).collect()
        };
        let mut parts = parts.into_iter();
        let (mut dw, mut db) = parts.next().expect("at least one image");
        for (pw, pb) in parts {
            dw.iter_mut().zip(&pw).for_each(|(a, b)| *a += b);
            db.iter_mut().zip(&pb).for_each(|(a, b)| *a += b);
        }
        if need_w {
            out[1] = Some(tensor(&w.shape, dw)?);
        }
        if need_b {
            out[2] = Some(tensor(&[g.m], db.into_iter().map(|v| v as f32).collect())?);
        }
    } else {
        if need_w {
            out[1] = Some(tensor(&w.shape, vec![0f32; w.len()])?);
        }
        if need_b {
            out[2] = Some(tensor(&[g.m], vec![0f32; g.m])?);
        }
    }
    Ok(out)
}

/// Sum with eight independent partial sums, which the compiler keeps in one SIMD register
/// (a plain `iter().sum()` is a serial chain of scalar adds, since float addition is not
/// reassociated). The order is fixed, so the result is deterministic.
pub(crate) fn sum8(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += *v;
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for v in rest {
        s += *v;
    }
    s
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (x, w) = (inp.get(0)?, inp.get(1)?);
    let g = ConvGeom::new(ctx, &x.1, &w.1).ok()?;
    let mut s = vec![g.n, g.m];
    s.extend(g.out_sp);
    Some(vec![(x.0, s)])
}

/// `Conv` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("Conv", 1, eval)
        .backward(backward)
        .infer(infer)
        .facts(super::Facts {
            weight: Some(1),
            quant_inputs: super::QuantInputs::First,
            qlinear: Some(super::OpKind::QLinearConv),
            integer: Some(super::OpKind::ConvInteger),
            ..super::Facts::NONE
        });
