//! Element-wise `Add` with NumPy broadcasting (ONNX multidirectional broadcasting).

use std::any::Any;

use rayon::prelude::*;

use crate::error::{shape_err, Result};
use crate::tape::Op;
use crate::tensor::Tensor;
// One broadcasting rule for the executor and the tape.
use quantkit_graph::tensor::broadcast_shapes as broadcast_shape;

/// `a + b` with broadcasting; the gradient of a broadcast input is summed over the
/// broadcast axes.
#[derive(Debug, Default)]
pub struct Add;

/// Strides of `shape` seen inside `out` (0 on broadcast axes).
fn bstrides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let r = out.len();
    let mut st = vec![0; r];
    let mut s = 1;
    for i in (0..shape.len()).rev() {
        let oi = i + r - shape.len();
        st[oi] = if shape[i] == 1 { 0 } else { s };
        s *= shape[i];
    }
    st
}

/// Calls `f(out_index, in_index)` for every output element.
fn walk(out: &[usize], st: &[usize], mut f: impl FnMut(usize, usize)) {
    let total: usize = out.iter().product();
    let r = out.len();
    let mut idx = vec![0usize; r];
    let mut off = 0usize;
    for o in 0..total {
        f(o, off);
        for d in (0..r).rev() {
            idx[d] += 1;
            off += st[d];
            if idx[d] < out[d] {
                break;
            }
            off -= st[d] * out[d];
            idx[d] = 0;
        }
    }
}

impl Op for Add {
    fn name(&self) -> &'static str {
        "Add"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (a, b) = (inputs[0], inputs[1]);
        if a.shape() == b.shape() {
            let mut y = vec![0.0f32; a.len()];
            y.par_chunks_mut(1 << 14)
                .zip(
                    a.data()
                        .par_chunks(1 << 14)
                        .zip(b.data().par_chunks(1 << 14)),
                )
                .for_each(|(yc, (ac, bc))| {
                    for ((y, a), b) in yc.iter_mut().zip(ac).zip(bc) {
                        *y = a + b;
                    }
                });
            return Tensor::new(a.shape(), y);
        }
        let out = broadcast_shape(a.shape(), b.shape()).ok_or_else(|| {
            shape_err(
                "Add",
                format!("a shape broadcastable with {:?}", a.shape()),
                b.shape(),
            )
        })?;
        let mut y = vec![0.0f32; out.iter().product()];
        let sa = bstrides(a.shape(), &out);
        walk(&out, &sa, |o, i| y[o] = a.data()[i]);
        let sb = bstrides(b.shape(), &out);
        walk(&out, &sb, |o, i| y[o] += b.data()[i]);
        Tensor::new(&out, y)
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        output: &Tensor,
        grad: &Tensor,
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let mut out = Vec::with_capacity(2);
        for (t, &need) in inputs.iter().zip(needs) {
            if !need {
                out.push(None);
            } else if t.shape() == output.shape() {
                out.push(Some(grad.clone()));
            } else {
                let mut g = vec![0.0f32; t.len()];
                let st = bstrides(t.shape(), output.shape());
                walk(output.shape(), &st, |o, i| g[i] += grad.data()[o]);
                out.push(Some(Tensor::new(t.shape(), g)?));
            }
        }
        Ok(out)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
