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
    let want_indices = ctx.node.outputs.len() > 1 && !ctx.node.outputs[1].is_empty();
    if let (Data::F32(xf), false) = (&x.data, want_indices) {
        // f32 fast path (no widening); same first-maximum rule as below.
        if g.k.len() == 2 {
            let mut shape = x.shape[..2].to_vec();
            shape.extend_from_slice(&g.out_sp);
            return Ok(vec![make(
                crate::DType::F32,
                shape,
                Data::F32(max_pool_2d_f32(&g, xf)),
            )?]);
        }
        let y = g.map_windows(xf.as_slice(), |xp, taps| {
            let mut best = f32::NEG_INFINITY;
            let mut seen = false;
            for &(t, _) in taps {
                if let Some(i) = t {
                    if !seen || xp[i] > best {
                        best = xp[i];
                        seen = true;
                    }
                }
            }
            best
        });
        let mut shape = x.shape[..2].to_vec();
        shape.extend_from_slice(&g.out_sp);
        return Ok(vec![make(crate::DType::F32, shape, Data::F32(y))?]);
    }
    let v = x.to_f64_vec();
    let in_sp = g.in_sp.clone();
    let in_len: usize = in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    // Value and in-plane argmax of each window (the first maximum wins, as in ONNX).
    let best = |xp: &[f64], taps: &[(Option<usize>, bool)]| -> (f64, usize) {
        let mut best = f64::NEG_INFINITY;
        let mut bi = None;
        for &(t, _) in taps {
            if let Some(i) = t {
                if bi.is_none() || xp[i] > best {
                    best = xp[i];
                    bi = Some(i);
                }
            }
        }
        (best, bi.unwrap_or(0))
    };
    let y = g.map_windows(&v, |xp, taps| best(xp, taps).0);
    let ind: Vec<i64> = if want_indices {
        let arg = g.map_windows(&v, |xp, taps| best(xp, taps).1 as f64);
        arg.iter()
            .enumerate()
            .map(|(o, &a)| {
                let (plane, i) = (o / out_len.max(1), a as usize);
                let within = if col_major {
                    // Column-major spatial index (storage_order = 1).
                    let mut rem = i;
                    let mut idx = vec![0usize; in_sp.len()];
                    for ax in (0..in_sp.len()).rev() {
                        idx[ax] = rem % in_sp[ax];
                        rem /= in_sp[ax];
                    }
                    let mut cm = 0usize;
                    for ax in (0..in_sp.len()).rev() {
                        cm = cm * in_sp[ax] + idx[ax];
                    }
                    cm
                } else {
                    i
                };
                (plane * in_len + within) as i64
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut shape = x.shape[..2].to_vec();
    shape.extend_from_slice(&g.out_sp);
    let yt = make(crate::DType::F64, shape.clone(), Data::F64(y))?.cast(x.dtype);
    let mut out = vec![yt];
    if want_indices {
        out.push(make(crate::DType::I64, shape, Data::I64(ind))?);
    }
    Ok(out)
}

/// 2-D f32 max pool as a direct loop over planes (in parallel) and output rows: the same
/// windows and first-maximum rule as the generic tap-table path (taps in row-major order,
/// `v > best` replaces), without a table lookup per tap and without a branch per tap (pooling
/// was a fifth of a conv net's time through the table). Each output row is built from the
/// window's input rows in order; the valid `kx` range of every output column is computed once.
fn max_pool_2d_f32(g: &PoolGeom, x: &[f32]) -> Vec<f32> {
    use rayon::prelude::*;
    let [ih, iw] = [g.in_sp[0], g.in_sp[1]];
    let [oh, ow] = [g.out_sp[0], g.out_sp[1]];
    let [kh, kw] = [g.k[0], g.k[1]];
    let [sy, sx] = [g.strides[0], g.strides[1]];
    let [dy, dx] = [g.dilations[0], g.dilations[1]];
    let [py, px] = [g.pad_begin[0] as isize, g.pad_begin[1] as isize];
    let mut y = vec![0f32; g.planes * oh * ow];
    if y.is_empty() {
        return y;
    }
    // For output column ox: the input index of its first valid tap and how many valid taps
    // follow at stride dx (padding taps are skipped, as in the tap table).
    let cols: Vec<(usize, usize)> = (0..ow)
        .map(|ox| {
            let base = (ox * sx) as isize - px;
            let valid: Vec<usize> = (0..kw)
                .map(|kx| base + (kx * dx) as isize)
                .filter(|&ix| ix >= 0 && ix < iw as isize)
                .map(|ix| ix as usize)
                .collect();
            (valid.first().copied().unwrap_or(0), valid.len())
        })
        .collect();
    y.par_chunks_mut(oh * ow).enumerate().for_each(|(pl, yp)| {
        let xp = &x[pl * ih * iw..(pl + 1) * ih * iw];
        for (oy, yrow) in yp.chunks_mut(ow).enumerate() {
            let mut first = true;
            for ky in 0..kh {
                let iy = (oy * sy + ky * dy) as isize - py;
                if iy < 0 || iy >= ih as isize {
                    continue;
                }
                let row = &xp[iy as usize * iw..(iy as usize + 1) * iw];
                let step = |out: &mut f32, taps: &mut dyn Iterator<Item = f32>| {
                    let mut best = if first {
                        taps.next().unwrap_or(f32::NEG_INFINITY)
                    } else {
                        *out
                    };
                    for v in taps {
                        best = if v > best { v } else { best };
                    }
                    *out = best;
                };
                if dx == 1 && kw == 2 && sx == 2 && px == 0 && 2 * ow <= iw {
                    // The most common pool (2×2, stride 2, no column padding): every
                    // window has both taps, in a fixed pattern the compiler vectorises.
                    for (out, w) in yrow.iter_mut().zip(row.chunks_exact(2)) {
                        let (a, b) = (w[0], w[1]);
                        let best = if first || a > *out { a } else { *out };
                        *out = if b > best { b } else { best };
                    }
                } else if dx == 1 {
                    // Undilated windows are contiguous: plain slices, which the compiler
                    // unrolls (the common 2×2 and 3×3 pools).
                    for (out, &(start, n)) in yrow.iter_mut().zip(&cols) {
                        let w = &row[start..start + n];
                        let mut best = if first {
                            w.first().copied().unwrap_or(f32::NEG_INFINITY)
                        } else {
                            *out
                        };
                        for &v in w.iter().skip(first as usize) {
                            best = if v > best { v } else { best };
                        }
                        *out = best;
                    }
                } else {
                    for (out, &(start, n)) in yrow.iter_mut().zip(&cols) {
                        step(out, &mut row[start..].iter().step_by(dx).take(n).copied());
                    }
                }
                first = false;
            }
            if first {
                // No input row inside this window: every tap was padding.
                yrow.fill(f32::NEG_INFINITY);
            }
        }
    });
    y
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    let g = super::pool::PoolGeom::new(ctx, &x.1).ok()?;
    let mut s = x.1[..2].to_vec();
    s.extend(g.out_sp);
    let mut v = vec![(x.0, s.clone())];
    if ctx.node.outputs.len() > 1 {
        v.push((crate::tensor::DType::I64, s));
    }
    Some(v)
}

/// Gradient: each output's `g` to the input that `eval` picked (the first maximum of its
/// window).
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let x = input(gi.inputs, 0)?;
    let g = PoolGeom::new(ctx, &x.shape)?;
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if !gi.need(0) {
        return Ok(out);
    }
    let xv = super::grad::f32s(gi.inputs, 0)?;
    let out_len: usize = g.out_sp.iter().product();
    if gi.grad.len() != g.planes * out_len {
        return Err(OpError::shape(
            format!("output gradient of {} elements", g.planes * out_len),
            gi.grad.len(),
        ));
    }
    let mut d = vec![0f32; x.len()];
    if is_2x2_stride_2(&g) {
        backward_2x2(&g, &xv, gi.grad, &mut d);
        out[0] = Some(super::grad::tensor(&x.shape, d)?);
        return Ok(out);
    }
    backward_taps(&g, &xv, gi.grad, &mut d);
    out[0] = Some(super::grad::tensor(&x.shape, d)?);
    Ok(out)
}

/// The gradient of any pool through the tap table: each output's `g` to the first maximum
/// of its valid taps. The reference of [`backward_2x2`].
fn backward_taps(g: &PoolGeom, xv: &[f32], grad: &[f32], d: &mut [f32]) {
    use rayon::prelude::*;
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.k.iter().product::<usize>().max(1);
    if in_len == 0 || out_len == 0 {
        return;
    }
    let taps = g.taps();
    d.par_chunks_mut(in_len).enumerate().for_each(|(p, dp)| {
        let xp = &xv[p * in_len..(p + 1) * in_len];
        let gp = &grad[p * out_len..(p + 1) * out_len];
        for (o, &go) in gp.iter().enumerate() {
            let mut best: Option<usize> = None;
            for &(t, _) in &taps[o * klen..(o + 1) * klen] {
                if let Some(i) = t {
                    if best.is_none_or(|b| xp[i] > xp[b]) {
                        best = Some(i);
                    }
                }
            }
            if let Some(b) = best {
                dp[b] += go;
            }
        }
    });
}

/// Whether the pool is 2-D, 2×2 with stride 2, undilated and unpadded, with every window
/// inside the input (the common CNN pool): [`backward_2x2`] applies.
fn is_2x2_stride_2(g: &PoolGeom) -> bool {
    g.k == [2, 2]
        && g.strides == [2, 2]
        && g.dilations == [1, 1]
        && g.pad_begin.iter().all(|&p| p == 0)
        && g.out_sp.len() == 2
        && 2 * g.out_sp[0] <= g.in_sp[0]
        && 2 * g.out_sp[1] <= g.in_sp[1]
}

/// The gradient of a 2×2/2 pool ([`is_2x2_stride_2`]): each output's `g` to the first
/// maximum of its window, taps in row-major order with `v > best` replacing (the rule of
/// `eval`, so a NaN tap is picked only when it comes first), planes in parallel. The same
/// result as the generic tap-table loop (test `max_pool_2x2_backward_equals_the_tap_table`).
fn backward_2x2(g: &PoolGeom, x: &[f32], grad: &[f32], d: &mut [f32]) {
    use rayon::prelude::*;
    let [ih, iw] = [g.in_sp[0], g.in_sp[1]];
    let [oh, ow] = [g.out_sp[0], g.out_sp[1]];
    if ih * iw == 0 || oh * ow == 0 {
        return;
    }
    d.par_chunks_mut(ih * iw)
        .zip(x.par_chunks(ih * iw))
        .zip(grad.par_chunks(oh * ow))
        .for_each(|((dp, xp), gp)| {
            for (oy, grow) in gp.chunks_exact(ow).enumerate() {
                let (r0, r1) = (2 * oy * iw, (2 * oy + 1) * iw);
                let (x0, x1) = (&xp[r0..r0 + 2 * ow], &xp[r1..r1 + 2 * ow]);
                let (d0, d1) = dp[r0..r1 + 2 * ow].split_at_mut(iw);
                // Every tap of the window is written (the gradient or 0), with selects
                // rather than branches: on activations the winner is random, and a
                // mispredicted branch per window cost more than the arithmetic.
                for (((&go, (xa, xb)), da), db) in grow
                    .iter()
                    .zip(x0.chunks_exact(2).zip(x1.chunks_exact(2)))
                    .zip(d0.chunks_exact_mut(2))
                    .zip(d1[..2 * ow].chunks_exact_mut(2))
                {
                    let mut best = xa[0];
                    let mut bi = 0u8;
                    for (i, v) in [(1u8, xa[1]), (2, xb[0]), (3, xb[1])] {
                        let t = v > best;
                        best = if t { v } else { best };
                        bi = if t { i } else { bi };
                    }
                    da[0] = if bi == 0 { go } else { 0.0 };
                    da[1] = if bi == 1 { go } else { 0.0 };
                    db[0] = if bi == 2 { go } else { 0.0 };
                    db[1] = if bi == 3 { go } else { 0.0 };
                }
            }
        });
}

/// `MaxPool` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("MaxPool", 1, eval)
        .backward(backward)
        .infer(infer)
        .facts(super::Facts {
            monotone: true,
            ..super::Facts::MOVES
        });

#[cfg(test)]
mod tests {
    use super::*;

    /// The 2×2/2 fast path against the tap table, on inputs full of ties and NaN, with odd
    /// sizes (the last row/column is dropped).
    #[test]
    fn max_pool_2x2_backward_equals_the_tap_table() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state >> 32
        };
        for (h, w) in [(2, 2), (4, 6), (5, 7), (28, 28), (9, 4)] {
            let attrs = super::super::pool::PoolAttrs {
                kernel_shape: vec![2, 2],
                strides: Some(vec![2, 2]),
                dilations: None,
                pads: super::super::PadSpec::Explicit(None),
                ceil_mode: false,
            };
            let g = PoolGeom::with(&attrs, &[2, 3, h, w]).unwrap();
            assert!(is_2x2_stride_2(&g));
            let x: Vec<f32> = (0..6 * h * w)
                .map(|_| match next() % 10 {
                    0 => f32::NAN,
                    r => (r % 4) as f32 - 1.5,
                })
                .collect();
            let gr: Vec<f32> = (0..6 * (h / 2) * (w / 2))
                .map(|_| (next() % 100) as f32 / 7.0)
                .collect();
            let (mut fast, mut reference) = (vec![0f32; x.len()], vec![0f32; x.len()]);
            backward_2x2(&g, &x, &gr, &mut fast);
            backward_taps(&g, &x, &gr, &mut reference);
            assert_eq!(fast, reference, "{h}x{w}");
        }
    }
}
