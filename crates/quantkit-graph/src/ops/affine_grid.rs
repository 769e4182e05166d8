//! `AffineGrid` (opset 20): the sampling grid of `GridSample` for a batch of affine
//! matrices `theta` (`[N, 2, 3]` for 2-D, `[N, 3, 4]` for 3-D) and an output `size`
//! (`[N, C, H, W]` or `[N, C, D, H, W]`, int64). The grid is `[N, H, W, 2]` (or
//! `[N, D, H, W, 3]`), each point `theta · (x, y[, z], 1)` for the normalized base
//! coordinates: with `align_corners` −1 and 1 are the centres of the end elements
//! (`−1 + 2i/(n−1)`, just −1 when n = 1), otherwise their outer edges (`−1 + (2i+1)/n`).
//! The output is capped at [`max_elements()`] elements.

use super::max_elements;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Normalized base coordinate of index `i` along an axis of `n` elements.
fn base(i: usize, n: usize, align: bool) -> f64 {
    if align {
        if n > 1 {
            -1.0 + 2.0 * i as f64 / (n - 1) as f64
        } else {
            -1.0
        }
    } else {
        -1.0 + (2 * i + 1) as f64 / n as f64
    }
}

/// Evaluates `AffineGrid`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let theta = input(inputs, 0)?;
    let size = input(inputs, 1)?;
    let align = ctx.node.attr_int("align_corners", 0)? != 0;
    if !theta.dtype.is_float() {
        return Err(OpError::DType {
            index: 0,
            expected: "float".into(),
            got: theta.dtype.to_string(),
        });
    }
    let sz = size.to_i64_vec();
    let nd = match sz.len() {
        4 => 2,
        5 => 3,
        _ => return Err(OpError::shape("size [N, C, H, W] or [N, C, D, H, W]", &sz)),
    };
    if sz.iter().any(|&v| v < 0) {
        return Err(OpError::Invalid(format!(
            "AffineGrid: negative size {sz:?}"
        )));
    }
    let n = sz[0] as usize;
    if theta.shape != [n, nd, nd + 1] {
        return Err(OpError::shape(
            format!("theta [{n}, {nd}, {}]", nd + 1),
            &theta.shape,
        ));
    }
    // Spatial sizes, outermost first (D, H, W or H, W).
    let sp: Vec<usize> = sz[2..].iter().map(|&v| v as usize).collect();
    let mut out_shape = vec![n];
    out_shape.extend_from_slice(&sp);
    out_shape.push(nd);
    let total = out_shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d).filter(|&t| t <= max_elements()))
        .ok_or_else(|| {
            OpError::Invalid(format!(
                "AffineGrid: output {out_shape:?} has more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
            ))
        })?;
    let th = theta.to_f64_vec();
    let points: usize = sp.iter().product();
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; nd];
    let mut homo = vec![1.0f64; nd + 1];
    for b in 0..n {
        let m = &th[b * nd * (nd + 1)..][..nd * (nd + 1)];
        for p in 0..points {
            let mut rem = p;
            for a in (0..nd).rev() {
                idx[a] = rem % sp[a];
                rem /= sp[a];
            }
            // Homogeneous point (x, y[, z], 1): x runs along the last axis.
            for k in 0..nd {
                homo[k] = base(idx[nd - 1 - k], sp[nd - 1 - k], align);
            }
            for row in 0..nd {
                let r = &m[row * (nd + 1)..][..nd + 1];
                out.push(r.iter().zip(&homo).map(|(a, b)| a * b).sum::<f64>());
            }
        }
    }
    Ok(vec![make(DType::F64, out_shape, Data::F64(out))?.cast(theta.dtype)])
}

/// Output type and shape when `size` is a constant: `[N, H, W, 2]` or `[N, D, H, W, 3]`.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, _) = inp.get(0)?;
    let sz = inp.konst(ctx, 1)?.to_i64_vec();
    if !(sz.len() == 4 || sz.len() == 5) || sz.iter().any(|&v| v < 0) {
        return None;
    }
    let mut s: Vec<usize> = std::iter::once(sz[0])
        .chain(sz[2..].iter().copied())
        .map(|v| v as usize)
        .collect();
    s.push(sz.len() - 2);
    Some(vec![(*dt, s)])
}

/// `AffineGrid` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("AffineGrid", 20, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn identity_grid_and_bad_inputs() {
        let n = Node::new("a", "AffineGrid", &["t", "s"], &["g"])
            .with_attr("align_corners", AttrValue::Int(1));
        let id = Tensor::from_f32(&[1, 2, 3], vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        let size = Tensor::from_i64(&[4], vec![1, 1, 2, 3]);
        let g = eval(&OpCtx { node: &n, opset: 20 }, &[Some(&id), Some(&size)]).unwrap();
        assert_eq!(g[0].shape, vec![1, 2, 3, 2]);
        let want = [-1.0, -1.0, 0.0, -1.0, 1.0, -1.0, -1.0, 1.0, 0.0, 1.0, 1.0, 1.0];
        assert_eq!(g[0].to_f32_vec(), want);
        let ctx = OpCtx { node: &n, opset: 20 };
        // theta for 3-D with a 2-D size, a negative size, a size past the cap.
        let t3 = Tensor::from_f32(&[1, 3, 4], vec![0.0; 12]);
        assert!(eval(&ctx, &[Some(&t3), Some(&size)]).is_err());
        let neg = Tensor::from_i64(&[4], vec![1, 1, -2, 3]);
        assert!(eval(&ctx, &[Some(&id), Some(&neg)]).is_err());
        let huge = Tensor::from_i64(&[4], vec![1, 1, 1 << 20, 1 << 20]);
        assert!(eval(&ctx, &[Some(&id), Some(&huge)]).is_err());
        let wrong_n = Tensor::from_i64(&[4], vec![2, 1, 2, 3]);
        assert!(eval(&ctx, &[Some(&id), Some(&wrong_n)]).is_err());
    }
}
