//! `Resize` (opsets 10–19), separable along each resized axis.
//!
//! - Modes `nearest` (every `nearest_mode`), `linear` (N-linear) and `cubic`
//!   (`cubic_coeff_a`, `exclude_outside`), with `antialias` (opset 18) for linear and cubic:
//!   when downsampling, the kernel is stretched by `1/scale` and renormalized.
//! - Every `coordinate_transformation_mode`: half_pixel, half_pixel_symmetric,
//!   pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn (opsets 11–12) and
//!   tf_crop_and_resize (the `roi` input, `extrapolation_value` outside it).
//! - `axes` and `keep_aspect_ratio_policy` (opset 18).
//! - Opset 10 takes `(X, scales)` and means what `Upsample` means: asymmetric coordinates,
//!   and in nearest mode the floor of the source coordinate when upsampling and its ceiling
//!   when downsampling (as ONNX Runtime's opset-10 kernel does).
//!
//! The taps follow the ONNX reference evaluator (`onnx/reference/ops/op_resize.py`): the
//! source coordinate `x` of an output index, its ratio `x − floor(x)` (1 when `x` is an
//! integer), the mode's coefficients for that ratio, and the neighbours closest to `x`,
//! clamped to the edge. `align_corners` and `half_pixel_symmetric` use the real-valued output
//! length `scale · in` as the reference does (so `scales` that do not give a whole output
//! size downsample as the reference does).
//!
//! Scales must be finite and positive, sizes non-negative, and the output (and every
//! intermediate) at most [`max_elements()`] elements: anything else is an error before any
//! allocation.

use super::max_elements;
use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// How a nearest-mode source coordinate is rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nearest {
    /// Halves go down.
    RoundPreferFloor,
    /// Halves go up.
    RoundPreferCeil,
    /// Always down.
    Floor,
    /// Always up.
    Ceil,
    /// Resize-10 and Upsample: floor when upsampling, ceiling when downsampling.
    Simple,
}

/// Interpolation mode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Mode {
    /// Nearest neighbour.
    Nearest(Nearest),
    /// Linear (two taps, or `2/scale` with antialias).
    Linear,
    /// Cubic with coefficient `a` (four taps, or `4/scale` with antialias).
    Cubic(f64),
}

/// Coordinate transformation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ctm {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// Everything about a resize but the sizes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec {
    pub mode: Mode,
    pub ctm: Ctm,
    pub antialias: bool,
    pub exclude_outside: bool,
    pub extrapolation: f64,
}

/// The taps of one axis: for each output index, the input indices and weights
/// (`offs[o]..offs[o + 1]` in `taps`), or a constant (`fill`, tf_crop_and_resize outside
/// the roi).
struct AxisTaps {
    offs: Vec<usize>,
    taps: Vec<(usize, f64)>,
    fill: Vec<Option<f64>>,
}

/// Coefficients of the mode for a ratio in (0, 1] (see the module doc).
fn coeffs(spec: &Spec, ratio: f64, scale: f64) -> Vec<f64> {
    match spec.mode {
        Mode::Nearest(n) => {
            if ratio == 1.0 {
                return vec![0.0, 1.0];
            }
            let up = match n {
                Nearest::RoundPreferFloor => ratio > 0.5,
                Nearest::RoundPreferCeil => ratio >= 0.5,
                Nearest::Floor => false,
                Nearest::Ceil => true,
                Nearest::Simple => scale < 1.0,
            };
            if up {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        }
        Mode::Linear if spec.antialias => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() as i64 + 1;
            let n = 2 - 2 * start;
            let c: Vec<f64> = (start..start + n)
                .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                .collect();
            normalized(c)
        }
        Mode::Linear => vec![1.0 - ratio, ratio],
        Mode::Cubic(a) if spec.antialias => {
            let s = scale.min(1.0);
            let start = (-2.0 / s).floor() as i64 + 1;
            let end = 2 - start;
            let c: Vec<f64> = (start..end)
                .map(|i| cubic_kernel(s * (i as f64 - ratio), a))
                .collect();
            normalized(c)
        }
        Mode::Cubic(a) => {
            let (r, q) = (ratio, 1.0 - ratio);
            vec![
                ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                ((a * (q + 1.0) - 5.0 * a) * (q + 1.0) + 8.0 * a) * (q + 1.0) - 4.0 * a,
            ]
        }
    }
}

/// Keys' cubic convolution kernel with parameter `a`.
fn cubic_kernel(x: f64, a: f64) -> f64 {
    let x = x.abs();
    let (x2, x3) = (x * x, x * x * x);
    if x <= 1.0 {
        (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
    } else if x < 2.0 {
        a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
    } else {
        0.0
    }
}

fn normalized(mut c: Vec<f64>) -> Vec<f64> {
    let s: f64 = c.iter().sum();
    if s != 0.0 {
        c.iter_mut().for_each(|v| *v /= s);
    }
    c
}

/// Number of taps the mode uses at `scale` (antialias widens the kernel when
/// downsampling).
fn tap_count(spec: &Spec, scale: f64) -> f64 {
    let s = scale.min(1.0);
    match spec.mode {
        Mode::Nearest(_) => 2.0,
        Mode::Linear if spec.antialias => 2.0 - 2.0 * ((-1.0 / s).floor() + 1.0),
        Mode::Cubic(_) if spec.antialias => 2.0 - 2.0 * ((-2.0 / s).floor() + 1.0),
        Mode::Linear => 2.0,
        Mode::Cubic(_) => 4.0,
    }
}

/// Source coordinate of output index `o` along an axis of `w_in` inputs, `w_out` outputs
/// and scale `s`; `roi` is the axis's (start, end) for tf_crop_and_resize.
fn source(ctm: Ctm, o: usize, w_in: usize, w_out: usize, s: f64, roi: (f64, f64)) -> f64 {
    let (x, wi, ow) = (o as f64, w_in as f64, s * w_in as f64);
    match ctm {
        Ctm::HalfPixel => (x + 0.5) / s - 0.5,
        Ctm::HalfPixelSymmetric => {
            let adj = w_out as f64 / ow;
            wi / 2.0 * (1.0 - adj) + (x + 0.5) / s - 0.5
        }
        // The spec's rule (ONNX Runtime too): a single output samples input 0.
        Ctm::PytorchHalfPixel if w_out > 1 => (x + 0.5) / s - 0.5,
        Ctm::PytorchHalfPixel => 0.0,
        Ctm::AlignCorners if ow == 1.0 => 0.0,
        Ctm::AlignCorners => x * (wi - 1.0) / (ow - 1.0),
        Ctm::Asymmetric => x / s,
        Ctm::TfHalfPixelForNn => (x + 0.5) / s,
        Ctm::TfCropAndResize => {
            let span = (roi.1 - roi.0) * (wi - 1.0);
            let c = if ow == 1.0 {
                span / 2.0
            } else {
                x * span / (ow - 1.0)
            };
            c + roi.0 * (wi - 1.0)
        }
    }
}

/// The taps of one axis (see [`AxisTaps`]).
fn axis_taps(
    spec: &Spec,
    w_in: usize,
    w_out: usize,
    s: f64,
    roi: (f64, f64),
) -> Result<AxisTaps, OpError> {
    let n = tap_count(spec, s);
    // Downsampling by `s` needs about 4/s taps at most; `s ≥ 1/(2·in)` whenever the output
    // is non-empty, so this bounds the work by the input length.
    if !(n.is_finite() && n <= 8.0 * w_in as f64 + 16.0) {
        return Err(OpError::Invalid(format!(
            "Resize: scale {s} needs {n} taps per output on an axis of {w_in}"
        )));
    }
    let mut t = AxisTaps {
        offs: Vec::with_capacity(w_out + 1),
        taps: Vec::new(),
        fill: Vec::with_capacity(w_out),
    };
    t.offs.push(0);
    let last = w_in as i64 - 1;
    for o in 0..w_out {
        let x = source(spec.ctm, o, w_in, w_out, s, roi);
        if !x.is_finite() {
            return Err(OpError::Invalid(format!(
                "Resize: output index {o} maps to source coordinate {x}"
            )));
        }
        if spec.ctm == Ctm::TfCropAndResize && (x < 0.0 || x > last as f64) {
            t.fill.push(Some(spec.extrapolation));
            t.offs.push(t.taps.len());
            continue;
        }
        t.fill.push(None);
        // Far outside the input every tap clamps to an edge; keep the index in i64.
        let x = x.clamp(-1e15, 1e15);
        let fl = x.floor();
        let ratio = if x == fl { 1.0 } else { x - fl };
        let mut c = coeffs(spec, ratio, s);
        let n = c.len() as i64;
        // The n neighbours closest to x, ties to the smaller index (the reference's rule).
        let frac = x - fl;
        let p = fl as i64;
        let start = if n % 2 == 0 {
            p - n / 2 + i64::from(frac != 0.0)
        } else {
            p - (n - 1) / 2 + i64::from(frac > 0.5)
        };
        if spec.exclude_outside {
            for (k, v) in c.iter_mut().enumerate() {
                let i = start + k as i64;
                if i < 0 || i > last {
                    *v = 0.0;
                }
            }
            c = normalized(c);
        }
        let first = t.taps.len();
        for (k, &w) in c.iter().enumerate() {
            let i = (start + k as i64).clamp(0, last) as usize;
            let merge = t.taps.len() > first;
            match t.taps.last_mut() {
                Some(tap) if merge && tap.0 == i => tap.1 += w,
                _ => t.taps.push((i, w)),
            }
        }
        if matches!(spec.mode, Mode::Nearest(_)) {
            // A nearest output is one input value (0 · inf must not make it NaN).
            let keep = t.taps[first..]
                .iter()
                .copied()
                .find(|tap| tap.1 != 0.0)
                .unwrap_or((t.taps[first].0, 1.0));
            t.taps.truncate(first);
            t.taps.push((keep.0, 1.0));
        }
        t.offs.push(t.taps.len());
    }
    Ok(t)
}

/// Element count of `shape`, or an error past the `tensor_elements` limit naming the claim.
fn checked_count(shape: &[usize]) -> Result<usize, OpError> {
    super::alloc_len("Resize output", shape)
}

/// Resizes `x` to `out` (one size per axis) with per-axis `scales` and, for
/// tf_crop_and_resize, per-axis roi `(start, end)`.
pub(crate) fn resize(
    x: &Tensor,
    out: &[usize],
    scales: &[f64],
    roi: &[(f64, f64)],
    spec: &Spec,
) -> Result<Tensor, OpError> {
    let r = x.rank();
    checked_count(out)?;
    for ax in 0..r {
        if x.shape[ax] == 0 && out[ax] != 0 {
            return Err(OpError::shape(
                format!("a non-empty axis {ax} to resize to {}", out[ax]),
                &x.shape,
            ));
        }
    }
    let identity =
        |ax: usize| out[ax] == x.shape[ax] && scales[ax] == 1.0 && roi[ax] == (0.0, 1.0);
    // Shrinking axes first keeps every intermediate within the larger of input and output.
    let mut order: Vec<usize> = (0..r).filter(|&ax| !identity(ax)).collect();
    order.sort_by_key(|&ax| out[ax] > x.shape[ax]);
    let mut cur = x.to_f64_vec();
    let mut shape = x.shape.clone();
    for ax in order {
        let t = axis_taps(spec, shape[ax], out[ax], scales[ax], roi[ax])?;
        let outer: usize = shape[..ax].iter().product();
        let inner: usize = shape[ax + 1..].iter().product();
        let mut next_shape = shape.clone();
        next_shape[ax] = out[ax];
        let mut next = vec![0f64; checked_count(&next_shape)?];
        for o in 0..outer {
            for j in 0..out[ax] {
                let dst = &mut next[(o * out[ax] + j) * inner..][..inner];
                if let Some(v) = t.fill[j] {
                    dst.fill(v);
                    continue;
                }
                for &(i, w) in &t.taps[t.offs[j]..t.offs[j + 1]] {
                    let src = &cur[(o * shape[ax] + i) * inner..][..inner];
                    dst.iter_mut().zip(src).for_each(|(d, s)| *d += w * s);
                }
            }
        }
        shape = next_shape;
        cur = next;
    }
    let t = make(DType::F64, shape, Data::F64(cur))?;
    Ok(if x.dtype.is_float() {
        t.cast(x.dtype)
    } else {
        // Integer outputs round half to even and saturate (the reference's saturate_cast).
        let v: Vec<f64> = t.to_f64_vec().iter().map(|v| v.round_ties_even()).collect();
        make(DType::F64, t.shape.clone(), Data::F64(v))?.cast(x.dtype)
    })
}

/// Output sizes from `scales` (`floor(in · scale)`), each scale finite and positive.
pub(crate) fn sizes_from_scales(shape: &[usize], scales: &[f64]) -> Result<Vec<usize>, OpError> {
    shape
        .iter()
        .zip(scales)
        .map(|(&d, &s)| {
            if !(s.is_finite() && s > 0.0) {
                return Err(OpError::Invalid(format!(
                    "Resize: scales must be finite and positive, got {scales:?}"
                )));
            }
            let o = (d as f64 * s).floor();
            if o > max_elements() as f64 {
                return Err(OpError::Invalid(format!(
                    "Resize: scales {scales:?} on {shape:?} give more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
                )));
            }
            Ok(o as usize)
        })
        .collect()
}

fn parse_spec(ctx: &OpCtx) -> Result<Spec, OpError> {
    let node = ctx.node;
    let old = ctx.opset < 11;
    let nearest = match node.attr_string("nearest_mode", "round_prefer_floor")?.as_str() {
        _ if old => Nearest::Simple,
        "round_prefer_floor" => Nearest::RoundPreferFloor,
        "round_prefer_ceil" => Nearest::RoundPreferCeil,
        "floor" => Nearest::Floor,
        "ceil" => Nearest::Ceil,
        other => return Err(OpError::attr("nearest_mode", format!("unknown value {other}"))),
    };
    let mode = match node.attr_string("mode", "nearest")?.as_str() {
        "nearest" => Mode::Nearest(nearest),
        "linear" | "bilinear" => Mode::Linear,
        "cubic" if !old => Mode::Cubic(f64::from(node.attr_float("cubic_coeff_a", -0.75)?)),
        other => return Err(OpError::attr("mode", format!("unknown value {other}"))),
    };
    let ctm = match node
        .attr_string("coordinate_transformation_mode", "half_pixel")?
        .as_str()
    {
        _ if old => Ctm::Asymmetric,
        "half_pixel" => Ctm::HalfPixel,
        "half_pixel_symmetric" => Ctm::HalfPixelSymmetric,
        "pytorch_half_pixel" => Ctm::PytorchHalfPixel,
        "align_corners" => Ctm::AlignCorners,
        "asymmetric" => Ctm::Asymmetric,
        "tf_half_pixel_for_nn" => Ctm::TfHalfPixelForNn,
        "tf_crop_and_resize" => Ctm::TfCropAndResize,
        other => {
            return Err(OpError::attr(
                "coordinate_transformation_mode",
                format!("unknown value {other}"),
            ))
        }
    };
    let antialias = node.attr_int("antialias", 0)? != 0;
    if antialias && matches!(mode, Mode::Nearest(_)) {
        return Err(OpError::attr("antialias", "only linear and cubic modes antialias"));
    }
    Ok(Spec {
        mode,
        ctm,
        antialias,
        exclude_outside: node.attr_int("exclude_outside", 0)? != 0,
        extrapolation: f64::from(node.attr_float("extrapolation_value", 0.0)?),
    })
}

/// What [`target`] computes: the resized axes, the output shape and the per-axis scales.
type Target = (Vec<usize>, Vec<usize>, Vec<f64>);

/// The resized axes (in the order `axes` lists them, default all), the output shape and
/// the per-axis scales of `Resize` on an input of shape `shape`, from its `scales` or
/// `sizes` (empty tensors count as absent) and `keep_aspect_ratio_policy`.
fn target(
    ctx: &OpCtx,
    shape: &[usize],
    scales_in: Option<&Tensor>,
    sizes_in: Option<&Tensor>,
) -> Result<Target, OpError> {
    let r = shape.len();
    // The resized axes, in the order `axes` lists them (default: all).
    let axes: Vec<usize> = match ctx.node.attr_ints("axes")? {
        None => (0..r).collect(),
        Some(a) => {
            let mut seen = vec![false; r];
            let mut v = Vec::with_capacity(a.len());
            for &ax in &a {
                let ax = super::norm_axis(ax, r)?;
                if std::mem::replace(&mut seen[ax], true) {
                    return Err(OpError::attr("axes", format!("repeated axis in {a:?}")));
                }
                v.push(ax);
            }
            v
        }
    };
    let k = axes.len();
    let mut out = shape.to_vec();
    let mut scales = vec![1.0; r];
    match (scales_in, sizes_in) {
        (Some(_), Some(_)) => {
            return Err(OpError::Invalid(
                "Resize takes scales or sizes, not both".into(),
            ))
        }
        (None, None) => return Err(OpError::Invalid("Resize needs scales or sizes".into())),
        (Some(s), None) => {
            let s = s.to_f64_vec();
            if s.len() != k {
                return Err(OpError::shape(format!("{k} scales"), &s));
            }
            let sub: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
            let o = sizes_from_scales(&sub, &s)?;
            for (i, &a) in axes.iter().enumerate() {
                out[a] = o[i];
                scales[a] = s[i];
            }
        }
        (None, Some(s)) => {
            let s = s.to_i64_vec();
            if s.len() != k {
                return Err(OpError::shape(format!("{k} sizes"), &s));
            }
            if s.iter().any(|&v| v < 0 || v as u64 > max_elements() as u64) {
                return Err(OpError::Invalid(format!(
                    "Resize: sizes must be in 0..={max_elements}, got {s:?}", max_elements = max_elements()
                )));
            }
            let policy = ctx.node.attr_string("keep_aspect_ratio_policy", "stretch")?;
            let ratio = |i: usize| s[i] as f64 / shape[axes[i]] as f64;
            let common = match policy.as_str() {
                "stretch" => None,
                "not_larger" => (0..k).map(ratio).reduce(f64::min),
                "not_smaller" => (0..k).map(ratio).reduce(f64::max),
                other => {
                    return Err(OpError::attr(
                        "keep_aspect_ratio_policy",
                        format!("unknown value {other}"),
                    ))
                }
            };
            for (i, &a) in axes.iter().enumerate() {
                match common {
                    None => {
                        out[a] = s[i] as usize;
                        scales[a] = ratio(i);
                    }
                    Some(c) => {
                        let o = (c * shape[a] as f64 + 0.5).floor();
                        if !(o.is_finite() && o <= max_elements() as f64) {
                            return Err(OpError::Invalid(format!(
                                "Resize: sizes {s:?} with {policy} give {o} along axis {a}"
                            )));
                        }
                        out[a] = o as usize;
                        scales[a] = c;
                    }
                }
            }
        }
    }
    Ok((axes, out, scales))
}

/// Evaluates `Resize`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let (spec, out, scales, roi) = plan(ctx, inputs)?;
    Ok(vec![resize(x, &out, &scales, &roi, &spec)?])
}

/// Gradient of the data input. Every mode is linear in `x` for fixed sizes (an output is
/// `Σ w·x` over its taps, or the extrapolation value, which does not depend on `x`), so the
/// gradient is the transposed map: the axes are undone in the reverse of the forward's
/// order, each output's `g` spread back onto its taps with the same weights. Scales,
/// sizes and roi get none.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let mut res: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if !gi.need(0) {
        return Ok(res);
    }
    let x = input(gi.inputs, 0)?;
    let (spec, out, scales, roi) = plan(ctx, gi.inputs)?;
    let r = x.rank();
    let identity =
        |ax: usize| out[ax] == x.shape[ax] && scales[ax] == 1.0 && roi[ax] == (0.0, 1.0);
    let mut order: Vec<usize> = (0..r).filter(|&ax| !identity(ax)).collect();
    order.sort_by_key(|&ax| out[ax] > x.shape[ax]);
    // The shape in front of each forward step.
    let mut shapes = vec![x.shape.clone()];
    for &ax in &order {
        let mut s = shapes.last().expect("not empty").clone();
        s[ax] = out[ax];
        shapes.push(s);
    }
    let last: usize = shapes.last().expect("not empty").iter().product();
    if gi.grad.len() != last {
        return Err(OpError::shape(
            format!("a gradient of {last} elements"),
            gi.grad.len(),
        ));
    }
    let mut g: Vec<f64> = gi.grad.iter().map(|&v| v as f64).collect();
    for (k, &ax) in order.iter().enumerate().rev() {
        let shape = &shapes[k];
        let t = axis_taps(&spec, shape[ax], out[ax], scales[ax], roi[ax])?;
        let outer: usize = shape[..ax].iter().product();
        let inner: usize = shape[ax + 1..].iter().product();
        let mut prev = vec![0f64; checked_count(shape)?];
        for o in 0..outer {
            for j in 0..out[ax] {
                if t.fill[j].is_some() {
                    continue;
                }
                let src = &g[(o * out[ax] + j) * inner..][..inner];
                for &(i, w) in &t.taps[t.offs[j]..t.offs[j + 1]] {
                    let dst = &mut prev[(o * shape[ax] + i) * inner..][..inner];
                    dst.iter_mut().zip(src).for_each(|(d, s)| *d += w * s);
                }
            }
        }
        g = prev;
    }
    res[0] = Some(super::grad::tensor(
        &x.shape,
        g.into_iter().map(|v| v as f32).collect(),
    )?);
    Ok(res)
}

/// What `eval` and `backward` both need: the mode, the output sizes, the scales and the
/// roi per axis.
#[allow(clippy::type_complexity)]
fn plan(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
) -> Result<(Spec, Vec<usize>, Vec<f64>, Vec<(f64, f64)>), OpError> {
    let x = input(inputs, 0)?;
    let spec = parse_spec(ctx)?;
    let r = x.rank();
    let (roi_in, scales_in, sizes_in) = if ctx.opset < 11 {
        (None, opt_input(inputs, 1), None)
    } else {
        (opt_input(inputs, 1), opt_input(inputs, 2), opt_input(inputs, 3))
    };
    let scales_in = scales_in.filter(|t| !t.is_empty());
    let sizes_in = sizes_in.filter(|t| !t.is_empty());
    let (axes, out, scales) = target(ctx, &x.shape, scales_in, sizes_in)?;
    let k = axes.len();
    let mut roi = vec![(0.0, 1.0); r];
    if spec.ctm == Ctm::TfCropAndResize {
        let t = roi_in
            .filter(|t| !t.is_empty())
            .ok_or_else(|| OpError::Invalid("tf_crop_and_resize needs roi".into()))?;
        let v = t.to_f64_vec();
        if v.len() != 2 * k || v.iter().any(|x| !x.is_finite()) {
            return Err(OpError::shape(format!("{} finite roi values", 2 * k), &v));
        }
        for (i, &a) in axes.iter().enumerate() {
            roi[a] = (v[i], v[k + i]);
        }
    }
    Ok((spec, out, scales, roi))
}

/// Output type and shape when the scales or sizes are constants.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, shape) = inp.get(0)?;
    let (si, zi) = if ctx.opset < 11 { (1, usize::MAX) } else { (2, 3) };
    let absent = |i: usize| ctx.node.inputs.get(i).is_none_or(|n| n.is_empty());
    let scales = inp.konst(ctx, si);
    let sizes = inp.konst(ctx, zi);
    // An input that is present but not constant leaves the shape unknown.
    if (scales.is_none() && !absent(si)) || (sizes.is_none() && !absent(zi)) {
        return None;
    }
    let scales = scales.filter(|t| !t.is_empty());
    let sizes = sizes.filter(|t| !t.is_empty());
    let (_, out, _) = target(ctx, shape, scales, sizes).ok()?;
    Some(vec![(*dt, out)])
}

/// `Resize` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Resize", 10, eval)
    .backward(backward)
    .infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn run(n: &Node, opset: i64, ins: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        eval(&OpCtx { node: n, opset }, ins)
    }

    #[test]
    fn bad_scales_and_sizes_are_errors_before_allocating() {
        let x = Tensor::from_f32(&[1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let n = Node::new("r", "Resize", &["x", "roi", "scales"], &["y"]);
        let roi = Tensor::from_f32(&[0], vec![]);
        for bad in [f32::NAN, f32::INFINITY, -2.0, 0.0, 1e6] {
            let s = Tensor::from_f32(&[4], vec![1.0, 1.0, bad, bad]);
            let e = run(&n, 19, &[Some(&x), Some(&roi), Some(&s)]);
            assert!(e.is_err(), "scale {bad} accepted");
        }
        let none = Tensor::from_f32(&[0], vec![]);
        let n = Node::new("r", "Resize", &["x", "roi", "scales", "sizes"], &["y"]);
        for bad in [vec![1, 1, -1, 2], vec![1, 1, 1 << 20, 1 << 20], vec![1, 1, 2]] {
            let len = bad.len();
            let s = Tensor::from_i64(&[len], bad);
            let e = run(&n, 19, &[Some(&x), Some(&roi), Some(&none), Some(&s)]);
            assert!(e.is_err());
        }
        // Neither scales nor sizes, or both.
        assert!(run(&n, 19, &[Some(&x), Some(&roi), Some(&none), Some(&none)]).is_err());
        let s = Tensor::from_f32(&[4], vec![1.0, 1.0, 2.0, 2.0]);
        let z = Tensor::from_i64(&[4], vec![1, 1, 4, 4]);
        assert!(run(&n, 19, &[Some(&x), Some(&roi), Some(&s), Some(&z)]).is_err());
    }

    #[test]
    fn bad_attributes_are_errors() {
        let x = Tensor::from_f32(&[1, 4], vec![1.0, 2.0, 3.0, 4.0]);
        let roi = Tensor::from_f32(&[0], vec![]);
        let s = Tensor::from_f32(&[2], vec![1.0, 0.5]);
        let base = Node::new("r", "Resize", &["x", "roi", "scales"], &["y"]);
        for (name, v) in [
            ("mode", AttrValue::String(b"quintic".to_vec())),
            ("coordinate_transformation_mode", AttrValue::String(b"x".to_vec())),
            ("nearest_mode", AttrValue::String(b"x".to_vec())),
            ("axes", AttrValue::Ints(vec![1, 1])),
            ("axes", AttrValue::Ints(vec![2])),
            ("antialias", AttrValue::Int(1)),
        ] {
            let n = base.clone().with_attr(name, v);
            assert!(run(&n, 19, &[Some(&x), Some(&roi), Some(&s)]).is_err(), "{name}");
        }
        // tf_crop_and_resize without a roi.
        let n = base.clone().with_attr(
            "coordinate_transformation_mode",
            AttrValue::String(b"tf_crop_and_resize".to_vec()),
        );
        assert!(run(&n, 19, &[Some(&x), Some(&roi), Some(&s)]).is_err());
    }

    #[test]
    fn opset10_nearest_floors_up_and_ceils_down() {
        let x = Tensor::from_f32(&[1, 4], vec![1.0, 2.0, 3.0, 4.0]);
        let n = Node::new("r", "Resize", &["x", "scales"], &["y"]);
        let up = Tensor::from_f32(&[2], vec![1.0, 1.5]);
        let y = run(&n, 10, &[Some(&x), Some(&up)]).unwrap();
        // Sources 0, 0.67, 1.33, 2, 2.67, 3.33 floor to 0 0 1 2 2 3.
        assert_eq!(y[0].to_f32_vec(), vec![1.0, 1.0, 2.0, 3.0, 3.0, 4.0]);
        let down = Tensor::from_f32(&[2], vec![1.0, 0.6]);
        let y = run(&n, 10, &[Some(&x), Some(&down)]).unwrap();
        // Sources 0 and 1.67: the ceiling of 1.67 is 2.
        assert_eq!(y[0].to_f32_vec(), vec![1.0, 3.0]);
    }

    #[test]
    fn integer_inputs_round_and_saturate() {
        let x = Tensor::from_f32(&[1, 2], vec![0.0, 255.0]).cast(DType::U8);
        let n = Node::new("r", "Resize", &["x", "roi", "scales"], &["y"])
            .with_attr("mode", AttrValue::String(b"cubic".to_vec()));
        let roi = Tensor::from_f32(&[0], vec![]);
        let s = Tensor::from_f32(&[2], vec![1.0, 2.0]);
        let y = run(&n, 19, &[Some(&x), Some(&roi), Some(&s)]).unwrap();
        assert_eq!(y[0].dtype, DType::U8);
        // Cubic overshoots past 255 next to the edge: saturated, not wrapped.
        let v = y[0].to_i64_vec();
        assert!(v.iter().all(|&e| (0..=255).contains(&e)), "{v:?}");
        assert!(v.windows(2).all(|w| w[0] <= w[1]), "{v:?}");
    }
}
