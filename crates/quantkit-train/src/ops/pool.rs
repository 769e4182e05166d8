//! Pooling: `MaxPool` (any kernel, stride, padding; backward through the stored argmax) and
//! `GlobalAveragePool`.

use std::any::Any;

use rayon::prelude::*;

use crate::error::{attr_err, shape_err, Result};
use crate::tape::Op;
use crate::tensor::Tensor;

/// Max pooling attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolAttrs {
    /// Kernel (h, w).
    pub kernel: [usize; 2],
    /// Strides (h, w).
    pub stride: [usize; 2],
    /// Pads (top, left, bottom, right); padded cells never win the max.
    pub pads: [usize; 4],
}

impl PoolAttrs {
    /// Square kernel `k`, stride `s`, no padding.
    pub fn new(k: usize, s: usize) -> Self {
        Self {
            kernel: [k, k],
            stride: [s, s],
            pads: [0; 4],
        }
    }
}

/// ONNX `MaxPool` (floor output size, no dilation). Keeps the argmax of every output for
/// backward; ties go to the first element in row-major window order.
#[derive(Debug)]
pub struct MaxPool2d {
    attrs: PoolAttrs,
    argmax: Vec<u32>,
}

impl MaxPool2d {
    /// A max pool with the given attributes.
    pub fn new(attrs: PoolAttrs) -> Self {
        Self {
            attrs,
            argmax: Vec::new(),
        }
    }

    fn out_hw(&self, x: &Tensor) -> Result<[usize; 6]> {
        let a = &self.attrs;
        let [n, c, h, w] = x.dims4("MaxPool")?;
        if a.kernel.contains(&0) || a.stride.contains(&0) {
            return Err(attr_err("MaxPool", "kernel and strides must be ≥ 1"));
        }
        if a.pads[0] >= a.kernel[0]
            || a.pads[2] >= a.kernel[0]
            || a.pads[1] >= a.kernel[1]
            || a.pads[3] >= a.kernel[1]
        {
            return Err(attr_err("MaxPool", "pads must be smaller than the kernel"));
        }
        let ph = h + a.pads[0] + a.pads[2];
        let pw = w + a.pads[1] + a.pads[3];
        if ph < a.kernel[0] || pw < a.kernel[1] {
            return Err(shape_err(
                "MaxPool",
                "an input at least as large as the kernel",
                x.shape(),
            ));
        }
        Ok([
            n,
            c,
            h,
            w,
            (ph - a.kernel[0]) / a.stride[0] + 1,
            (pw - a.kernel[1]) / a.stride[1] + 1,
        ])
    }
}

impl Op for MaxPool2d {
    fn name(&self) -> &'static str {
        "MaxPool"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = inputs[0];
        let [n, c, h, w, oh, ow] = self.out_hw(x)?;
        let a = self.attrs;
        let mut y = vec![0.0f32; n * c * oh * ow];
        let mut arg = vec![0u32; y.len()];
        y.par_chunks_mut(oh * ow)
            .zip(arg.par_chunks_mut(oh * ow))
            .zip(x.data().par_chunks(h * w))
            .for_each(|((yp, ap), xp)| {
                if a == PoolAttrs::new(2, 2) {
                    // The common 2×2/2 case without window-bound arithmetic; same tie and NaN
                    // rules as the general loop below (first maximum wins, NaN wins).
                    // The comparisons are combined with non-short-circuit `&`/`|` and the
                    // updates are selects, so the loop compiles without data-dependent
                    // branches (on random data a branchy version mispredicts about once per
                    // window and was the single most expensive part of LeNet's forward pass).
                    for oy in 0..oh {
                        let (r0, r1) = (2 * oy * w, (2 * oy + 1) * w);
                        let (row0, row1) = (&xp[r0..r0 + 2 * ow], &xp[r1..r1 + 2 * ow]);
                        let yr = &mut yp[oy * ow..(oy + 1) * ow];
                        let ar = &mut ap[oy * ow..(oy + 1) * ow];
                        for ox in 0..ow {
                            let v = [
                                row0[2 * ox],
                                row0[2 * ox + 1],
                                row1[2 * ox],
                                row1[2 * ox + 1],
                            ];
                            let idx = [r0 + 2 * ox, r0 + 2 * ox + 1, r1 + 2 * ox, r1 + 2 * ox + 1];
                            let mut best = v[0];
                            let mut bi = idx[0] as u32;
                            for j in 1..4 {
                                let take = (v[j] > best) | (v[j].is_nan() & !best.is_nan());
                                best = if take { v[j] } else { best };
                                bi = if take { idx[j] as u32 } else { bi };
                            }
                            yr[ox] = best;
                            ar[ox] = bi;
                        }
                    }
                    return;
                }
                for oy in 0..oh {
                    let y0 = (oy * a.stride[0]) as isize - a.pads[0] as isize;
                    let ylo = y0.max(0) as usize;
                    let yhi = ((y0 + a.kernel[0] as isize) as usize).min(h);
                    for ox in 0..ow {
                        let x0 = (ox * a.stride[1]) as isize - a.pads[1] as isize;
                        let xlo = x0.max(0) as usize;
                        let xhi = ((x0 + a.kernel[1] as isize) as usize).min(w);
                        let mut best = f32::NEG_INFINITY;
                        let mut bi = ylo * w + xlo;
                        for iy in ylo..yhi {
                            for ix in xlo..xhi {
                                let v = xp[iy * w + ix];
                                // A NaN wins over any number so that it propagates to the output.
                                if v > best || (v.is_nan() && !best.is_nan()) {
                                    best = v;
                                    bi = iy * w + ix;
                                }
                            }
                        }
                        yp[oy * ow + ox] = best;
                        ap[oy * ow + ox] = bi as u32;
                    }
                }
            });
        self.argmax = arg;
        Tensor::new(&[n, c, oh, ow], y)
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        _needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let x = inputs[0];
        let [_, _, h, w, oh, ow] = self.out_hw(x)?;
        let mut dx = vec![0.0f32; x.len()];
        dx.par_chunks_mut(h * w)
            .zip(grad.data().par_chunks(oh * ow))
            .zip(self.argmax.par_chunks(oh * ow))
            .for_each(|((dp, gp), ap)| {
                for (g, &i) in gp.iter().zip(ap) {
                    dp[i as usize] += *g;
                }
            });
        Ok(vec![Some(Tensor::new(x.shape(), dx)?)])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// ONNX `GlobalAveragePool`: `[N, C, H, W] → [N, C, 1, 1]`.
#[derive(Debug, Default)]
pub struct GlobalAvgPool;

impl Op for GlobalAvgPool {
    fn name(&self) -> &'static str {
        "GlobalAveragePool"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let [n, c, h, w] = inputs[0].dims4("GlobalAveragePool")?;
        let hw = h * w;
        let y: Vec<f32> = inputs[0]
            .data()
            .chunks(hw)
            .map(|p| (p.iter().map(|&v| v as f64).sum::<f64>() / hw as f64) as f32)
            .collect();
        Tensor::new(&[n, c, 1, 1], y)
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        _needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let [_, _, h, w] = inputs[0].dims4("GlobalAveragePool")?;
        let hw = h * w;
        let inv = 1.0 / hw as f32;
        let mut dx = vec![0.0f32; inputs[0].len()];
        for (p, g) in dx.chunks_mut(hw).zip(grad.data()) {
            p.fill(g * inv);
        }
        Ok(vec![Some(Tensor::new(inputs[0].shape(), dx)?)])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch-free 2×2/2 path against a plain sequential scan of each window: values,
    /// argmax (first maximum wins, a NaN wins and the first NaN stays), on inputs full of
    /// ties and NaN, with odd sizes (the last row/column is dropped).
    #[test]
    fn max_pool_2x2_matches_a_sequential_scan() {
        let mut state = 0x1234_5678_9abc_def1u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state >> 32
        };
        for (h, w) in [(2, 2), (4, 6), (5, 7), (28, 28), (9, 4)] {
            let (n, c) = (2, 3);
            let x: Vec<f32> = (0..n * c * h * w)
                .map(|_| match next() % 10 {
                    0 => f32::NAN,
                    r => (r % 4) as f32 - 1.5,
                })
                .collect();
            let xt = Tensor::new(&[n, c, h, w], x.clone()).unwrap();
            let mut op = MaxPool2d::new(PoolAttrs::new(2, 2));
            let y = op.forward(&[&xt]).unwrap();
            let (oh, ow) = (h / 2, w / 2);
            assert_eq!(y.shape(), &[n, c, oh, ow]);
            for p in 0..n * c {
                let xp = &x[p * h * w..(p + 1) * h * w];
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut bi = 2 * oy * w + 2 * ox;
                        for (dy, dx) in [(0, 1), (1, 0), (1, 1)] {
                            let i = (2 * oy + dy) * w + 2 * ox + dx;
                            let (v, best) = (xp[i], xp[bi]);
                            if v > best || (v.is_nan() && !best.is_nan()) {
                                bi = i;
                            }
                        }
                        let o = p * oh * ow + oy * ow + ox;
                        assert_eq!(y.data()[o].to_bits(), xp[bi].to_bits(), "value {o}");
                        assert_eq!(op.argmax[o] as usize, bi, "argmax {o}");
                    }
                }
            }
        }
    }
}
