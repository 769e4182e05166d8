//! `DeformConv` (opsets 19 and 22), 2-D: a grouped convolution whose every kernel tap
//! samples the input at its regular position plus a learned offset (`offset`
//! `[N, offset_group·kH·kW·2, oH, oW]`, (Δh, Δw) per tap), bilinearly with zeros outside
//! the image, scaled by the optional modulation `mask` `[N, offset_group·kH·kW, oH, oW]`
//! (DCNv2), plus the optional bias `B`. Input channels split into `offset_group` groups that
//! share offsets, and into `group` groups as in `Conv`. The output size is the offset's,
//! checked against the conv formula. Other spatial ranks are reported unsupported.
//!
//! Evaluated as im2col: the sampled columns `[C·kH·kW, oH·oW]` of one image (checked
//! against [`max_elements()`] first), then one product per group.

use super::max_elements;
use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// A 2-value list attribute (non-negative when `min` is 0, positive when 1), or `default`.
fn pair(ctx: &OpCtx, name: &str, len: usize, min: i64, default: i64) -> Result<Vec<usize>, OpError> {
    let v = ctx.node.attr_ints(name)?.unwrap_or(vec![default; len]);
    if v.len() != len || v.iter().any(|&x| x < min || x > max_elements() as i64) {
        return Err(OpError::attr(
            name,
            format!("expected {len} values in {min}..={max_elements}, got {v:?}", max_elements = max_elements()),
        ));
    }
    Ok(v.iter().map(|&x| x as usize).collect())
}

/// Bilinear sample of an `h × w` plane at `(y, x)`, zero outside.
fn sample(plane: &[f64], h: usize, w: usize, y: f64, x: f64) -> f64 {
    if !(y > -1.0 && y < h as f64 && x > -1.0 && x < w as f64) {
        return 0.0;
    }
    let (y0, x0) = (y.floor(), x.floor());
    let (ly, lx) = (y - y0, x - x0);
    let (y0, x0) = (y0 as i64, x0 as i64);
    let at = |yy: i64, xx: i64| {
        if yy >= 0 && xx >= 0 && (yy as usize) < h && (xx as usize) < w {
            plane[yy as usize * w + xx as usize]
        } else {
            0.0
        }
    };
    (1.0 - ly) * ((1.0 - lx) * at(y0, x0) + lx * at(y0, x0 + 1))
        + ly * ((1.0 - lx) * at(y0 + 1, x0) + lx * at(y0 + 1, x0 + 1))
}

/// Evaluates `DeformConv`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let wt = input(inputs, 1)?;
    let off = input(inputs, 2)?;
    let bias = opt_input(inputs, 3).filter(|t| !t.is_empty());
    let mask = opt_input(inputs, 4).filter(|t| !t.is_empty());
    if x.rank() != 4 {
        return Err(OpError::Unsupported(format!(
            "DeformConv on a rank-{} input (only 2-D images)",
            x.rank()
        )));
    }
    let (n, c, ih, iw) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    if wt.rank() != 4 {
        return Err(OpError::shape("W [M, C/group, kH, kW]", &wt.shape));
    }
    let (m, cpg, kh, kw) = (wt.shape[0], wt.shape[1], wt.shape[2], wt.shape[3]);
    if let Some(ks) = ctx.node.attr_ints("kernel_shape")? {
        if ks != [kh as i64, kw as i64] {
            return Err(OpError::attr(
                "kernel_shape",
                format!("{ks:?} differs from W's [{kh}, {kw}]"),
            ));
        }
    }
    let group = ctx.node.attr_int("group", 1)?;
    let og = ctx.node.attr_int("offset_group", 1)?;
    if group < 1 || og < 1 {
        return Err(OpError::Invalid(format!(
            "DeformConv: group {group} and offset_group {og} must be positive"
        )));
    }
    let (group, og) = (group as usize, og as usize);
    if cpg == 0 || cpg.checked_mul(group) != Some(c) || m % group != 0 || c % og != 0 {
        return Err(OpError::shape(
            format!("C = {c} = group {group} × W's {cpg}, M divisible by group, C by offset_group {og}"),
            (&x.shape, &wt.shape),
        ));
    }
    let strides = pair(ctx, "strides", 2, 1, 1)?;
    let dil = pair(ctx, "dilations", 2, 1, 1)?;
    let pads = pair(ctx, "pads", 4, 0, 0)?;
    let k = kh * kw;
    if off.rank() != 4 || off.shape[0] != n || off.shape[1] != og * k * 2 {
        return Err(OpError::shape(
            format!("offset [{n}, {}, oH, oW]", og * k * 2),
            &off.shape,
        ));
    }
    let (oh, ow) = (off.shape[2], off.shape[3]);
    let expect = |i: usize, kk: usize, a: usize| -> Option<usize> {
        let eff = dil[a] * (kk.checked_sub(1)?) + 1;
        let padded = i + pads[a] + pads[a + 2];
        padded.checked_sub(eff).map(|d| d / strides[a] + 1)
    };
    if expect(ih, kh, 0) != Some(oh) || expect(iw, kw, 1) != Some(ow) {
        return Err(OpError::shape(
            "an offset whose spatial size is the convolution's output size",
            &off.shape,
        ));
    }
    if let Some(mk) = mask {
        if mk.shape != [n, og * k, oh, ow] {
            return Err(OpError::shape(format!("mask [{n}, {}, {oh}, {ow}]", og * k), &mk.shape));
        }
    }
    if let Some(b) = bias {
        if b.shape != [m] {
            return Err(OpError::shape(format!("B [{m}]"), &b.shape));
        }
    }
    let p = oh * ow;
    let cap = |dims: &[usize]| {
        dims.iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d).filter(|&t| t <= max_elements()))
    };
    let (Some(total), Some(_)) = (cap(&[n, m, oh, ow]), cap(&[c, k, p])) else {
        return Err(OpError::Invalid(format!(
            "DeformConv: output [{n}, {m}, {oh}, {ow}] or columns [{c}·{k}, {p}] past {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
        )));
    };
    let xv = x.to_f64_vec();
    let wv = wt.to_f64_vec();
    let ov = off.to_f64_vec();
    let mv = mask.map(|t| t.to_f64_vec());
    let bv = bias.map(|t| t.to_f64_vec());
    let cpog = c / og;
    let mpg = m / group;
    let mut out = vec![0f64; total];
    let mut cols = vec![0f64; c * k * p];
    for b in 0..n {
        // Columns: cols[(ch·k + tap)·P + pos] = mask · X[b, ch] sampled at the tap.
        for ch in 0..c {
            let g = ch / cpog;
            let plane = &xv[(b * c + ch) * ih * iw..][..ih * iw];
            for a in 0..kh {
                for bb in 0..kw {
                    let tap = a * kw + bb;
                    let och = ((b * og + g) * k + tap) * 2;
                    let dst = &mut cols[(ch * k + tap) * p..][..p];
                    for i in 0..oh {
                        for j in 0..ow {
                            let pos = i * ow + j;
                            let y = (i * strides[0] + a * dil[0]) as f64 - pads[0] as f64
                                + ov[och * p + pos];
                            let xx = (j * strides[1] + bb * dil[1]) as f64 - pads[1] as f64
                                + ov[(och + 1) * p + pos];
                            let mod_ = mv
                                .as_ref()
                                .map_or(1.0, |mv| mv[((b * og + g) * k + tap) * p + pos]);
                            dst[pos] = mod_ * sample(plane, ih, iw, y, xx);
                        }
                    }
                }
            }
        }
        for oc in 0..m {
            let g = oc / mpg;
            let dst = &mut out[(b * m + oc) * p..][..p];
            dst.fill(bv.as_ref().map_or(0.0, |bv| bv[oc]));
            for ci in 0..cpg {
                let ch = g * cpg + ci;
                for tap in 0..k {
                    let wgt = wv[(oc * cpg + ci) * k + tap];
                    let src = &cols[(ch * k + tap) * p..][..p];
                    dst.iter_mut().zip(src).for_each(|(d, s)| *d += wgt * s);
                }
            }
        }
    }
    Ok(vec![make(DType::F64, vec![n, m, oh, ow], Data::F64(out))?.cast(x.dtype)])
}

/// Output type and shape: `[N, M, oH, oW]`, the spatial size being the offset's.
pub fn infer(_: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, xs) = inp.get(0)?;
    let (_, ws) = inp.get(1)?;
    let (_, os) = inp.get(2)?;
    if xs.len() != 4 || ws.len() != 4 || os.len() != 4 {
        return None;
    }
    Some(vec![(*dt, vec![xs[0], ws[0], os[2], os[3]])])
}

/// `DeformConv` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("DeformConv", 19, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn zero_offsets_are_a_convolution_and_half_offsets_interpolate() {
        let n = Node::new("d", "DeformConv", &["x", "w", "o"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 19 };
        let x = Tensor::from_f32(&[1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let w = Tensor::from_f32(&[1, 1, 1, 1], vec![2.0]);
        let zero = Tensor::from_f32(&[1, 2, 2, 2], vec![0.0; 8]);
        let y = eval(&ctx, &[Some(&x), Some(&w), Some(&zero)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 1, 2, 2], vec![2.0, 4.0, 6.0, 8.0]));
        // Δw = 0.5 everywhere: between columns, and half outside on the right.
        let half = Tensor::from_f32(&[1, 2, 2, 2], vec![0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5]);
        let y = eval(&ctx, &[Some(&x), Some(&w), Some(&half)]).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![3.0, 2.0, 7.0, 4.0]);
        // Offset of the wrong size, bad groups.
        let bad = Tensor::from_f32(&[1, 2, 3, 3], vec![0.0; 18]);
        assert!(eval(&ctx, &[Some(&x), Some(&w), Some(&bad)]).is_err());
        let g0 = n.clone().with_attr("group", AttrValue::Int(0));
        assert!(eval(&OpCtx { node: &g0, opset: 19 }, &[Some(&x), Some(&w), Some(&zero)]).is_err());
        let g2 = n.clone().with_attr("group", AttrValue::Int(2));
        assert!(eval(&OpCtx { node: &g2, opset: 19 }, &[Some(&x), Some(&w), Some(&zero)]).is_err());
        let x3 = Tensor::from_f32(&[1, 1, 2], vec![0.0; 2]);
        assert!(eval(&ctx, &[Some(&x3), Some(&w), Some(&zero)]).is_err());
    }
}
