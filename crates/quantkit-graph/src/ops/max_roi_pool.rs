//! `MaxRoiPool` (opset 1, Fast R-CNN's RoI pooling): for each roi (`rois` `[R, 5]`:
//! `batch_index, x1, y1, x2, y2`), the roi corners scaled by `spatial_scale` and rounded
//! (half away from zero) to pixels, split into `pooled_shape` `[ph, pw]` bins of
//! `floor(i·size/p) .. ceil((i+1)·size/p)` pixels (clipped to the image); each output is its
//! bin's maximum, 0 for an empty bin (the Caffe / ONNX Runtime kernel). Rois must be
//! finite with valid batch indices; the output is capped at [`max_elements()`].

use super::max_elements;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `MaxRoiPool`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let rois = input(inputs, 1)?;
    let pooled = ctx
        .node
        .attr_ints("pooled_shape")?
        .ok_or_else(|| OpError::attr("pooled_shape", "required"))?;
    let (ph, pw) = match pooled[..] {
        [a, b] if a > 0 && b > 0 && a <= max_elements() as i64 && b <= max_elements() as i64 => {
            (a as usize, b as usize)
        }
        _ => {
            return Err(OpError::attr(
                "pooled_shape",
                format!("expected two positive values, got {pooled:?}"),
            ))
        }
    };
    let scale = f64::from(ctx.node.attr_float("spatial_scale", 1.0)?);
    if !scale.is_finite() {
        return Err(OpError::attr("spatial_scale", format!("not finite: {scale}")));
    }
    if x.rank() != 4 {
        return Err(OpError::shape("X [N, C, H, W]", &x.shape));
    }
    let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    if rois.rank() != 2 || rois.shape[1] != 5 {
        return Err(OpError::shape("rois [num_rois, 5]", &rois.shape));
    }
    let nr = rois.shape[0];
    let out_shape = vec![nr, c, ph, pw];
    let total = out_shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d).filter(|&t| t <= max_elements()))
        .ok_or_else(|| {
            OpError::Invalid(format!(
                "MaxRoiPool: output {out_shape:?} has more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
            ))
        })?;
    let rv = rois.to_f64_vec();
    let xv = x.to_f64_vec();
    let mut out = vec![0f64; total];
    // A pixel coordinate far outside the image behaves as one just outside it.
    let lim = (h.max(w) as f64 + 1.0) * 2.0;
    for r in 0..nr {
        let q = &rv[r * 5..][..5];
        if q.iter().any(|v| !v.is_finite()) {
            return Err(OpError::Invalid(format!("MaxRoiPool: roi {r} is not finite: {q:?}")));
        }
        let b = q[0] as i64;
        if b < 0 || b as usize >= n {
            return Err(OpError::Invalid(format!(
                "MaxRoiPool: roi {r} has batch index {} outside 0..{n}",
                q[0]
            )));
        }
        let px = |v: f64| (v * scale).round().clamp(-lim, lim) as i64;
        let (sw, sh, ew, eh) = (px(q[1]), px(q[2]), px(q[3]), px(q[4]));
        let rh = (eh - sh + 1).max(1) as f64;
        let rw = (ew - sw + 1).max(1) as f64;
        let (bh, bw) = (rh / ph as f64, rw / pw as f64);
        let clip = |v: i64, hi: usize| v.clamp(0, hi as i64) as usize;
        for py in 0..ph {
            let hs = clip((py as f64 * bh).floor() as i64 + sh, h);
            let he = clip(((py + 1) as f64 * bh).ceil() as i64 + sh, h);
            for pxi in 0..pw {
                let ws = clip((pxi as f64 * bw).floor() as i64 + sw, w);
                let we = clip(((pxi + 1) as f64 * bw).ceil() as i64 + sw, w);
                for ch in 0..c {
                    let plane = &xv[(b as usize * c + ch) * h * w..][..h * w];
                    let v = if he <= hs || we <= ws {
                        0.0
                    } else {
                        (hs..he)
                            .flat_map(|yy| plane[yy * w + ws..yy * w + we].iter().copied())
                            .fold(f64::NEG_INFINITY, f64::max)
                    };
                    out[((r * c + ch) * ph + py) * pw + pxi] = v;
                }
            }
        }
    }
    Ok(vec![make(DType::F64, out_shape, Data::F64(out))?.cast(x.dtype)])
}

/// Output type and shape: `[num_rois, C, ph, pw]`.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, xs) = inp.get(0)?;
    let (_, rs) = inp.get(1)?;
    let p = ctx.node.attr_ints("pooled_shape").ok()??;
    match (xs.len(), rs.len(), &p[..]) {
        (4, 2, &[a, b]) if a > 0 && b > 0 => {
            Some(vec![(*dt, vec![rs[0], xs[1], a as usize, b as usize])])
        }
        _ => None,
    }
}

/// `MaxRoiPool` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("MaxRoiPool", 1, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn bins_take_maxima_and_bad_rois_fail() {
        // 4×4 image 0..16; the roi covers columns 0..=3, rows 0..=1, pooled 1×2.
        let x = Tensor::from_f32(&[1, 1, 4, 4], (0..16).map(|v| v as f32).collect());
        let n = Node::new("m", "MaxRoiPool", &["x", "r"], &["y"])
            .with_attr("pooled_shape", AttrValue::Ints(vec![1, 2]));
        let ctx = OpCtx { node: &n, opset: 1 };
        let r = Tensor::from_f32(&[1, 5], vec![0.0, 0.0, 0.0, 3.0, 1.0]);
        let y = eval(&ctx, &[Some(&x), Some(&r)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 1, 1, 2], vec![5.0, 7.0]));
        // A roi wholly outside the image gives empty bins: 0.
        let out = Tensor::from_f32(&[1, 5], vec![0.0, 10.0, 10.0, 12.0, 12.0]);
        let y = eval(&ctx, &[Some(&x), Some(&out)]).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![0.0, 0.0]);
        for bad in [
            vec![1.0, 0.0, 0.0, 1.0, 1.0],
            vec![0.0, f32::NAN, 0.0, 1.0, 1.0],
            vec![-1.0, 0.0, 0.0, 1.0, 1.0],
        ] {
            let r = Tensor::from_f32(&[1, 5], bad);
            assert!(eval(&ctx, &[Some(&x), Some(&r)]).is_err());
        }
        let nn = Node::new("m", "MaxRoiPool", &["x", "r"], &["y"]);
        assert!(eval(&OpCtx { node: &nn, opset: 1 }, &[Some(&x), Some(&r)]).is_err());
    }
}
