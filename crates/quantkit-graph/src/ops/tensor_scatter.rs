//! `TensorScatter` (opset 24): writes `update` into a copy of `past_cache` along the
//! sequence axis `axis` (default −2; not the batch axis 0), at `write_indices[b]` (input
//! 2, one per batch row; default 0) for batch row `b`. `mode` "linear" (default) needs
//! every write inside the cache; "circular" wraps the position modulo the cache length.
//! The KV-cache update of LLM exports.

use super::{input, norm_axis, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `TensorScatter`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let past = input(inputs, 0)?;
    let upd = input(inputs, 1)?;
    let r = past.rank();
    let axis = norm_axis(ctx.node.attr_int("axis", -2)?, r)?;
    if axis == 0 {
        return Err(OpError::Invalid("axis 0 is the batch axis".into()));
    }
    let fits = upd.rank() == r
        && (0..r).all(|a| a == axis || upd.shape[a] == past.shape[a])
        && upd.shape[axis] <= past.shape[axis];
    if !fits || upd.dtype != past.dtype {
        return Err(OpError::shape(
            format!("an update shaped like {:?} except along axis {axis}", past.shape),
            &upd.shape,
        ));
    }
    let circular = match ctx.node.attr_string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        m => return Err(OpError::Invalid(format!("mode `{m}` (linear or circular)"))),
    };
    let batch = past.shape[0];
    let starts = match opt_input(inputs, 2) {
        Some(w) if w.len() == batch && !w.dtype.is_float() => w.to_i64_vec(),
        Some(w) => return Err(OpError::shape(format!("{batch} integer write indices"), &w.shape)),
        None => vec![0; batch],
    };
    let (max_len, seq) = (past.shape[axis], upd.shape[axis]);
    let inner: usize = past.shape[axis + 1..].iter().product();
    let per_batch: usize = past.shape[1..axis].iter().product();
    // Destination row (along `axis`) of every update row, checked once per batch entry.
    let mut rows = Vec::with_capacity(batch * seq);
    for (b, &s) in starts.iter().enumerate() {
        for k in 0..seq {
            let pos = s.checked_add(k as i64).ok_or_else(|| OpError::Invalid("write index overflows".into()))?;
            let pos = if circular && max_len > 0 { pos.rem_euclid(max_len as i64) } else { pos };
            if pos < 0 || pos >= max_len as i64 {
                return Err(OpError::Invalid(format!(
                    "batch row {b}: write position {pos} outside the cache of {max_len}"
                )));
            }
            rows.push(pos as usize);
        }
    }
    let mut idx: Vec<usize> = (0..past.len()).collect();
    for b in 0..batch {
        for p in 0..per_batch {
            let outer = b * per_batch + p;
            for (k, &row) in rows[b * seq..(b + 1) * seq].iter().enumerate() {
                for i in 0..inner {
                    idx[(outer * max_len + row) * inner + i] =
                        past.len() + (outer * seq + k) * inner + i;
                }
            }
        }
    }
    // Gather from past ++ update.
    let both = crate::tensor::Data::concat(&[&past.data, &upd.data])
        .ok_or_else(|| OpError::Invalid("cache and update element types differ".into()))?;
    let data = both.gather(&idx);
    Ok(vec![Tensor::new(past.shape.clone(), data)
        .map_err(|e| OpError::Invalid(e.to_string()))?
        .with_dtype(past.dtype)])
}

/// `TensorScatter` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("TensorScatter", 24, eval)
    .infer(super::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn linear_circular_and_out_of_range() {
        let n = Node::new("t", "TensorScatter", &["p", "u", "w"], &["y"]);
        let past = Tensor::from_f32(&[2, 3, 1], vec![0.0; 6]);
        let upd = Tensor::from_f32(&[2, 2, 1], vec![1.0, 2.0, 3.0, 4.0]);
        let w = Tensor::from_i64(&[2], vec![1, 2]);
        let ctx = OpCtx { node: &n, opset: 24 };
        assert!(eval(&ctx, &[Some(&past), Some(&upd), Some(&w)]).is_err());
        let c = n.clone().with_attr("mode", AttrValue::String(b"circular".to_vec()));
        let y = eval(&OpCtx { node: &c, opset: 24 }, &[Some(&past), Some(&upd), Some(&w)]).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![0.0, 1.0, 2.0, 4.0, 0.0, 3.0]);
        let w0 = Tensor::from_i64(&[2], vec![0, 1]);
        let y = eval(&ctx, &[Some(&past), Some(&upd), Some(&w0)]).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![1.0, 2.0, 0.0, 0.0, 3.0, 4.0]);
    }
}
