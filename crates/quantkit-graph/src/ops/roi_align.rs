//! `RoiAlign` (opsets 10 and 16): for each region of interest (`rois` `[R, 4]` as
//! `x1, y1, x2, y2` in input coordinates times `spatial_scale`, of image
//! `batch_indices[r]`), an `output_height × output_width` grid of bins, each the average
//! (`mode = avg`) or maximum (`max`) of bilinear samples on a regular
//! `sampling_ratio × sampling_ratio` grid in the bin (`ceil(bin size)` per axis when
//! `sampling_ratio = 0`). Opset 16's `coordinate_transformation_mode = half_pixel`
//! (its default) shifts the roi by −0.5 pixel; `output_half_pixel` (opset 10's only
//! behaviour) does not, and stretches rois smaller than a pixel to one pixel.
//!
//! As in ONNX Runtime and the ONNX reference, a sample more than one pixel outside the
//! image counts as 0, one within a pixel is clamped to the edge, and the `max` mode takes
//! the largest of the four weighted corner values `wᵢ·xᵢ` of each sample (not the
//! interpolated value). Rois must be finite, batch indices valid, and the output and the
//! sampling work bounded before anything is allocated.

use super::max_elements;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Most bilinear samples × channels one evaluation may take (a few seconds of work).
pub const MAX_SAMPLES: u64 = 1 << 32;

/// Evaluates `RoiAlign`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let rois = input(inputs, 1)?;
    let bidx = input(inputs, 2)?;
    let node = ctx.node;
    let default_ctm = if ctx.opset >= 16 { "half_pixel" } else { "output_half_pixel" };
    let half = match node
        .attr_string("coordinate_transformation_mode", default_ctm)?
        .as_str()
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(OpError::attr(
                "coordinate_transformation_mode",
                format!("unknown value {other}"),
            ))
        }
    };
    let max_mode = match node.attr_string("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(OpError::attr("mode", format!("unknown value {other}"))),
    };
    let oh = node.attr_int("output_height", 1)?;
    let ow = node.attr_int("output_width", 1)?;
    let sr = node.attr_int("sampling_ratio", 0)?;
    let scale = f64::from(node.attr_float("spatial_scale", 1.0)?);
    if oh < 1 || ow < 1 || sr < 0 || oh > max_elements() as i64 || ow > max_elements() as i64 {
        return Err(OpError::Invalid(format!(
            "RoiAlign: output_height {oh} and output_width {ow} must be positive, sampling_ratio {sr} non-negative"
        )));
    }
    if !scale.is_finite() {
        return Err(OpError::attr("spatial_scale", format!("not finite: {scale}")));
    }
    let (ph, pw) = (oh as usize, ow as usize);
    if x.rank() != 4 {
        return Err(OpError::shape("X [N, C, H, W]", &x.shape));
    }
    let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    if rois.rank() != 2 || rois.shape[1] != 4 {
        return Err(OpError::shape("rois [num_rois, 4]", &rois.shape));
    }
    let nr = rois.shape[0];
    if bidx.shape != [nr] {
        return Err(OpError::shape(format!("batch_indices [{nr}]"), &bidx.shape));
    }
    let bi = bidx.to_i64_vec();
    if let Some(b) = bi.iter().find(|&&b| b < 0 || b as usize >= n) {
        return Err(OpError::Invalid(format!(
            "RoiAlign: batch index {b} outside 0..{n}"
        )));
    }
    let rv = rois.to_f64_vec();
    if rv.iter().any(|v| !v.is_finite()) {
        return Err(OpError::Invalid("RoiAlign: rois must be finite".into()));
    }
    let out_shape = vec![nr, c, ph, pw];
    let total = out_shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d).filter(|&t| t <= max_elements()))
        .ok_or_else(|| {
            OpError::Invalid(format!(
                "RoiAlign: output {out_shape:?} has more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
            ))
        })?;
    let offset = if half { 0.5 } else { 0.0 };
    // Per roi: start, bin sizes and the sampling grid.
    let mut geo = Vec::with_capacity(nr);
    let mut work: u64 = 0;
    for r in 0..nr {
        let q = &rv[r * 4..][..4];
        let (x0, y0) = (q[0] * scale - offset, q[1] * scale - offset);
        let (mut rw, mut rh) = (q[2] * scale - offset - x0, q[3] * scale - offset - y0);
        if !half {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bh, bw) = (rh / ph as f64, rw / pw as f64);
        let grid = |bin: f64| -> f64 {
            if sr > 0 {
                sr as f64
            } else {
                bin.ceil().max(0.0)
            }
        };
        let (gh, gw) = (grid(bh), grid(bw));
        let samples = gh * gw * (ph * pw * c) as f64;
        if !(samples.is_finite() && samples + work as f64 <= MAX_SAMPLES as f64) {
            return Err(OpError::Invalid(format!(
                "RoiAlign: roi {r} ({q:?} at scale {scale}) needs more than {MAX_SAMPLES} samples"
            )));
        }
        work += samples as u64;
        geo.push((x0, y0, bh, bw, gh as usize, gw as usize));
    }
    let xv = x.to_f64_vec();
    let mut out = vec![0f64; total];
    // (offsets of the four corners, their weights) of every sample of one bin.
    let mut taps: Vec<([usize; 4], [f64; 4])> = Vec::new();
    for r in 0..nr {
        let (x0, y0, bh, bw, gh, gw) = geo[r];
        let count = (gh * gw).max(1) as f64;
        for py in 0..ph {
            for px in 0..pw {
                taps.clear();
                for iy in 0..gh {
                    let y = y0 + py as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                    for ix in 0..gw {
                        let xx = x0 + px as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                        taps.push(corner_taps(y, xx, h, w));
                    }
                }
                for ch in 0..c {
                    let plane = &xv[(bi[r] as usize * c + ch) * h * w..][..h * w];
                    let vals = taps.iter().map(|(o, wt)| {
                        (0..4).map(|k| if wt[k] == 0.0 && o[k] == usize::MAX { 0.0 } else { wt[k] * plane[o[k]] })
                    });
                    let v = if max_mode {
                        vals.map(|s| s.fold(f64::NEG_INFINITY, f64::max))
                            .reduce(f64::max)
                            .unwrap_or(0.0)
                    } else {
                        vals.map(|s| s.sum::<f64>()).sum::<f64>() / count
                    };
                    out[((r * c + ch) * ph + py) * pw + px] = v;
                }
            }
        }
    }
    Ok(vec![make(DType::F64, out_shape, Data::F64(out))?.cast(x.dtype)])
}

/// The four corners (flat offsets in an `h × w` plane) and bilinear weights of a sample
/// at `(y, x)`; a sample more than a pixel outside gives zero weights and no offsets
/// (`usize::MAX`).
fn corner_taps(y: f64, x: f64, h: usize, w: usize) -> ([usize; 4], [f64; 4]) {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 || h == 0 || w == 0 {
        return ([usize::MAX; 4], [0.0; 4]);
    }
    let (mut y, mut x) = (y.max(0.0), x.max(0.0));
    let (mut yl, mut xl) = (y as usize, x as usize);
    let (yh, xh);
    if yl >= h - 1 {
        yl = h - 1;
        yh = h - 1;
        y = yl as f64;
    } else {
        yh = yl + 1;
    }
    if xl >= w - 1 {
        xl = w - 1;
        xh = w - 1;
        x = xl as f64;
    } else {
        xh = xl + 1;
    }
    let (ly, lx) = (y - yl as f64, x - xl as f64);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    (
        [yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh],
        [hy * hx, hy * lx, ly * hx, ly * lx],
    )
}

/// Output type and shape: `[num_rois, C, output_height, output_width]`.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, xs) = inp.get(0)?;
    let (_, rs) = inp.get(1)?;
    let oh = ctx.node.attr_int("output_height", 1).ok()?;
    let ow = ctx.node.attr_int("output_width", 1).ok()?;
    if xs.len() != 4 || rs.len() != 2 || oh < 1 || ow < 1 {
        return None;
    }
    Some(vec![(*dt, vec![rs[0], xs[1], oh as usize, ow as usize])])
}

/// `RoiAlign` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("RoiAlign", 10, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn average_and_max_of_a_constant_image_and_bad_inputs() {
        let x = Tensor::from_f32(&[1, 1, 4, 4], vec![2.0; 16]);
        let rois = Tensor::from_f32(&[1, 4], vec![0.0, 0.0, 3.0, 3.0]);
        let b = Tensor::from_i64(&[1], vec![0]);
        let n = Node::new("r", "RoiAlign", &["x", "rois", "b"], &["y"])
            .with_attr("output_height", AttrValue::Int(2))
            .with_attr("output_width", AttrValue::Int(2));
        let ctx = OpCtx { node: &n, opset: 16 };
        let y = eval(&ctx, &[Some(&x), Some(&rois), Some(&b)]).unwrap();
        assert_eq!(y[0].shape, vec![1, 1, 2, 2]);
        for v in y[0].to_f32_vec() {
            assert!((v - 2.0).abs() < 1e-6, "{v}");
        }
        // Bad batch index, non-finite roi, huge output, absurd roi at sampling_ratio 0.
        let b9 = Tensor::from_i64(&[1], vec![9]);
        assert!(eval(&ctx, &[Some(&x), Some(&rois), Some(&b9)]).is_err());
        let inf = Tensor::from_f32(&[1, 4], vec![0.0, 0.0, f32::INFINITY, 3.0]);
        assert!(eval(&ctx, &[Some(&x), Some(&inf), Some(&b)]).is_err());
        let huge = Tensor::from_f32(&[1, 4], vec![0.0, 0.0, 1e30, 1e30]);
        assert!(eval(&ctx, &[Some(&x), Some(&huge), Some(&b)]).is_err());
        let big = Node::new("r", "RoiAlign", &["x", "rois", "b"], &["y"])
            .with_attr("output_height", AttrValue::Int(1 << 40));
        assert!(eval(&OpCtx { node: &big, opset: 16 }, &[Some(&x), Some(&rois), Some(&b)]).is_err());
        let bad = n.clone().with_attr("mode", AttrValue::String(b"median".to_vec()));
        assert!(eval(&OpCtx { node: &bad, opset: 16 }, &[Some(&x), Some(&rois), Some(&b)]).is_err());
        // Opset 10 has no half-pixel shift: a roi [0, 0, 0, 0] is stretched to one pixel.
        let one = Tensor::from_f32(&[1, 4], vec![0.0; 4]);
        let n1 = Node::new("r", "RoiAlign", &["x", "rois", "b"], &["y"])
            .with_attr("mode", AttrValue::String(b"max".to_vec()));
        let y = eval(&OpCtx { node: &n1, opset: 10 }, &[Some(&x), Some(&one), Some(&b)]).unwrap();
        assert_eq!(y[0].shape, vec![1, 1, 1, 1]);
    }
}
