//! `MaxUnpool` (opset 9, 11, 22): the partial inverse of `MaxPool`. Output element
//! `I[i]` of the unpooled tensor (an index into its whole flattened form, as `MaxPool`'s
//! `Indices` output counts them, batch and channel included) receives `X[i]`; every other
//! element is 0. The unpooled shape is `[N, C, (in − 1)·stride + kernel − pad_begin −
//! pad_end ...]`. When input 2 (`output_shape`) is given, the unpooled tensor is placed
//! at the start of each axis of a zero tensor of that shape (as ONNX's reference and node
//! tests define it; each axis must be at least the unpooled size). Where two indices are
//! equal the later element wins.

use super::{input, opt_input, positive_ints, OpCtx};
use super::max_elements;
use crate::error::OpError;
use crate::tensor::{Data, Tensor};


/// The output shape from the attributes.
fn default_shape(ctx: &OpCtx, x: &Tensor) -> Result<Vec<usize>, OpError> {
    let nd = x.rank().saturating_sub(2);
    let kernel = positive_ints(ctx.node, "kernel_shape")?
        .ok_or_else(|| OpError::Invalid("kernel_shape is required".into()))?;
    if kernel.len() != nd || nd == 0 {
        return Err(OpError::shape(
            format!("{} spatial axes (kernel_shape)", kernel.len()),
            &x.shape,
        ));
    }
    let strides = positive_ints(ctx.node, "strides")?.unwrap_or_else(|| vec![1; nd]);
    let pads: Vec<i64> = ctx.node.attr_ints("pads")?.unwrap_or_else(|| vec![0; 2 * nd]);
    if strides.len() != nd || pads.len() != 2 * nd || pads.iter().any(|&p| p < 0) {
        return Err(OpError::Invalid(format!(
            "strides {strides:?} and pads {pads:?} do not fit {nd} spatial axes"
        )));
    }
    let mut shape = x.shape[..2].to_vec();
    for a in 0..nd {
        let full = (x.shape[a + 2].saturating_sub(1) as u128) * strides[a] as u128
            + kernel[a] as u128;
        let cut = pads[a] as u128 + pads[a + nd] as u128;
        if full < cut || full - cut > max_elements() as u128 {
            return Err(OpError::Invalid(format!(
                "spatial axis {a}: unpooled size {full} minus pads {cut} is out of range"
            )));
        }
        shape.push((full - cut) as usize);
    }
    Ok(shape)
}

/// Evaluates `MaxUnpool`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let idx = input(inputs, 1)?;
    if x.rank() < 3 {
        return Err(OpError::shape("an [N, C, spatial...] input", &x.shape));
    }
    if idx.shape != x.shape || idx.dtype.is_float() {
        return Err(OpError::shape(
            format!("integer indices of shape {:?}", x.shape),
            &idx.shape,
        ));
    }
    let shape = default_shape(ctx, x)?;
    let total = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= max_elements())
        .ok_or_else(|| OpError::Invalid(format!("output shape {shape:?} is too large")))?;
    let dest: Vec<usize> = idx
        .to_i64_vec()
        .into_iter()
        .map(|i| {
            usize::try_from(i)
                .ok()
                .filter(|&i| i < total)
                .ok_or_else(|| OpError::Invalid(format!("index {i} outside the {total} output elements")))
        })
        .collect::<Result<_, _>>()?;
    let mut out = Data::zeros(x.dtype, total);
    scatter(&mut out, &x.data, &dest)?;
    let y = Tensor::new(shape.clone(), out)
        .map_err(|e| OpError::Invalid(e.to_string()))?
        .with_dtype(x.dtype);
    match opt_input(inputs, 2) {
        None => Ok(vec![y]),
        Some(s) => {
            let v = s.to_i64_vec();
            let fits = v.len() == shape.len()
                && v.iter().zip(&shape).all(|(&o, &u)| o >= u as i64)
                && v[..2] == [shape[0] as i64, shape[1] as i64];
            if !fits {
                return Err(OpError::Invalid(format!(
                    "output_shape {v:?} smaller than the unpooled shape {shape:?}"
                )));
            }
            let out: Vec<usize> = v.iter().map(|&d| d as usize).collect();
            embed(&y, &out).map(|t| vec![t])
        }
    }
}

/// `y` placed at the start of every axis of a zero tensor of shape `out` (checked to be
/// at least `y`'s shape and at most [`max_elements()`]).
fn embed(y: &Tensor, out: &[usize]) -> Result<Tensor, OpError> {
    let total = out
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= max_elements())
        .ok_or_else(|| OpError::Invalid(format!("output shape {out:?} is too large")))?;
    let ostrides = crate::tensor::strides(out);
    let mut idx: Vec<Option<usize>> = vec![None; total];
    let r = y.shape.len();
    let mut coord = vec![0usize; r];
    for i in 0..y.len() {
        let at: usize = coord.iter().zip(&ostrides).map(|(c, s)| c * s).sum();
        idx[at] = Some(i);
        for a in (0..r).rev() {
            coord[a] += 1;
            if coord[a] < y.shape[a] {
                break;
            }
            coord[a] = 0;
        }
    }
    Tensor::new(out.to_vec(), y.data.gather_or(&idx, 0.0))
        .map(|t| t.with_dtype(y.dtype))
        .map_err(|e| OpError::Invalid(e.to_string()))
}

/// `out[dest[i]] = src[i]` for two buffers of the same element type.
fn scatter(out: &mut Data, src: &Data, dest: &[usize]) -> Result<(), OpError> {
    macro_rules! put {
        ($($v:ident),*) => {
            match (out, src) {
                $((Data::$v(o), Data::$v(s)) => {
                    for (&d, &v) in dest.iter().zip(s.iter()) {
                        o[d] = v;
                    }
                    Ok(())
                })*
                (o, _) => Err(OpError::Invalid(format!(
                    "MaxUnpool of {:?} values is not supported",
                    o.storage_dtype()
                ))),
            }
        };
    }
    put!(F32, F64, F16, I8, U8, I16, U16, I32, U32, I64, U64, Bool)
}

/// `MaxUnpool` in the operator registry: moves values of input 0 (zeros elsewhere).
pub const DEF: super::OpDef = super::OpDef::onnx("MaxUnpool", 9, eval);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn unpools_and_rejects_bad_indices() {
        let n = Node::new("u", "MaxUnpool", &["x", "i"], &["y"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![2, 2]))
            .with_attr("strides", AttrValue::Ints(vec![2, 2]));
        let ctx = OpCtx { node: &n, opset: 11 };
        let x = Tensor::from_f32(&[1, 1, 1, 2], vec![5.0, 6.0]);
        let i = Tensor::from_i64(&[1, 1, 1, 2], vec![1, 6]);
        let y = eval(&ctx, &[Some(&x), Some(&i)]).unwrap();
        assert_eq!(y[0].shape, vec![1, 1, 2, 4]);
        assert_eq!(y[0].to_f32_vec(), vec![0.0, 5.0, 0.0, 0.0, 0.0, 0.0, 6.0, 0.0]);
        let bad = Tensor::from_i64(&[1, 1, 1, 2], vec![1, 8]);
        assert!(eval(&ctx, &[Some(&x), Some(&bad)]).is_err());
        let neg = Tensor::from_i64(&[1, 1, 1, 2], vec![-1, 0]);
        assert!(eval(&ctx, &[Some(&x), Some(&neg)]).is_err());
        let huge = Tensor::from_i64(&[4], vec![1, 1, 1 << 40, 1 << 40]);
        assert!(eval(&ctx, &[Some(&x), Some(&i), Some(&huge)]).is_err());
        let small = Tensor::from_i64(&[4], vec![1, 1, 2, 3]);
        assert!(eval(&ctx, &[Some(&x), Some(&i), Some(&small)]).is_err());
        let big = Tensor::from_i64(&[4], vec![1, 1, 3, 4]);
        let y = eval(&ctx, &[Some(&x), Some(&i), Some(&big)]).unwrap();
        let mut want = vec![0.0; 12];
        want[1] = 5.0;
        want[6] = 6.0;
        assert_eq!(y[0].to_f32_vec(), want);
    }
}
