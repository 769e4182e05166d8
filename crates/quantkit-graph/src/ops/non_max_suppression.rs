//! `NonMaxSuppression` (opsets 10 and 11): per batch and class, greedily keeps the
//! highest-scoring boxes whose IoU with every box already kept is at most `iou_threshold`,
//! up to `max_output_boxes_per_class` (input 2, default 0 = none). Boxes scoring at most
//! `score_threshold` (input 4, when given) are never candidates. Equal scores go to the
//! lower box index. Boxes are `[y1, x1, y2, x2]` corners in either order
//! (`center_point_box = 0`) or `[x_center, y_center, width, height]` (1). A pair with an
//! empty intersection or a non-positive area is never suppressed. The output is
//! `[num_selected, 3]` int64 rows `(batch, class, box)`, in batch, class, then selection
//! order.

use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// `(x_min, y_min, x_max, y_max)` of a box.
fn corners(b: &[f64], center: bool) -> (f64, f64, f64, f64) {
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        (b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh)
    } else {
        (b[1].min(b[3]), b[0].min(b[2]), b[1].max(b[3]), b[0].max(b[2]))
    }
}

/// Whether `a` suppresses `b` (IoU strictly above the threshold).
fn suppresses(a: (f64, f64, f64, f64), b: (f64, f64, f64, f64), iou: f64) -> bool {
    let (ix0, iy0) = (a.0.max(b.0), a.1.max(b.1));
    let (ix1, iy1) = (a.2.min(b.2), a.3.min(b.3));
    if ix1 <= ix0 || iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    let area_a = (a.2 - a.0) * (a.3 - a.1);
    let area_b = (b.2 - b.0) * (b.3 - b.1);
    let union = area_a + area_b - inter;
    if inter <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > iou
}

/// The single value of optional scalar input `i`, if present and non-empty.
fn scalar(inputs: &[Option<&Tensor>], i: usize) -> Result<Option<f64>, OpError> {
    match opt_input(inputs, i).filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(t) if t.len() == 1 => Ok(Some(t.to_f64_vec()[0])),
        Some(t) => Err(OpError::shape(format!("a scalar at input {i}"), &t.shape)),
    }
}

/// Evaluates `NonMaxSuppression`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let boxes = input(inputs, 0)?;
    let scores = input(inputs, 1)?;
    let center = match ctx.node.attr_int("center_point_box", 0)? {
        0 => false,
        1 => true,
        v => return Err(OpError::attr("center_point_box", format!("expected 0 or 1, got {v}"))),
    };
    if boxes.rank() != 3 || boxes.shape[2] != 4 {
        return Err(OpError::shape("boxes [batches, boxes, 4]", &boxes.shape));
    }
    let (nb, nbox) = (boxes.shape[0], boxes.shape[1]);
    if scores.rank() != 3 || scores.shape[0] != nb || scores.shape[2] != nbox {
        return Err(OpError::shape(
            format!("scores [{nb}, classes, {nbox}]"),
            &scores.shape,
        ));
    }
    let nc = scores.shape[1];
    let max_out = match opt_input(inputs, 2).filter(|t| !t.is_empty()) {
        None => 0,
        Some(t) if t.len() == 1 => t.to_i64_vec()[0].max(0) as usize,
        Some(t) => return Err(OpError::shape("a scalar at input 2", &t.shape)),
    };
    let iou = scalar(inputs, 3)?.unwrap_or(0.0);
    let score_min = scalar(inputs, 4)?;
    if iou.is_nan() || score_min.is_some_and(f64::is_nan) {
        return Err(OpError::Invalid(
            "NonMaxSuppression: NaN iou_threshold or score_threshold".into(),
        ));
    }
    let bv = boxes.to_f64_vec();
    let sv = scores.to_f64_vec();
    let mut rows: Vec<i64> = Vec::new();
    let mut cand: Vec<usize> = Vec::with_capacity(nbox);
    let mut kept: Vec<(f64, f64, f64, f64)> = Vec::new();
    for b in 0..nb {
        let bx: Vec<_> = (0..nbox)
            .map(|i| corners(&bv[(b * nbox + i) * 4..][..4], center))
            .collect();
        for c in 0..nc {
            let s = &sv[(b * nc + c) * nbox..][..nbox];
            cand.clear();
            cand.extend((0..nbox).filter(|&i| score_min.is_none_or(|m| s[i] > m)));
            // Highest score first, ties to the lower index (NaN scores last).
            cand.sort_by(|&i, &j| {
                s[i].is_nan().cmp(&s[j].is_nan()).then(s[j].total_cmp(&s[i])).then(i.cmp(&j))
            });
            kept.clear();
            for &i in &cand {
                if kept.len() >= max_out {
                    break;
                }
                if kept.iter().all(|&k| !suppresses(k, bx[i], iou)) {
                    kept.push(bx[i]);
                    rows.extend([b as i64, c as i64, i as i64]);
                }
            }
        }
    }
    let n = rows.len() / 3;
    Ok(vec![make(DType::I64, vec![n, 3], Data::I64(rows))?])
}

/// `NonMaxSuppression` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("NonMaxSuppression", 10, eval);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn suppresses_overlaps_keeps_order_and_checks_shapes() {
        let n = Node::new("n", "NonMaxSuppression", &["b", "s", "m", "i", "t"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 11 };
        // Boxes 0 and 1 overlap with IoU 0.9; box 2 is apart; box 3 scores too low.
        let boxes = Tensor::from_f32(
            &[1, 4, 4],
            vec![
                0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.0, 5.0, 5.0, 6.0, 6.0, 9.0, 9.0, 10.0, 10.0,
            ],
        );
        let scores = Tensor::from_f32(&[1, 1, 4], vec![0.8, 0.9, 0.8, 0.1]);
        let max = Tensor::from_i64(&[1], vec![10]);
        let iou = Tensor::from_f32(&[1], vec![0.5]);
        let thr = Tensor::from_f32(&[1], vec![0.2]);
        let ins = [Some(&boxes), Some(&scores), Some(&max), Some(&iou), Some(&thr)];
        let y = eval(&ctx, &ins).unwrap();
        // Box 1 first (0.9), then the tie 0.8 goes to box 0, suppressed; then box 2.
        assert_eq!(y[0], Tensor::from_i64(&[2, 3], vec![0, 0, 1, 0, 0, 2]));
        // No max_output_boxes_per_class: nothing is selected.
        let y = eval(&ctx, &[Some(&boxes), Some(&scores)]).unwrap();
        assert_eq!(y[0].shape, vec![0, 3]);
        // Center format: box (0.5, 0.5, 1, 1) equals corners (0, 0, 1, 1).
        let nc = n.clone().with_attr("center_point_box", AttrValue::Int(1));
        let cb = Tensor::from_f32(&[1, 2, 4], vec![0.5, 0.5, 1.0, 1.0, 0.5, 0.5, 1.0, 1.0]);
        let cs = Tensor::from_f32(&[1, 1, 2], vec![0.5, 0.6]);
        let ctxc = OpCtx { node: &nc, opset: 11 };
        let y = eval(&ctxc, &[Some(&cb), Some(&cs), Some(&max), Some(&iou)]).unwrap();
        assert_eq!(y[0], Tensor::from_i64(&[1, 3], vec![0, 0, 1]));
        let bad = n.clone().with_attr("center_point_box", AttrValue::Int(2));
        assert!(eval(&OpCtx { node: &bad, opset: 11 }, &ins).is_err());
        let wrong = Tensor::from_f32(&[1, 1, 3], vec![0.0; 3]);
        assert!(eval(&ctx, &[Some(&boxes), Some(&wrong), Some(&max)]).is_err());
        let nan = Tensor::from_f32(&[1], vec![f32::NAN]);
        assert!(eval(&ctx, &[Some(&boxes), Some(&scores), Some(&max), Some(&nan)]).is_err());
    }
}
