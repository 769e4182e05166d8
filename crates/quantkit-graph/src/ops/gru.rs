//! `GRU` (opsets 7, 14, 22: `layout` since 14): a gated recurrent unit layer, forward,
//! reverse or both directions, with `sequence_lens`, `initial_h`, `clip`,
//! `linear_before_reset` and any two activation functions per direction (see
//! [`super::recurrent`] for what the recurrent operators share).
//!
//! Gates in the ONNX order `z, r, h`; with `f, g` the activations:
//! `z = f(Xt·Wzᵀ + Ht₋₁·Rzᵀ + Wbz + Rbz)`, `r = f(Xt·Wrᵀ + Ht₋₁·Rrᵀ + Wbr + Rbr)`,
//! `h = g(Xt·Whᵀ + (r⊙Ht₋₁)·Rhᵀ + Rbh + Wbh)`, or with `linear_before_reset`
//! `h = g(Xt·Whᵀ + r⊙(Ht₋₁·Rhᵀ + Rbh) + Wbh)`; `Ht = (1 − z)⊙h + z⊙Ht₋₁`.

use super::recurrent::{self, RecurrentAttrs};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `GRU`: outputs `Y`, `Y_h`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let attrs = RecurrentAttrs::parse(ctx, &["Sigmoid", "Tanh"])?;
    let lbr = match ctx.node.attr_int("linear_before_reset", 0)? {
        0 => false,
        1 => true,
        v => {
            return Err(OpError::attr(
                "linear_before_reset",
                format!("expected 0 or 1, got {v}"),
            ))
        }
    };
    let c = recurrent::common(&attrs, inputs, 3)?;
    let dims = c.dims;
    let (batch, hs, dirs) = (dims.batch, dims.hidden, dims.dirs);
    let mut h = recurrent::initial_state(&attrs, &dims, inputs, 5, "initial_h")?;
    let gh = 3 * hs;
    let mut y = vec![0f32; dims.seq * dirs * batch * hs];
    let mut rh = vec![0f32; batch * hs];
    let mut z = vec![0f32; batch * hs];
    for d in 0..dirs {
        let (f, g) = (attrs.act(d, 0, 2), attrs.act(d, 1, 2));
        let rev = attrs.direction.reversed(d);
        let xw = recurrent::project_input(&c, d, gh);
        let rb = recurrent::recurrence_bias(&c, d, gh);
        let rd = &c.r[d * gh * hs..(d + 1) * gh * hs];
        let hd = &mut h[d * batch * hs..(d + 1) * batch * hs];
        for s in 0..dims.seq {
            let active: Vec<Option<usize>> = (0..batch)
                .map(|b| recurrent::time_index(rev, s, c.lens[b]))
                .collect();
            // z and r (and, with linear_before_reset, Ht₋₁·Rhᵀ) from one product.
            let n = if lbr { gh } else { 2 * hs };
            let hr = recurrent::times_transposed(hd, batch, hs, &rd[..n * hs], n);
            for (b, t) in active.iter().enumerate() {
                let Some(t) = *t else { continue };
                let xg = &xw[(t * batch + b) * gh..(t * batch + b + 1) * gh];
                let hg = &hr[b * n..(b + 1) * n];
                for j in 0..hs {
                    z[b * hs + j] = f(xg[j] + hg[j] + rb[j]);
                    let r = f(xg[hs + j] + hg[hs + j] + rb[hs + j]);
                    // r⊙(Ht₋₁·Rhᵀ + Rbh) now, or r⊙Ht₋₁ to multiply below.
                    rh[b * hs + j] = if lbr {
                        r * (hg[2 * hs + j] + rb[2 * hs + j])
                    } else {
                        r * hd[b * hs + j]
                    };
                }
            }
            let rhr = if lbr {
                None
            } else {
                Some(recurrent::times_transposed(&rh, batch, hs, &rd[2 * hs * hs..], hs))
            };
            for (b, t) in active.iter().enumerate() {
                let Some(t) = *t else { continue };
                let xg = &xw[(t * batch + b) * gh..(t * batch + b + 1) * gh];
                for j in 0..hs {
                    let pre = match &rhr {
                        Some(m) => xg[2 * hs + j] + m[b * hs + j] + rb[2 * hs + j],
                        None => xg[2 * hs + j] + rh[b * hs + j],
                    };
                    let ht = g(pre);
                    let zt = z[b * hs + j];
                    let v = (1.0 - zt) * ht + zt * hd[b * hs + j];
                    hd[b * hs + j] = v;
                    y[((t * dirs + d) * batch + b) * hs + j] = v;
                }
            }
        }
    }
    recurrent::outputs(&attrs, &dims, c.dtype, y, vec![h])
}

/// Static shape rule: `Y`, `Y_h` from `X`, `R` and the attributes.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    recurrent::infer(ctx, inp, 1)
}

/// `GRU` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("GRU", 7, eval).infer(infer);
