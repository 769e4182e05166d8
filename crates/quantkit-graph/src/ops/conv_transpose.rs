//! `ConvTranspose` (N-D, groups, strides, dilations, pads / auto_pad, output_padding,
//! output_shape): a GEMM producing per-input-position contributions, then col2im.
//!
//! Output size per axis (ONNX spec): `s·(in−1) + output_padding + d·(k−1) + 1 − pb − pe`.
//! With `output_shape`, total padding is derived from it and split as the spec says
//! (SAME_UPPER puts the smaller half first).

use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::linalg::{sgemm, MatRef};
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `ConvTranspose`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let w = input(inputs, 1)?;
    let node = ctx.node;
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(OpError::shape(
            "input [N, C, D...] and weight [C, M/group, k...]",
            (&x.shape, &w.shape),
        ));
    }
    let nd = x.rank() - 2;
    let group = match node.attr_int("group", 1)? {
        g if g >= 1 => g as usize,
        g => return Err(OpError::attr("group", format!("expected ≥ 1, got {g}"))),
    };
    let (n, c) = (x.shape[0], x.shape[1]);
    if w.shape[0] != c || c % group != 0 {
        return Err(OpError::shape(
            format!("weight with {c} input channels"),
            &w.shape,
        ));
    }
    let mg = w.shape[1];
    let m = mg
        .checked_mul(group)
        .ok_or_else(|| OpError::attr("group", format!("{group} × {mg} output channels overflows")))?;
    let k: Vec<usize> = w.shape[2..].to_vec();
    let ints = |name: &str, d: usize| -> Result<Vec<usize>, OpError> {
        Ok(match node.attr_ints(name)? {
            Some(v) => v.iter().map(|&x| x.max(0) as usize).collect(),
            None => vec![d; nd],
        })
    };
    let strides = ints("strides", 1)?;
    let dil = ints("dilations", 1)?;
    let opad = ints("output_padding", 0)?;
    if strides.len() != nd || dil.len() != nd || opad.len() != nd {
        return Err(OpError::attr(
            "strides",
            "strides, dilations and output_padding need one value per spatial axis",
        ));
    }
    if strides.iter().chain(&dil).any(|&v| v == 0) {
        return Err(OpError::attr(
            "strides",
            "strides and dilations must be positive",
        ));
    }
    let in_sp = x.shape[2..].to_vec();
    if in_sp.iter().chain(&k).any(|&v| v == 0) {
        return Err(OpError::shape(
            "non-empty spatial input and kernel",
            (&x.shape, &w.shape),
        ));
    }
    // Checked: the attributes come from the file (a stride of 2^40 must not wrap into a
    // plausible size).
    let full: Vec<usize> = (0..nd)
        .map(|i| {
            strides[i]
                .checked_mul(in_sp[i] - 1)
                .and_then(|v| v.checked_add(opad[i]))
                .and_then(|v| v.checked_add(dil[i].checked_mul(k[i] - 1)?))
                .and_then(|v| v.checked_add(1))
                .filter(|&v| v <= i64::MAX as usize)
                .ok_or_else(|| OpError::attr("strides", "output size overflows"))
        })
        .collect::<Result<_, _>>()?;
    let auto_pad = node.attr_string("auto_pad", "NOTSET")?;
    let out_shape_attr = node.attr_ints("output_shape")?;
    let (pb, out_sp): (Vec<usize>, Vec<usize>) = if let Some(os) = out_shape_attr {
        if os.len() < nd {
            return Err(OpError::attr(
                "output_shape",
                format!("expected {nd} spatial values, got {os:?}"),
            ));
        }
        let os: Vec<usize> = os[os.len() - nd..]
            .iter()
            .map(|&v| v as usize)
            .collect();
        let mut pb = vec![0; nd];
        for i in 0..nd {
            let total = full[i].saturating_sub(os[i]);
            pb[i] = if auto_pad == "SAME_UPPER" {
                total / 2
            } else {
                total - total / 2
            };
        }
        (pb, os)
    } else if auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" {
        let os: Vec<usize> = (0..nd).map(|i| in_sp[i].saturating_mul(strides[i])).collect();
        let mut pb = vec![0; nd];
        for i in 0..nd {
            let total = full[i].saturating_sub(os[i]);
            pb[i] = if auto_pad == "SAME_UPPER" {
                total / 2
            } else {
                total - total / 2
            };
        }
        (pb, os)
    } else {
        let pads = if auto_pad == "VALID" {
            vec![0; 2 * nd]
        } else {
            node.attr_ints("pads")?.unwrap_or_else(|| vec![0; 2 * nd])
        };
        if pads.len() != 2 * nd {
            return Err(OpError::attr("pads", format!("expected {} values", 2 * nd)));
        }
        let pb: Vec<usize> = pads[..nd].iter().map(|&p| p.max(0) as usize).collect();
        let os = (0..nd)
            .map(|i| {
                (full[i] as i64)
                    .checked_sub(pads[i])
                    .and_then(|v| v.checked_sub(pads[i + nd]))
                    .map(|v| v.max(0) as usize)
                    .ok_or_else(|| OpError::attr("pads", format!("{pads:?} overflow")))
            })
            .collect::<Result<_, _>>()?;
        (pb, os)
    };
    let mut y_shape = vec![n, m];
    y_shape.extend_from_slice(&out_sp);
    super::alloc_len("ConvTranspose output", &y_shape)?;
    let mut col_shape = vec![mg];
    col_shape.extend_from_slice(&k);
    col_shape.extend_from_slice(&in_sp);
    super::alloc_len("ConvTranspose column buffer", &col_shape)?;
    if pb.iter().any(|&p| p > isize::MAX as usize) {
        return Err(OpError::attr("pads", format!("{pb:?} out of range")));
    }
    let xv = x.to_f32_vec();
    let wv = w.to_f32_vec();
    let in_len: usize = in_sp.iter().product();
    let out_len: usize = out_sp.iter().product();
    let klen: usize = k.iter().product();
    let cg = c / group;
    let rows = mg * klen;
    let mut y = vec![0f32; n * m * out_len];
    let mut col = vec![0f32; rows * in_len];
    let mut iidx = vec![0usize; nd];
    let mut kidx = vec![0usize; nd];
    for ni in 0..n {
        for gi in 0..group {
            // col[(mg, k...), i] = Σ_c W[c, mg, k...] · X[c, i]
            let wg = &wv[gi * cg * rows..(gi + 1) * cg * rows];
            let xg = &xv[(ni * c + gi * cg) * in_len..(ni * c + (gi + 1) * cg) * in_len];
            sgemm(
                rows,
                in_len,
                cg,
                MatRef {
                    data: wg,
                    rs: 1,
                    cs: rows,
                },
                MatRef {
                    data: xg,
                    rs: in_len,
                    cs: 1,
                },
                &mut col,
                false,
                true,
            );
            for r in 0..rows {
                let mo = gi * mg + r / klen;
                let mut rem = r % klen;
                for a in (0..nd).rev() {
                    kidx[a] = rem % k[a];
                    rem /= k[a];
                }
                let yo = &mut y[(ni * m + mo) * out_len..(ni * m + mo + 1) * out_len];
                for i in 0..in_len {
                    let mut rem = i;
                    for a in (0..nd).rev() {
                        iidx[a] = rem % in_sp[a];
                        rem /= in_sp[a];
                    }
                    let mut off = 0usize;
                    let mut ok = true;
                    for a in 0..nd {
                        let o = (iidx[a] * strides[a] + kidx[a] * dil[a]) as isize - pb[a] as isize;
                        if o < 0 || o >= out_sp[a] as isize {
                            ok = false;
                            break;
                        }
                        off = off * out_sp[a] + o as usize;
                    }
                    if ok {
                        yo[off] += col[r * in_len + i];
                    }
                }
            }
        }
    }
    if let Some(b) = opt_input(inputs, 2) {
        let bv = b.to_f32_vec();
        if bv.len() != m {
            return Err(OpError::shape(format!("bias of {m} elements"), &b.shape));
        }
        for (i, chunk) in y.chunks_mut(out_len.max(1)).enumerate() {
            chunk.iter_mut().for_each(|v| *v += bv[i % m]);
        }
    }
    let mut shape = vec![n, m];
    shape.extend_from_slice(&out_sp);
    let t = make(DType::F32, shape, Data::F32(y))?;
    Ok(vec![if x.dtype == DType::F32 {
        t
    } else {
        t.cast(x.dtype)
    }])
}

/// `ConvTranspose` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("ConvTranspose", 1, eval).facts(super::Facts {
    weight: Some(1),
    quant_inputs: super::QuantInputs::First,
    ..super::Facts::NONE
});
