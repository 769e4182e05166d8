//! `RNN` (opsets 7, 14, 22: `layout` since 14): a simple recurrent layer,
//! `Ht = f(Xt·Wᵀ + Ht₋₁·Rᵀ + Wb + Rb)`, forward, reverse or both directions, with
//! `sequence_lens`, `initial_h`, `clip` and any activation function per direction (see
//! [`super::recurrent`] for what the recurrent operators share).

use super::recurrent::{self, RecurrentAttrs};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `RNN`: outputs `Y`, `Y_h`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let attrs = RecurrentAttrs::parse(ctx, &["Tanh"])?;
    let c = recurrent::common(&attrs, inputs, 1)?;
    let dims = c.dims;
    let (batch, hs, dirs) = (dims.batch, dims.hidden, dims.dirs);
    let mut h = recurrent::initial_state(&attrs, &dims, inputs, 5, "initial_h")?;
    let mut y = vec![0f32; dims.seq * dirs * batch * hs];
    for d in 0..dirs {
        let f = attrs.act(d, 0, 1);
        let rev = attrs.direction.reversed(d);
        let xw = recurrent::project_input(&c, d, hs);
        let rb = recurrent::recurrence_bias(&c, d, hs);
        let rd = &c.r[d * hs * hs..(d + 1) * hs * hs];
        let hd = &mut h[d * batch * hs..(d + 1) * batch * hs];
        for s in 0..dims.seq {
            let hr = recurrent::times_transposed(hd, batch, hs, rd, hs);
            for b in 0..batch {
                let Some(t) = recurrent::time_index(rev, s, c.lens[b]) else {
                    continue;
                };
                for j in 0..hs {
                    let v = f(xw[(t * batch + b) * hs + j] + hr[b * hs + j] + rb[j]);
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

/// `RNN` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("RNN", 7, eval).infer(infer);
