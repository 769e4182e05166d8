//! `LpPool`: `y = (Σ |x|^p)^(1/p)` over each window, padding contributing nothing.
//! Opset 1 has a float `p`, opset 2 on an integer one (default 2); opset 11 adds
//! `auto_pad`-resolved pads as the other pools, opset 18 `dilations` and `ceil_mode`
//! (the window geometry is [`PoolGeom`]'s, shared with MaxPool and AveragePool).
//! Window count and output size are checked against [`max_elements()`] before allocating.

use super::max_elements;
use super::pool::{PoolAttrs, PoolGeom};
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::ir::AttrValue;
use crate::tensor::{DType, Data, Tensor};

/// Reads `p` (an int from opset 2, a float in opset 1), positive and finite.
fn p_of(ctx: &OpCtx) -> Result<f64, OpError> {
    let p = match ctx.node.attr("p") {
        None => 2.0,
        Some(AttrValue::Int(v)) => *v as f64,
        Some(AttrValue::Float(v)) => f64::from(*v),
        Some(_) => return Err(OpError::attr("p", "expected a number")),
    };
    if !(p.is_finite() && p > 0.0) {
        return Err(OpError::attr("p", format!("expected a positive number, got {p}")));
    }
    Ok(p)
}

/// The geometry, with sizes checked so that neither the pads nor the window table
/// overflow or exceed [`max_elements()`].
fn geometry(ctx: &OpCtx, shape: &[usize]) -> Result<PoolGeom, OpError> {
    let a = PoolAttrs::parse(ctx.node)?;
    let limit = max_elements();
    let big = |v: &[usize]| v.iter().any(|&x| x > limit);
    if big(&a.kernel_shape)
        || a.strides.as_deref().is_some_and(big)
        || a.dilations.as_deref().is_some_and(big)
        || a.pads.fixed().as_deref().is_some_and(big)
    {
        return Err(OpError::Invalid(format!(
            "LpPool: kernel, strides, dilations or pads past {limit}"
        )));
    }
    let g = PoolGeom::with(&a, shape)?;
    let out: Option<usize> = g
        .out_sp
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d));
    let taps = out.and_then(|o| g.k.iter().try_fold(o, |n, &d| n.checked_mul(d)));
    let total = out.and_then(|o| o.checked_mul(g.planes));
    if !matches!((taps, total), (Some(t), Some(n)) if t <= limit && n <= limit) {
        return Err(OpError::Invalid(format!(
            "LpPool: output {:?} with kernel {:?} is past {limit} elements or window taps",
            g.out_sp, g.k
        )));
    }
    Ok(g)
}

/// Evaluates `LpPool`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let p = p_of(ctx)?;
    let g = geometry(ctx, &x.shape)?;
    let v = x.to_f64_vec();
    let y = g.map_windows(&v, |xp, taps| {
        let s: f64 = taps
            .iter()
            .filter_map(|&(t, _)| t.map(|i| xp[i].abs().powf(p)))
            .sum();
        s.powf(1.0 / p)
    });
    let mut shape = x.shape[..2].to_vec();
    shape.extend_from_slice(&g.out_sp);
    Ok(vec![make(DType::F64, shape, Data::F64(y))?.cast(x.dtype)])
}

/// Static shape rule: `[N, C, out...]`.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, s) = inp.get(0)?;
    let g = geometry(ctx, s).ok()?;
    let mut out = s[..2].to_vec();
    out.extend(g.out_sp);
    Some(vec![(*dt, out)])
}

/// `LpPool` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("LpPool", 1, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn l1_l2_float_p_and_bad_attributes() {
        let x = Tensor::from_f32(&[1, 1, 1, 2], vec![3.0, -4.0]);
        let n = Node::new("l", "LpPool", &["x"], &["y"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![1, 2]));
        let y = eval(&OpCtx { node: &n, opset: 18 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 1, 1, 1], vec![5.0]));
        let n1 = n.clone().with_attr("p", AttrValue::Int(1));
        let y = eval(&OpCtx { node: &n1, opset: 18 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![7.0]);
        // Opset 1 writes p as a float.
        let nf = n.clone().with_attr("p", AttrValue::Float(1.0));
        let y = eval(&OpCtx { node: &nf, opset: 1 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![7.0]);
        for bad in [
            n.clone().with_attr("p", AttrValue::Int(0)),
            n.clone().with_attr("p", AttrValue::Float(f32::NAN)),
            n.clone().with_attr("pads", AttrValue::Ints(vec![0, 0, 1 << 40, 0])),
            n.clone().with_attr("strides", AttrValue::Ints(vec![0, 1])),
            Node::new("l", "LpPool", &["x"], &["y"]),
        ] {
            assert!(eval(&OpCtx { node: &bad, opset: 18 }, &[Some(&x)]).is_err());
        }
        let x1 = Tensor::from_f32(&[2], vec![1.0, 2.0]);
        assert!(eval(&OpCtx { node: &n, opset: 18 }, &[Some(&x1)]).is_err());
    }
}
