//! `Pad` (opset 2 attributes; 11+ inputs pads/constant_value; 18+ `axes`): modes constant,
//! reflect, edge and wrap (opset 19). Negative pads crop.

use super::{input, ints_of, make, norm_axis, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, DType, Data, Tensor};

/// Evaluates `Pad`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    let mode = ctx.node.attr_string("mode", "constant")?;
    let (pads, value, axes) = if ctx.opset < 11 {
        let p = ctx
            .node
            .attr_ints("pads")?
            .ok_or_else(|| OpError::attr("pads", "required"))?;
        (p, ctx.node.attr_float("value", 0.0)? as f64, None)
    } else {
        let p = ints_of(input(inputs, 1)?);
        let v = opt_input(inputs, 2)
            .map(|t| t.to_f64_vec().first().copied().unwrap_or(0.0))
            .unwrap_or(0.0);
        (p, v, opt_input(inputs, 3).map(ints_of))
    };
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&a| norm_axis(a, r))
            .collect::<Result<_, _>>()?,
        None => (0..r).collect(),
    };
    let k = axes.len();
    if pads.len() != 2 * k {
        return Err(OpError::shape(format!("{} pads", 2 * k), &pads));
    }
    let mut begin = vec![0i64; r];
    let mut end = vec![0i64; r];
    for (i, &a) in axes.iter().enumerate() {
        begin[a] = pads[i];
        end[a] = pads[i + k];
    }
    let mut shape = vec![0usize; r];
    for a in 0..r {
        let s = (x.shape[a] as i64)
            .checked_add(begin[a])
            .and_then(|s| s.checked_add(end[a]))
            .ok_or_else(|| OpError::shape("a padded size within i64", (begin[a], end[a])))?;
        if s < 0 {
            return Err(OpError::shape("non-negative padded size", s));
        }
        shape[a] = s as usize;
    }
    let st = strides(&x.shape);
    let n = super::alloc_len("Pad output", &shape)?;
    let mut idx = Vec::with_capacity(n);
    let mut counter = vec![0usize; r];
    for _ in 0..n {
        let mut off = Some(0usize);
        for a in 0..r {
            let d = x.shape[a] as i64;
            let mut i = counter[a] as i64 - begin[a];
            if i < 0 || i >= d {
                if d == 0 {
                    off = None;
                    break;
                }
                i = match mode.as_str() {
                    "constant" => {
                        off = None;
                        break;
                    }
                    "edge" => i.clamp(0, d - 1),
                    "wrap" => i.rem_euclid(d),
                    "reflect" => {
                        if d == 1 {
                            0
                        } else {
                            let period = 2 * (d - 1);
                            let m = i.rem_euclid(period);
                            if m >= d {
                                period - m
                            } else {
                                m
                            }
                        }
                    }
                    other => return Err(OpError::attr("mode", format!("unknown value {other}"))),
                };
            }
            if let Some(o) = off.as_mut() {
                *o += i as usize * st[a];
            }
        }
        idx.push(off);
        for a in (0..r).rev() {
            counter[a] += 1;
            if counter[a] < shape[a] {
                break;
            }
            counter[a] = 0;
        }
    }
    // bfloat16 is stored as codes: fill with the code of the value.
    let fill = if x.dtype == DType::BF16 {
        match Tensor::from_f32(&[], vec![value as f32]).cast(DType::BF16).data {
            Data::U16(c) => f64::from(c[0]),
            _ => value,
        }
    } else {
        value
    };
    make(x.dtype, shape, x.data.gather_or(&idx, fill)).map(|t| vec![t])
}

/// `Pad` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Pad", 1, eval).bf16_codes();
