//! `Col2Im` (opset 18): the inverse of im2col. Input `[N, C·∏block, L]` holds, for each of
//! the `L` sliding-block positions over the padded image, the block's `∏block` values per
//! channel; they are summed back into an `[N, C, image...]` output (overlapping blocks add
//! up, values that fall on padding are dropped). `image_shape` and `block_shape` are 1-D
//! int64 inputs; attributes `dilations`, `pads` (begins, then ends) and `strides`.
//! `L` must equal the number of block positions; the output is capped at [`max_elements()`].

use super::max_elements;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// A list attribute of non-negative (`min` 0) or positive (`min` 1) values, `n` long,
/// default `default`.
fn ints(ctx: &OpCtx, name: &str, n: usize, min: i64, default: usize) -> Result<Vec<usize>, OpError> {
    match ctx.node.attr_ints(name)? {
        None => Ok(vec![default; n]),
        Some(v) if v.len() == n && v.iter().all(|&x| x >= min && x <= max_elements() as i64) => {
            Ok(v.iter().map(|&x| x as usize).collect())
        }
        Some(v) => Err(OpError::attr(
            name,
            format!("expected {n} values in {min}..={max_elements}, got {v:?}", max_elements = max_elements()),
        )),
    }
}

/// Evaluates `Col2Im`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let image = input(inputs, 1)?.to_i64_vec();
    let block = input(inputs, 2)?.to_i64_vec();
    let k = image.len();
    if k == 0 || block.len() != k {
        return Err(OpError::shape(
            "image_shape and block_shape of one equal, non-zero length",
            (&image, &block),
        ));
    }
    let in_range = |v: &[i64], lo: i64| v.iter().all(|&d| d >= lo && d <= max_elements() as i64);
    if !in_range(&image, 1) || !in_range(&block, 1) {
        return Err(OpError::Invalid(format!(
            "Col2Im: image_shape {image:?} and block_shape {block:?} must be positive"
        )));
    }
    let image: Vec<usize> = image.iter().map(|&v| v as usize).collect();
    let block: Vec<usize> = block.iter().map(|&v| v as usize).collect();
    let dil = ints(ctx, "dilations", k, 1, 1)?;
    let strides = ints(ctx, "strides", k, 1, 1)?;
    let pads = ints(ctx, "pads", 2 * k, 0, 0)?;
    if x.rank() != 3 {
        return Err(OpError::shape("input [N, C·∏block, L]", &x.shape));
    }
    let kprod = block
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b).filter(|&t| t <= max_elements()))
        .ok_or_else(|| OpError::Invalid(format!("Col2Im: block {block:?} too large")))?;
    let (n, cb, l) = (x.shape[0], x.shape[1], x.shape[2]);
    if cb % kprod != 0 {
        return Err(OpError::shape(
            format!("dimension 1 a multiple of ∏block = {kprod}"),
            &x.shape,
        ));
    }
    let c = cb / kprod;
    // Block positions per axis: (image + pads − dilated block) / stride + 1.
    let mut cols = Vec::with_capacity(k);
    for i in 0..k {
        let eff = dil[i] * (block[i] - 1) + 1;
        let padded = image[i] + pads[i] + pads[k + i];
        if padded < eff {
            return Err(OpError::Invalid(format!(
                "Col2Im: block {block:?} (dilations {dil:?}) larger than the padded image along axis {i}"
            )));
        }
        cols.push((padded - eff) / strides[i] + 1);
    }
    let positions = cols.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
    if positions != Some(l) {
        return Err(OpError::shape(
            format!("L = {cols:?} block positions"),
            &x.shape,
        ));
    }
    let mut out_shape = vec![n, c];
    out_shape.extend_from_slice(&image);
    let total = out_shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d).filter(|&t| t <= max_elements()))
        .ok_or_else(|| {
            OpError::Invalid(format!(
                "Col2Im: output {out_shape:?} has more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
            ))
        })?;
    let plane: usize = image.iter().product();
    let xv = x.to_f64_vec();
    let mut out = vec![0f64; total];
    let (mut kidx, mut cidx) = (vec![0usize; k], vec![0usize; k]);
    for b in 0..n {
        for ch in 0..c {
            let dst = &mut out[(b * c + ch) * plane..][..plane];
            for kk in 0..kprod {
                let mut rem = kk;
                for a in (0..k).rev() {
                    kidx[a] = rem % block[a];
                    rem /= block[a];
                }
                let src = &xv[((b * c + ch) * kprod + kk) * l..][..l];
                for (pos, &v) in src.iter().enumerate() {
                    let mut rem = pos;
                    for a in (0..k).rev() {
                        cidx[a] = rem % cols[a];
                        rem /= cols[a];
                    }
                    let mut off = Some(0usize);
                    for a in 0..k {
                        let i = (cidx[a] * strides[a] + kidx[a] * dil[a]) as i64 - pads[a] as i64;
                        off = match off {
                            Some(o) if i >= 0 && (i as usize) < image[a] => {
                                Some(o * image[a] + i as usize)
                            }
                            _ => None,
                        };
                    }
                    if let Some(o) = off {
                        dst[o] += v;
                    }
                }
            }
        }
    }
    Ok(vec![make(DType::F64, out_shape, Data::F64(out))?.cast(x.dtype)])
}

/// Output type and shape when `image_shape` and `block_shape` are constants:
/// `[N, C, image...]`.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, xs) = inp.get(0)?;
    let image = inp.konst(ctx, 1)?.to_i64_vec();
    let block = inp.konst(ctx, 2)?.to_i64_vec();
    let k = block.iter().try_fold(1i64, |a, &b| a.checked_mul(b).filter(|_| b > 0))?;
    if xs.len() != 3
        || image.is_empty()
        || block.len() != image.len()
        || image.iter().any(|&v| v < 1)
        || !xs[1].is_multiple_of(k as usize)
    {
        return None;
    }
    let mut s = vec![xs[0], xs[1] / k as usize];
    s.extend(image.iter().map(|&v| v as usize));
    Some(vec![(*dt, s)])
}

/// `Col2Im` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Col2Im", 18, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn overlapping_blocks_add_up_and_bad_shapes_fail() {
        // 1-D image of 3, block 2, stride 1: positions 0 and 1 overlap on element 1.
        let n = Node::new("c", "Col2Im", &["x", "i", "b"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 18 };
        let x = Tensor::from_f32(&[1, 2, 2], vec![1.0, 2.0, 10.0, 20.0]);
        let img = Tensor::from_i64(&[1], vec![3]);
        let blk = Tensor::from_i64(&[1], vec![2]);
        let y = eval(&ctx, &[Some(&x), Some(&img), Some(&blk)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 1, 3], vec![1.0, 12.0, 20.0]));
        // L does not match, block larger than the image, non-positive sizes, huge pads.
        let x3 = Tensor::from_f32(&[1, 2, 3], vec![0.0; 6]);
        assert!(eval(&ctx, &[Some(&x3), Some(&img), Some(&blk)]).is_err());
        let b9 = Tensor::from_i64(&[1], vec![9]);
        assert!(eval(&ctx, &[Some(&x), Some(&img), Some(&b9)]).is_err());
        let i0 = Tensor::from_i64(&[1], vec![0]);
        assert!(eval(&ctx, &[Some(&x), Some(&i0), Some(&blk)]).is_err());
        let np = n.clone().with_attr("pads", AttrValue::Ints(vec![1 << 62, 1 << 62]));
        let ctx = OpCtx { node: &np, opset: 18 };
        assert!(eval(&ctx, &[Some(&x), Some(&img), Some(&blk)]).is_err());
    }
}
