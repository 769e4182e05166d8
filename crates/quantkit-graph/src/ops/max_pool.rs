//! `MaxPool` (N-D, pads / auto_pad, strides, dilations, ceil_mode, optional Indices output
//! with `storage_order`). Works on float and 8-bit integer inputs.

use super::pool::PoolGeom;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `MaxPool`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let g = PoolGeom::new(ctx, &x.shape)?;
    let col_major = ctx.node.attr_int("storage_order", 0)? != 0;
    let v = x.to_f64_vec();
    let out_len: usize = g.out_sp.iter().product();
    let mut y = vec![f64::NEG_INFINITY; g.planes * out_len];
    let mut ind = vec![0i64; g.planes * out_len];
    let in_sp = g.in_sp.clone();
    let in_len: usize = in_sp.iter().product();
    g.for_each_window(|_, o, taps| {
        let mut best = f64::NEG_INFINITY;
        let mut bi = None;
        for &(t, _) in taps {
            if let Some(i) = t {
                if v[i] > best || bi.is_none() {
                    best = v[i];
                    bi = Some(i);
                }
            }
        }
        y[o] = best;
        if let Some(i) = bi {
            ind[o] = if col_major {
                // Column-major spatial index within the plane, plus the plane offset.
                let (plane, mut rem) = (i / in_len, i % in_len);
                let mut idx = vec![0usize; in_sp.len()];
                for a in (0..in_sp.len()).rev() {
                    idx[a] = rem % in_sp[a];
                    rem /= in_sp[a];
                }
                let mut cm = 0usize;
                for a in (0..in_sp.len()).rev() {
                    cm = cm * in_sp[a] + idx[a];
                }
                (plane * in_len + cm) as i64
            } else {
                i as i64
            };
        }
    });
    let mut shape = x.shape[..2].to_vec();
    shape.extend_from_slice(&g.out_sp);
    let yt = make(crate::DType::F64, shape.clone(), Data::F64(y))?.cast(x.dtype);
    let mut out = vec![yt];
    if ctx.node.outputs.len() > 1 {
        out.push(make(crate::DType::I64, shape, Data::I64(ind))?);
    }
    Ok(out)
}
