//! `GridSample`: samples `X` (`[N, C, D1..Dr]`) at the normalized coordinates of `grid`
//! (`[N, O1..Or, r]`, the last axis listing x = Dr first, then Dr−1...), giving
//! `[N, C, O1..Or]`. Coordinate −1 is the first element's left edge (its centre with
//! `align_corners`), +1 the last element's right edge (centre).
//!
//! Opset 16 takes a 4-D `X` and modes `bilinear`, `nearest`, `bicubic`; opset 20 any number
//! of spatial axes and the names `linear`, `nearest`, `cubic` (the cubic kernel is Keys'
//! with a = −0.75, over 4 neighbours per axis). `padding_mode`: `zeros` (outside elements
//! are 0), `border` (coordinates clamped to the edge) or `reflection` (coordinates
//! reflected at the borders: the edges, or the centres of the end elements with
//! `align_corners`). Nearest rounds half to even, as PyTorch and the ONNX reference do.
//! The output is capped at [`max_elements()`] elements.

use super::max_elements;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, DType, Data, Tensor};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// Reflects `x` into `[lo, hi]` by bouncing off the nearer border (PyTorch's
/// `reflect_coordinates`).
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let span = hi - lo;
    if span <= 0.0 {
        return lo;
    }
    let (dx, from_lo) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = (dx / span).floor();
    let r = dx - n * span;
    if (n % 2.0 == 0.0) == from_lo {
        lo + r
    } else {
        hi - r
    }
}

/// Keys' cubic coefficients (a = −0.75) of the 4 neighbours `floor(x) − 1 ..= floor(x) + 2`
/// for `t = x − floor(x)`.
fn cubic(t: f64) -> [f64; 4] {
    let a = -0.75;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// Evaluates `GridSample`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let grid = input(inputs, 1)?;
    let node = ctx.node;
    let new = ctx.opset >= 20;
    let mode = node.attr_string("mode", if new { "linear" } else { "bilinear" })?;
    let mode = match (mode.as_str(), new) {
        ("nearest", _) => Mode::Nearest,
        ("linear", true) | ("bilinear", false) => Mode::Linear,
        ("cubic", true) | ("bicubic", false) => Mode::Cubic,
        (other, _) => return Err(OpError::attr("mode", format!("unknown value {other}"))),
    };
    let padding = match node.attr_string("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => {
            return Err(OpError::attr(
                "padding_mode",
                format!("unknown value {other}"),
            ))
        }
    };
    let align = node.attr_int("align_corners", 0)? != 0;
    let r = x.rank().saturating_sub(2);
    if x.rank() < 3 || (!new && x.rank() != 4) {
        return Err(OpError::shape(
            if new { "X of rank ≥ 3" } else { "a 4-D X" },
            &x.shape,
        ));
    }
    if grid.rank() != r + 2 || grid.shape[0] != x.shape[0] || grid.shape[r + 1] != r {
        return Err(OpError::shape(
            format!("grid [N={}, O1..O{r}, {r}]", x.shape[0]),
            &grid.shape,
        ));
    }
    if !grid.dtype.is_float() {
        return Err(OpError::DType {
            index: 1,
            expected: "float".into(),
            got: grid.dtype.to_string(),
        });
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let dims = &x.shape[2..];
    let points: usize = grid.shape[1..=r].iter().product();
    let mut out_shape = vec![n, c];
    out_shape.extend_from_slice(&grid.shape[1..=r]);
    let total = out_shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d).filter(|&t| t <= max_elements()))
        .ok_or_else(|| {
            OpError::Invalid(format!(
                "GridSample: output {out_shape:?} has more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
            ))
        })?;
    let xv = x.to_f64_vec();
    let gv = grid.to_f64_vec();
    let spatial: usize = dims.iter().product();
    let st = strides(dims);
    // Borders of the reflection and of the valid range, per axis.
    let (lo, hi): (Vec<f64>, Vec<f64>) = dims
        .iter()
        .map(|&d| {
            if align {
                (0.0, d as f64 - 1.0)
            } else {
                (-0.5, d as f64 - 0.5)
            }
        })
        .unzip();
    let mut out = vec![0f64; total];
    // Per axis: (index, weight) of the neighbours; None = a zero from padding.
    let mut axis_taps: Vec<Vec<(Option<usize>, f64)>> = vec![Vec::new(); r];
    let mut combo: Vec<(usize, f64)> = Vec::new();
    let mut spare: Vec<(usize, f64)> = Vec::new();
    for b in 0..n {
        for p in 0..points {
            let g = &gv[(b * points + p) * r..][..r];
            for ax in 0..r {
                let d = dims[ax];
                let gn = g[r - 1 - ax];
                let mut v = if align {
                    (gn + 1.0) / 2.0 * (d as f64 - 1.0)
                } else {
                    ((gn + 1.0) * d as f64 - 1.0) / 2.0
                };
                // The reference evaluator holds coordinates in float32.
                v = v as f32 as f64;
                if !v.is_nan() {
                    v = v.clamp(-1e12, 1e12);
                }
                if mode == Mode::Nearest {
                    v = v.round_ties_even();
                }
                if v < lo[ax] || v > hi[ax] {
                    match padding {
                        Padding::Border => v = v.clamp(0.0, d as f64 - 1.0),
                        Padding::Reflection => v = reflect(v, lo[ax], hi[ax]),
                        Padding::Zeros => {}
                    }
                }
                let at = |i: i64| -> Option<usize> {
                    let last = d as i64 - 1;
                    match padding {
                        Padding::Zeros => (0..=last).contains(&i).then_some(i as usize),
                        Padding::Border => (d > 0).then(|| i.clamp(0, last) as usize),
                        Padding::Reflection => (d > 0).then(|| {
                            (reflect(i as f64, lo[ax], hi[ax]) as i64).clamp(0, last) as usize
                        }),
                    }
                };
                let t = &mut axis_taps[ax];
                t.clear();
                if v.is_nan() {
                    t.push((None, f64::NAN));
                    continue;
                }
                let f = v.floor();
                let i0 = f as i64;
                match mode {
                    Mode::Nearest => t.push((at(v as i64), 1.0)),
                    Mode::Linear => {
                        t.push((at(i0), 1.0 - (v - f)));
                        t.push((at(i0 + 1), v - f));
                    }
                    Mode::Cubic => {
                        for (k, w) in cubic(v - f).into_iter().enumerate() {
                            t.push((at(i0 - 1 + k as i64), w));
                        }
                    }
                }
            }
            // The product of the per-axis taps, as flat offsets into one channel.
            combo.clear();
            combo.push((0, 1.0));
            let mut nan = false;
            for ax in 0..r {
                spare.clear();
                for &(off, w) in &combo {
                    for &(i, wi) in &axis_taps[ax] {
                        match i {
                            Some(i) => spare.push((off + i * st[ax], w * wi)),
                            None => nan |= wi.is_nan(),
                        }
                    }
                }
                std::mem::swap(&mut combo, &mut spare);
            }
            for ch in 0..c {
                let src = &xv[(b * c + ch) * spatial..][..spatial];
                let s: f64 = combo.iter().map(|&(off, w)| w * src[off]).sum();
                out[(b * c + ch) * points + p] = if nan { f64::NAN } else { s };
            }
        }
    }
    let t = make(DType::F64, out_shape, Data::F64(out))?;
    Ok(vec![t.cast(x.dtype)])
}

/// Output type and shape: `[N, C, O1..Or]` from X and grid.
pub fn infer(_: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, xs) = inp.get(0)?;
    let (_, gs) = inp.get(1)?;
    if xs.len() < 3 || gs.len() != xs.len() {
        return None;
    }
    let mut s = xs[..2].to_vec();
    s.extend_from_slice(&gs[1..gs.len() - 1]);
    Some(vec![(*dt, s)])
}

/// `GridSample` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("GridSample", 16, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn node(mode: &str, pad: &str, align: i64) -> Node {
        Node::new("g", "GridSample", &["x", "grid"], &["y"])
            .with_attr("mode", AttrValue::String(mode.as_bytes().to_vec()))
            .with_attr("padding_mode", AttrValue::String(pad.as_bytes().to_vec()))
            .with_attr("align_corners", AttrValue::Int(align))
    }

    #[test]
    fn corners_padding_and_reflection() {
        // 1×1×2×2 image, sampled at its four corners and far outside.
        let x = Tensor::from_f32(&[1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let g = Tensor::from_f32(
            &[1, 1, 3, 2],
            vec![-1.0, -1.0, 1.0, 1.0, 3.0, -1.0],
        );
        let run = |n: &Node| eval(&OpCtx { node: n, opset: 16 }, &[Some(&x), Some(&g)]);
        let y = run(&node("bilinear", "zeros", 1)).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![1.0, 4.0, 0.0]);
        let y = run(&node("bilinear", "border", 1)).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![1.0, 4.0, 2.0]);
        // x = 3 ↦ 2 past the right centre at 1: reflected back onto 1 − 2 = −1 ↦ 1.
        let y = run(&node("bilinear", "reflection", 1)).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![1.0, 4.0, 1.0]);
        // Without align_corners −1 is the left edge of pixel 0: half of it is padding.
        let y = run(&node("bilinear", "zeros", 0)).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![0.25, 1.0, 0.0]);
        assert_eq!(y[0].shape, vec![1, 1, 1, 3]);
    }

    #[test]
    fn bad_shapes_modes_and_sizes_are_errors() {
        let x = Tensor::from_f32(&[1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let g = Tensor::from_f32(&[1, 1, 1, 2], vec![0.0, 0.0]);
        let ok = node("bilinear", "zeros", 0);
        assert!(eval(&OpCtx { node: &ok, opset: 16 }, &[Some(&x), Some(&g)]).is_ok());
        // Opset-20 names at opset 16 and the reverse.
        assert!(eval(&OpCtx { node: &node("linear", "zeros", 0), opset: 16 }, &[Some(&x), Some(&g)]).is_err());
        assert!(eval(&OpCtx { node: &ok, opset: 20 }, &[Some(&x), Some(&g)]).is_err());
        let bad_pad = node("bilinear", "wrap", 0);
        assert!(eval(&OpCtx { node: &bad_pad, opset: 16 }, &[Some(&x), Some(&g)]).is_err());
        let g3 = Tensor::from_f32(&[1, 1, 1, 3], vec![0.0; 3]);
        assert!(eval(&OpCtx { node: &ok, opset: 16 }, &[Some(&x), Some(&g3)]).is_err());
        let x5 = Tensor::from_f32(&[1, 1, 1, 2, 2], vec![0.0; 4]);
        let g5 = Tensor::from_f32(&[1, 1, 1, 1, 3], vec![0.0; 3]);
        assert!(eval(&OpCtx { node: &ok, opset: 16 }, &[Some(&x5), Some(&g5)]).is_err());
        // 5-D at opset 20 is fine; NaN coordinates give NaN, not a panic.
        let n20 = node("linear", "border", 0);
        let g5 = Tensor::from_f32(&[1, 1, 1, 1, 3], vec![f32::NAN, 0.0, f32::INFINITY]);
        let y = eval(&OpCtx { node: &n20, opset: 20 }, &[Some(&x5), Some(&g5)]).unwrap();
        assert!(y[0].to_f32_vec()[0].is_nan());
        // An output of C × points past the cap.
        let big_c = Tensor::zeros(DType::F32, &[1, 1 << 14, 1, 1]);
        let big_g = Tensor::zeros(DType::F32, &[1, 1 << 15, 1, 2]);
        assert!(eval(&OpCtx { node: &ok, opset: 16 }, &[Some(&big_c), Some(&big_g)]).is_err());
    }
}
