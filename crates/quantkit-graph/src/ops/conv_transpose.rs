//! `ConvTranspose` (N-D, groups, strides, dilations, pads / auto_pad, output_padding,
//! output_shape): a GEMM producing per-input-position contributions, then col2im.
//!
//! Output size per axis (ONNX spec): `s·(in−1) + output_padding + d·(k−1) + 1 − pb − pe`.
//! With `output_shape`, total padding is derived from it and split as the spec says
//! (SAME_UPPER puts the smaller half first).
//!
//! The gradient ([`backward`]) is the adjoint: im2col of `∂y` through the Conv geometry that
//! reads back what the forward scatters, then GEMMs for `∂x` and `∂W`.

use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use super::conv::{sum8, ConvGeom, GRAD_CHUNK};
use crate::ir::Node;
use crate::linalg::{sgemm, MatRef};
use rayon::prelude::*;
use crate::tensor::{DType, Data, Tensor};

/// `auto_pad` of ConvTranspose (an unknown value reads as `NOTSET`, as before).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeconvAutoPad {
    /// Explicit `pads` (default zeros).
    NotSet,
    /// No padding.
    Valid,
    /// Output `in·stride`, the smaller half of the total padding at the beginning.
    SameUpper,
    /// Output `in·stride`, the larger half at the beginning.
    SameLower,
}

/// The attributes of ConvTranspose for `nd` spatial axes, parsed once without input shapes
/// (the executor and the integer engine both resolve the pads through
/// [`ConvTransposeAttrs::resolve`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvTransposeAttrs {
    /// `group` (≥ 1).
    pub group: usize,
    /// `kernel_shape`, when given (negative values read as 0).
    pub kernel_shape: Option<Vec<usize>>,
    /// `strides` (positive), one per spatial axis.
    pub strides: Vec<usize>,
    /// `dilations` (positive), one per spatial axis.
    pub dilations: Vec<usize>,
    /// `output_padding`, one per spatial axis.
    pub output_padding: Vec<usize>,
    /// `auto_pad`.
    pub auto_pad: DeconvAutoPad,
    /// `pads` as given (`2·nd` values, begins then ends), when present.
    pub pads: Option<Vec<i64>>,
    /// The last `nd` values of `output_shape`, when present.
    pub output_shape: Option<Vec<usize>>,
}

impl ConvTransposeAttrs {
    /// Reads the attributes of `node` for `nd` spatial axes.
    pub fn parse(node: &Node, nd: usize) -> Result<ConvTransposeAttrs, OpError> {
        let group = match node.attr_int("group", 1)? {
            g if g >= 1 => g as usize,
            g => return Err(OpError::attr("group", format!("expected ≥ 1, got {g}"))),
        };
        let ints = |name: &str, d: usize| -> Result<Vec<usize>, OpError> {
            Ok(match node.attr_ints(name)? {
                Some(v) => v.iter().map(|&x| x.max(0) as usize).collect(),
                None => vec![d; nd],
            })
        };
        let strides = ints("strides", 1)?;
        let dilations = ints("dilations", 1)?;
        let output_padding = ints("output_padding", 0)?;
        if strides.len() != nd || dilations.len() != nd || output_padding.len() != nd {
            return Err(OpError::attr(
                "strides",
                "strides, dilations and output_padding need one value per spatial axis",
            ));
        }
        if strides.iter().chain(&dilations).any(|&v| v == 0) {
            return Err(OpError::attr(
                "strides",
                "strides and dilations must be positive",
            ));
        }
        let auto_pad = match node.attr_string("auto_pad", "NOTSET")?.as_str() {
            "SAME_UPPER" => DeconvAutoPad::SameUpper,
            "SAME_LOWER" => DeconvAutoPad::SameLower,
            "VALID" => DeconvAutoPad::Valid,
            _ => DeconvAutoPad::NotSet,
        };
        let output_shape = match node.attr_ints("output_shape")? {
            None => None,
            Some(os) if os.len() < nd => {
                return Err(OpError::attr(
                    "output_shape",
                    format!("expected {nd} spatial values, got {os:?}"),
                ))
            }
            Some(os) => Some(os[os.len() - nd..].iter().map(|&v| v as usize).collect()),
        };
        let pads = node.attr_ints("pads")?;
        if output_shape.is_none() && auto_pad == DeconvAutoPad::NotSet {
            if let Some(p) = &pads {
                if p.len() != 2 * nd {
                    return Err(OpError::attr("pads", format!("expected {} values", 2 * nd)));
                }
            }
        }
        let kernel_shape = node
            .attr_ints("kernel_shape")?
            .map(|k| k.iter().map(|&v| v.max(0) as usize).collect());
        Ok(ConvTransposeAttrs {
            group,
            kernel_shape,
            strides,
            dilations,
            output_padding,
            auto_pad,
            pads: pads.filter(|_| auto_pad == DeconvAutoPad::NotSet),
            output_shape,
        })
    }

    /// The unpadded output size per axis, `s·(in−1) + output_padding + d·(k−1) + 1`
    /// (checked: the attributes come from the file).
    pub fn full(&self, in_sp: &[usize], k: &[usize]) -> Result<Vec<usize>, OpError> {
        (0..in_sp.len())
            .map(|i| {
                self.strides[i]
                    .checked_mul(in_sp[i].saturating_sub(1))
                    .and_then(|v| v.checked_add(self.output_padding[i]))
                    .and_then(|v| v.checked_add(self.dilations[i].checked_mul(k[i].saturating_sub(1))?))
                    .and_then(|v| v.checked_add(1))
                    .filter(|&v| v <= i64::MAX as usize)
                    .ok_or_else(|| OpError::attr("strides", "output size overflows"))
            })
            .collect()
    }

    /// The begin pads and the output size per spatial axis for input size `in_sp` and
    /// kernel `k` (ONNX ConvTranspose): explicit pads, or with `output_shape` or
    /// `SAME_*` the total padding `full − out` split as the spec says (SAME_UPPER puts the
    /// smaller half first).
    pub fn resolve(&self, in_sp: &[usize], k: &[usize]) -> Result<(Vec<usize>, Vec<usize>), OpError> {
        let nd = in_sp.len();
        let full = self.full(in_sp, k)?;
        let split = |os: Vec<usize>| -> (Vec<usize>, Vec<usize>) {
            let pb = (0..nd)
                .map(|i| {
                    let total = full[i].saturating_sub(os[i]);
                    if self.auto_pad == DeconvAutoPad::SameUpper {
                        total / 2
                    } else {
                        total - total / 2
                    }
                })
                .collect();
            (pb, os)
        };
        if let Some(os) = &self.output_shape {
            return Ok(split(os.clone()));
        }
        if matches!(self.auto_pad, DeconvAutoPad::SameUpper | DeconvAutoPad::SameLower) {
            return Ok(split(
                (0..nd).map(|i| in_sp[i].saturating_mul(self.strides[i])).collect(),
            ));
        }
        let pads = self.pads.clone().unwrap_or_else(|| vec![0; 2 * nd]);
        let pb: Vec<usize> = pads[..nd].iter().map(|&p| p.max(0) as usize).collect();
        let os = (0..nd)
            .map(|i| {
                (full[i] as i64)
                    .checked_sub(pads[i])
                    .and_then(|v| v.checked_sub(pads[i + nd]))
                    .map(|v| v.max(0) as usize)
                    .ok_or_else(|| OpError::attr("pads", format!("{pads:?} overflow")))
            })
            .collect::<Result<_, _>>()?;
        Ok((pb, os))
    }
}

/// The geometry of one ConvTranspose, checked against its inputs' shapes (shared by
/// [`eval`] and [`backward`], so both read the attributes the same way).
struct Deconv {
    n: usize,
    c: usize,
    m: usize,
    group: usize,
    in_sp: Vec<usize>,
    k: Vec<usize>,
    out_sp: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pad_begin: Vec<usize>,
}

impl Deconv {
    fn new(node: &Node, x: &[usize], w: &[usize]) -> Result<Deconv, OpError> {
        if x.len() < 3 || w.len() != x.len() {
            return Err(OpError::shape(
                "input [N, C, D...] and weight [C, M/group, k...]",
                (x, w),
            ));
        }
        let nd = x.len() - 2;
        let a = ConvTransposeAttrs::parse(node, nd)?;
        let group = a.group;
        let (n, c) = (x[0], x[1]);
        if w[0] != c || c % group != 0 {
            return Err(OpError::shape(format!("weight with {c} input channels"), w));
        }
        let mg = w[1];
        let m = mg.checked_mul(group).ok_or_else(|| {
            OpError::attr("group", format!("{group} × {mg} output channels overflows"))
        })?;
        let k: Vec<usize> = w[2..].to_vec();
        let in_sp = x[2..].to_vec();
        if in_sp.iter().chain(&k).any(|&v| v == 0) {
            return Err(OpError::shape("non-empty spatial input and kernel", (x, w)));
        }
        let (pb, out_sp) = a.resolve(&in_sp, &k)?;
        let mut y_shape = vec![n, m];
        y_shape.extend_from_slice(&out_sp);
        super::alloc_len("ConvTranspose output", &y_shape)?;
        let mut col_shape = vec![mg];
        col_shape.extend_from_slice(&k);
        col_shape.extend_from_slice(&in_sp);
        super::alloc_len("ConvTranspose column buffer", &col_shape)?;
        if pb.iter().any(|&p| p > isize::MAX as usize) {
            return Err(OpError::attr("pads", format!("{pb:?} out of range")));
        }
        Ok(Deconv {
            n,
            c,
            m,
            group,
            in_sp,
            k,
            out_sp,
            strides: a.strides,
            dilations: a.dilations,
            pad_begin: pb,
        })
    }

    /// The Conv whose im2col reads back what this ConvTranspose scatters: input position
    /// `i`, tap `κ` lands on output `i·s + κ·d − pb`, which is exactly where a Conv over
    /// the output (same strides, dilations and begin pads, output positions = this
    /// operator's input positions) reads tap `κ` of position `i`. Its im2col of `∂y` is
    /// therefore the gradient of the column buffer (`rows × in_len`, taps that fell
    /// outside the output read 0).
    fn adjoint(&self) -> ConvGeom {
        ConvGeom {
            n: self.n,
            c: self.m,
            m: self.c,
            group: self.group,
            in_sp: self.out_sp.clone(),
            k: self.k.clone(),
            out_sp: self.in_sp.clone(),
            strides: self.strides.clone(),
            dilations: self.dilations.clone(),
            pad_begin: self.pad_begin.clone(),
            pad_end: vec![0; self.k.len()],
        }
    }
}

/// Evaluates `ConvTranspose`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let w = input(inputs, 1)?;
    let d = Deconv::new(ctx.node, &x.shape, &w.shape)?;
    let geom = d.adjoint();
    let (n, c, m, group) = (d.n, d.c, d.m, d.group);
    let (cg, mg) = (c / group, m / group);
    let in_len: usize = d.in_sp.iter().product();
    let out_len: usize = d.out_sp.iter().product();
    let rows = geom.col_rows();
    let bias = match opt_input(inputs, 2) {
        Some(b) if b.len() == m => Some(b.to_f32_vec()),
        Some(b) => return Err(OpError::shape(format!("bias of {m} elements"), &b.shape)),
        None => None,
    };
    let xv = super::conv::borrow_f32(x);
    let wv = super::conv::borrow_f32(w);
    let mut y = vec![0f32; n * m * out_len];
    // Images in parallel when there are enough of them, inside the GEMM otherwise; each
    // output element receives its contributions in the same order either way.
    let par_batch = n >= rayon::current_num_threads().max(2);
    let run = |col: &mut Vec<f32>, (ni, yn): (usize, &mut [f32])| {
        for gi in 0..group {
            // col[(mg, k...), i] = Σ_c W[c, mg, k...] · X[c, i]
            let xg = &xv[(ni * c + gi * cg) * in_len..(ni * c + (gi + 1) * cg) * in_len];
            sgemm(
                rows,
                in_len,
                cg,
                MatRef {
                    data: &wv[gi * cg * rows..(gi + 1) * cg * rows],
                    rs: 1,
                    cs: rows,
                },
                MatRef {
                    data: xg,
                    rs: in_len,
                    cs: 1,
                },
                col,
                false,
                !par_batch,
            );
            // Input position i, tap κ lands on output i·s + κ·d − pb: the adjoint Conv's
            // im2col read run backwards (taps outside the output are dropped), row by row.
            geom.col2im_add(col, gi * mg, yn);
        }
    };
    if !y.is_empty() {
        let new_col = || vec![0f32; rows * in_len];
        if par_batch {
            y.par_chunks_mut(m * out_len)
                .enumerate()
                .for_each_init(new_col, run);
        } else {
            let mut col = new_col();
            y.chunks_mut(m * out_len)
                .enumerate()
                .for_each(|item| run(&mut col, item));
        }
    }
    if let Some(bv) = bias {
        for (i, chunk) in y.chunks_mut(out_len.max(1)).enumerate() {
            chunk.iter_mut().for_each(|v| *v += bv[i % m]);
        }
    }
    let out_sp = d.out_sp;
    let mut shape = vec![n, m];
    shape.extend_from_slice(&out_sp);
    let t = make(DType::F32, shape, Data::F32(y))?;
    Ok(vec![if x.dtype == DType::F32 {
        t
    } else {
        t.cast(x.dtype)
    }])
}

/// Gradient of `ConvTranspose`. Per image `n` and group `g`, with `dcol = im2col(∂y[n])`
/// through the adjoint Conv geometry (the gradient of the forward's column buffer, see
/// `Deconv::adjoint`): `∂x[n, g] = W[g] · dcol` (`C/g × in_len`), `∂W[g] += x[n, g] · dcolᵀ`
/// (`C/g × (M/g·∏k)`), `∂B = Σ ∂y` over images and positions.
///
/// As Conv's: the input gradient runs image by image in parallel, each into its own slice;
/// the weight and bias gradients are summed over fixed chunks of [`GRAD_CHUNK`] images
/// added in chunk order, so the result does not depend on the thread count.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    use super::grad::{f32s, tensor};
    let x = input(gi.inputs, 0)?;
    let w = input(gi.inputs, 1)?;
    let d = Deconv::new(ctx.node, &x.shape, &w.shape)?;
    let geom = d.adjoint();
    let (xv, wv) = (f32s(gi.inputs, 0)?, f32s(gi.inputs, 1)?);
    let (need_x, need_w) = (gi.need(0), gi.need(1));
    let need_b = gi.need(2) && opt_input(gi.inputs, 2).is_some();
    let in_len: usize = d.in_sp.iter().product();
    let out_len: usize = d.out_sp.iter().product();
    let (cg, mg) = (d.c / d.group, d.m / d.group);
    let rows = geom.col_rows();
    let gy = gi.grad;
    if gy.len() != d.n * d.m * out_len {
        return Err(OpError::shape(
            format!("output gradient of {} elements", d.n * d.m * out_len),
            gy.len(),
        ));
    }
    if let Some(b) = opt_input(gi.inputs, 2) {
        if b.len() != d.m {
            return Err(OpError::shape(format!("bias of {} elements", d.m), &b.shape));
        }
    }
    // 1×1 kernel, stride 1, no padding: the column buffer is ∂y itself.
    let pointwise = geom.is_pointwise();
    let par_inner = d.n < 2;
    let new_col = || vec![0f32; if pointwise { 0 } else { rows * in_len }];
    // The gradient of group `gr`'s column buffer for image `gyn` (`rows × in_len`).
    let dcol = |gyn: &'_ [f32], gr: usize, col: &mut Vec<f32>| -> std::ops::Range<usize> {
        if pointwise {
            gr * mg * in_len..(gr + 1) * mg * in_len
        } else {
            geom.im2col(gyn, gr * mg, col, 0.0);
            0..rows * in_len
        }
    };
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    let img_x = d.c * in_len;
    let img_y = d.m * out_len;
    if need_x && img_x > 0 {
        let mut dx = vec![0f32; x.len()];
        let run = |col: &mut Vec<f32>, (dxn, gyn): (&mut [f32], &[f32])| {
            for gr in 0..d.group {
                let r = dcol(gyn, gr, col);
                let src: &[f32] = if pointwise { &gyn[r] } else { &col[r] };
                sgemm(
                    cg,
                    in_len,
                    rows,
                    MatRef {
                        data: &wv[gr * cg * rows..(gr + 1) * cg * rows],
                        rs: rows,
                        cs: 1,
                    },
                    MatRef {
                        data: src,
                        rs: in_len,
                        cs: 1,
                    },
                    &mut dxn[gr * cg * in_len..(gr + 1) * cg * in_len],
                    false,
                    par_inner,
                );
            }
        };
        if par_inner {
            let mut col = new_col();
            dx.chunks_mut(img_x)
                .zip(gy.chunks(img_y.max(1)))
                .for_each(|item| run(&mut col, item));
        } else {
            dx.par_chunks_mut(img_x)
                .zip(gy.par_chunks(img_y.max(1)))
                .for_each_init(new_col, run);
        }
        out[0] = Some(tensor(&x.shape, dx)?);
    }
    if (need_w || need_b) && d.n > 0 && out_len > 0 {
        let chunk = |ci: usize| -> (Vec<f32>, Vec<f64>) {
            let (i0, i1) = (ci * GRAD_CHUNK, ((ci + 1) * GRAD_CHUNK).min(d.n));
            let mut dw = vec![0f32; if need_w { w.len() } else { 0 }];
            let mut db = vec![0f64; if need_b { d.m } else { 0 }];
            let mut col = if need_w { new_col() } else { Vec::new() };
            for ni in i0..i1 {
                let gyn = &gy[ni * img_y..(ni + 1) * img_y];
                for (s, row) in db.iter_mut().zip(gyn.chunks_exact(out_len)) {
                    *s += sum8(row) as f64;
                }
                if !need_w || in_len == 0 {
                    continue;
                }
                let xn = &xv[ni * img_x..(ni + 1) * img_x];
                for gr in 0..d.group {
                    let r = dcol(gyn, gr, &mut col);
                    let src: &[f32] = if pointwise { &gyn[r] } else { &col[r] };
                    sgemm(
                        cg,
                        rows,
                        in_len,
                        MatRef {
                            data: &xn[gr * cg * in_len..(gr + 1) * cg * in_len],
                            rs: in_len,
                            cs: 1,
                        },
                        MatRef {
                            data: src,
                            rs: 1,
                            cs: in_len,
                        },
                        &mut dw[gr * cg * rows..(gr + 1) * cg * rows],
                        true,
                        par_inner,
                    );
                }
            }
            (dw, db)
        };
        let chunks = d.n.div_ceil(GRAD_CHUNK);
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
            out[2] = Some(tensor(&[d.m], db.into_iter().map(|v| v as f32).collect())?);
        }
    } else {
        if need_w {
            out[1] = Some(tensor(&w.shape, vec![0f32; w.len()])?);
        }
        if need_b {
            out[2] = Some(tensor(&[d.m], vec![0f32; d.m])?);
        }
    }
    Ok(out)
}

/// `ConvTranspose` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("ConvTranspose", 1, eval)
    .backward(backward)
    .facts(super::Facts {
    weight: Some(1),
    quant_inputs: super::QuantInputs::First,
    ..super::Facts::NONE
});
