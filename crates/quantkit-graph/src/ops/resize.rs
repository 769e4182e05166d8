//! `Resize` (opsets 11–19) in modes `nearest` and `linear` (N-linear, separable), with the
//! coordinate transformations half_pixel, pytorch_half_pixel, align_corners, asymmetric
//! and half_pixel_symmetric. `cubic`, `tf_crop_and_resize`, `antialias` and `axes` are
//! reported as unsupported.

use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, DType, Data, Tensor};

/// Evaluates `Resize`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let node = ctx.node;
    let mode = node.attr_string("mode", "nearest")?;
    let ctm = node.attr_string("coordinate_transformation_mode", "half_pixel")?;
    let nearest_mode = node.attr_string("nearest_mode", "round_prefer_floor")?;
    if node.attr_int("antialias", 0)? != 0 || node.attr("axes").is_some() {
        return Err(OpError::Unsupported("Resize with antialias or axes".into()));
    }
    let r = x.rank();
    // Inputs: X, roi (opset ≥ 11), scales, sizes.
    let scales_in = opt_input(inputs, 2).filter(|t| !t.is_empty());
    let sizes_in = opt_input(inputs, 3).filter(|t| !t.is_empty());
    let (out, scales): (Vec<usize>, Vec<f64>) = match (scales_in, sizes_in) {
        (_, Some(s)) => {
            let s = s.to_i64_vec();
            if s.len() != r {
                return Err(OpError::shape(format!("{r} sizes"), &s));
            }
            let o: Vec<usize> = s.iter().map(|&v| v.max(0) as usize).collect();
            let sc = (0..r).map(|i| o[i] as f64 / x.shape[i] as f64).collect();
            (o, sc)
        }
        (Some(s), None) => {
            let s = s.to_f64_vec();
            if s.len() != r {
                return Err(OpError::shape(format!("{r} scales"), &s));
            }
            (
                (0..r)
                    .map(|i| (x.shape[i] as f64 * s[i]).floor() as usize)
                    .collect(),
                s,
            )
        }
        (None, None) => return Err(OpError::Invalid("Resize needs scales or sizes".into())),
    };
    let coord = |o: usize, i: usize, ax: usize| -> Result<f64, OpError> {
        let (o, ins, outs, s) = (o as f64, x.shape[ax] as f64, out[ax] as f64, scales[ax]);
        Ok(match ctm.as_str() {
            "half_pixel" => (o + 0.5) / s - 0.5,
            "half_pixel_symmetric" => {
                let adj = outs / (s * ins);
                let c = ins / 2.0 * (1.0 - adj);
                c + (o + 0.5) / s - 0.5
            }
            "pytorch_half_pixel" => {
                if outs > 1.0 {
                    (o + 0.5) / s - 0.5
                } else {
                    0.0
                }
            }
            "align_corners" => {
                if outs > 1.0 {
                    o * (ins - 1.0) / (outs - 1.0)
                } else {
                    0.0
                }
            }
            "asymmetric" => o / s,
            other => {
                return Err(OpError::Unsupported(format!(
                    "coordinate_transformation_mode {other} ({i})"
                )))
            }
        })
    };
    // Per axis: list of (input index, weight) taps for every output index.
    let mut taps: Vec<Vec<Vec<(usize, f64)>>> = Vec::with_capacity(r);
    for ax in 0..r {
        let ins = x.shape[ax];
        let mut axis_taps = Vec::with_capacity(out[ax]);
        for o in 0..out[ax] {
            let c = coord(o, 0, ax)?;
            let t = match mode.as_str() {
                "nearest" => {
                    let i = match nearest_mode.as_str() {
                        "round_prefer_floor" => {
                            if c.fract() == 0.5 {
                                c.floor()
                            } else {
                                c.round()
                            }
                        }
                        "round_prefer_ceil" => c.round(),
                        "floor" => c.floor(),
                        "ceil" => c.ceil(),
                        other => {
                            return Err(OpError::attr(
                                "nearest_mode",
                                format!("unknown value {other}"),
                            ))
                        }
                    };
                    vec![((i.max(0.0) as usize).min(ins - 1), 1.0)]
                }
                "linear" => {
                    let c = c.clamp(0.0, (ins - 1) as f64);
                    let i0 = c.floor() as usize;
                    let i1 = (i0 + 1).min(ins - 1);
                    let w = c - i0 as f64;
                    if i1 == i0 {
                        vec![(i0, 1.0)]
                    } else {
                        vec![(i0, 1.0 - w), (i1, w)]
                    }
                }
                other => return Err(OpError::Unsupported(format!("Resize mode {other}"))),
            };
            axis_taps.push(t);
        }
        taps.push(axis_taps);
    }
    // Separable: resize one axis at a time.
    let mut cur = x.to_f64_vec();
    let mut shape = x.shape.clone();
    for ax in 0..r {
        if out[ax] == shape[ax]
            && taps[ax]
                .iter()
                .enumerate()
                .all(|(o, t)| t.len() == 1 && t[0].0 == o)
        {
            continue;
        }
        let st = strides(&shape);
        let outer: usize = shape[..ax].iter().product();
        let inner = st[ax];
        let mut next = vec![0f64; outer * out[ax] * inner];
        for o in 0..outer {
            for (j, t) in taps[ax].iter().enumerate() {
                let dst = &mut next[(o * out[ax] + j) * inner..(o * out[ax] + j + 1) * inner];
                for &(i, w) in t {
                    let src = &cur[(o * shape[ax] + i) * inner..(o * shape[ax] + i + 1) * inner];
                    dst.iter_mut().zip(src).for_each(|(d, s)| *d += w * s);
                }
            }
        }
        shape[ax] = out[ax];
        cur = next;
    }
    let t = make(DType::F64, shape, Data::F64(cur))?;
    Ok(vec![if x.dtype.is_float() {
        t.cast(x.dtype)
    } else {
        round_cast(&t, x.dtype)
    }])
}

fn round_cast(t: &Tensor, to: DType) -> Tensor {
    let v: Vec<f64> = t.to_f64_vec().iter().map(|v| v.round_ties_even()).collect();
    Tensor {
        dtype: DType::F64,
        shape: t.shape.clone(),
        data: Data::F64(v),
    }
    .cast(to)
}

/// `Resize` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Resize", 10, eval);
