//! The 2-D f32 MaxPool fast path against the generic tap-table path (taken when the node
//! also asks for the `Indices` output), on random shapes with padding, strides, dilations,
//! ceil mode, repeated values and NaN.

use quantkit_graph::ops::{max_pool, OpCtx};
use quantkit_graph::{AttrValue, Node, Tensor};

fn pool(x: &Tensor, attrs: &[(&str, Vec<i64>)], ceil: bool, indices: bool) -> Vec<f32> {
    let outs: &[&str] = if indices { &["y", "i"] } else { &["y"] };
    let mut node = Node::new("mp", "MaxPool", &["x"], outs);
    for (k, v) in attrs {
        node = node.with_attr(k, AttrValue::Ints(v.clone()));
    }
    node = node.with_attr("ceil_mode", AttrValue::Int(ceil as i64));
    let ctx = OpCtx {
        node: &node,
        opset: 17,
    };
    let y = max_pool::eval(&ctx, &[Some(x)]).expect("max pool runs");
    y[0].to_f32_vec()
}

#[test]
fn fast_2d_path_equals_generic_path() {
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for case in 0..600 {
        let (n, c) = (1 + next(2) as usize, 1 + next(3) as usize);
        let (h, w) = (1 + next(9) as usize, 1 + next(9) as usize);
        let (kh, kw) = (1 + next(3) as i64, 1 + next(3) as i64);
        let (sy, sx) = (1 + next(3) as i64, 1 + next(3) as i64);
        let (dy, dx) = (1 + next(2) as i64, 1 + next(2) as i64);
        // Pads stay below the kernel extent, as ONNX requires.
        let pads: Vec<i64> = [kh, kw, kh, kw]
            .iter()
            .map(|&k| next(k as u64) as i64)
            .collect();
        if (h as i64 + pads[0] + pads[2]) < (kh - 1) * dy + 1
            || (w as i64 + pads[1] + pads[3]) < (kw - 1) * dx + 1
        {
            continue;
        }
        let vals: Vec<f32> = (0..n * c * h * w)
            .map(|_| match next(10) {
                0 => f32::NAN,
                1 => 1.0,
                v => v as f32 - 5.0,
            })
            .collect();
        let x = Tensor::from_f32(&[n, c, h, w], vals);
        let attrs = [
            ("kernel_shape", vec![kh, kw]),
            ("strides", vec![sy, sx]),
            ("dilations", vec![dy, dx]),
            ("pads", pads.clone()),
        ];
        let ceil = next(2) == 1;
        let fast = pool(&x, &attrs, ceil, false);
        let generic = pool(&x, &attrs, ceil, true);
        assert_eq!(fast.len(), generic.len(), "case {case}");
        for (i, (a, b)) in fast.iter().zip(&generic).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "case {case} {attrs:?} ceil {ceil}: output {i}: fast {a} vs generic {b}"
            );
        }
    }
}
