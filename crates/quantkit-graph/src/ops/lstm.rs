//! `LSTM` (opsets 7, 14, 22: `layout` since 14): a long short-term memory layer over a
//! sequence, forward, reverse or both directions, with `sequence_lens`, `initial_h`,
//! `initial_c`, peepholes `P`, `input_forget`, `clip` and any three activation functions
//! per direction (see [`super::recurrent`] for what the recurrent operators share).
//!
//! Gates in the ONNX order `i, o, f, c` (peepholes `i, o, f`); with `f, g, h` the
//! activations:
//! `i = f(Xt·Wiᵀ + Ht₋₁·Riᵀ + Pi⊙Ct₋₁ + Wbi + Rbi)`,
//! `f = f(Xt·Wfᵀ + Ht₋₁·Rfᵀ + Pf⊙Ct₋₁ + Wbf + Rbf)` (`1 − i` with `input_forget`),
//! `c = g(Xt·Wcᵀ + Ht₋₁·Rcᵀ + Wbc + Rbc)`, `Ct = f⊙Ct₋₁ + i⊙c`,
//! `o = f(Xt·Woᵀ + Ht₋₁·Roᵀ + Po⊙Ct + Wbo + Rbo)`, `Ht = o⊙h(Ct)`.

use super::recurrent::{self, RecurrentAttrs};
use super::{opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `LSTM`: outputs `Y`, `Y_h`, `Y_c`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let attrs = RecurrentAttrs::parse(ctx, &["Sigmoid", "Tanh", "Tanh"])?;
    let input_forget = match ctx.node.attr_int("input_forget", 0)? {
        0 => false,
        1 => true,
        v => {
            return Err(OpError::attr(
                "input_forget",
                format!("expected 0 or 1, got {v}"),
            ))
        }
    };
    let c = recurrent::common(&attrs, inputs, 4)?;
    let dims = c.dims;
    let (batch, hs, dirs) = (dims.batch, dims.hidden, dims.dirs);
    let mut h = recurrent::initial_state(&attrs, &dims, inputs, 5, "initial_h")?;
    let mut cell = recurrent::initial_state(&attrs, &dims, inputs, 6, "initial_c")?;
    let p = match opt_input(inputs, 7) {
        Some(p) => {
            if p.shape != [dirs, 3 * hs] {
                return Err(OpError::shape(format!("P of shape [{dirs}, {}]", 3 * hs), &p.shape));
            }
            p.to_f32_vec()
        }
        None => vec![0.0; dirs * 3 * hs],
    };
    let gh = 4 * hs;
    let mut y = vec![0f32; dims.seq * dirs * batch * hs];
    for d in 0..dirs {
        let (f, g, hact) = (attrs.act(d, 0, 3), attrs.act(d, 1, 3), attrs.act(d, 2, 3));
        let rev = attrs.direction.reversed(d);
        let xw = recurrent::project_input(&c, d, gh);
        let rb = recurrent::recurrence_bias(&c, d, gh);
        let rd = &c.r[d * gh * hs..(d + 1) * gh * hs];
        let (pi, po, pf) = (
            &p[d * 3 * hs..d * 3 * hs + hs],
            &p[d * 3 * hs + hs..d * 3 * hs + 2 * hs],
            &p[d * 3 * hs + 2 * hs..(d + 1) * 3 * hs],
        );
        let hd = &mut h[d * batch * hs..(d + 1) * batch * hs];
        let cd = &mut cell[d * batch * hs..(d + 1) * batch * hs];
        for s in 0..dims.seq {
            let hr = recurrent::times_transposed(hd, batch, hs, rd, gh);
            for b in 0..batch {
                let Some(t) = recurrent::time_index(rev, s, c.lens[b]) else {
                    continue;
                };
                let xg = &xw[(t * batch + b) * gh..(t * batch + b + 1) * gh];
                let hg = &hr[b * gh..(b + 1) * gh];
                let gate = |k: usize, j: usize| xg[k * hs + j] + hg[k * hs + j] + rb[k * hs + j];
                for j in 0..hs {
                    let c_prev = cd[b * hs + j];
                    let it = f(gate(0, j) + pi[j] * c_prev);
                    let ft = if input_forget {
                        1.0 - it
                    } else {
                        f(gate(2, j) + pf[j] * c_prev)
                    };
                    let ct = g(gate(3, j));
                    let c_new = ft * c_prev + it * ct;
                    let ot = f(gate(1, j) + po[j] * c_new);
                    let h_new = ot * hact(c_new);
                    cd[b * hs + j] = c_new;
                    hd[b * hs + j] = h_new;
                    y[((t * dirs + d) * batch + b) * hs + j] = h_new;
                }
            }
        }
    }
    recurrent::outputs(&attrs, &dims, c.dtype, y, vec![h, cell])
}

/// Static shape rule: `Y`, `Y_h`, `Y_c` from `X`, `R` and the attributes.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    recurrent::infer(ctx, inp, 2)
}

/// `LSTM` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("LSTM", 7, eval).infer(infer);
