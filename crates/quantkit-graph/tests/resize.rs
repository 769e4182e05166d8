//! Resize has no case in the shared conformance set; these expectations were produced by
//! onnxruntime 1.31.1 (opset 13) for a 1×1×3×4 ramp scaled by (2, 1.5).

use quantkit_graph::ops::{resize, OpCtx};
use quantkit_graph::{AttrValue, Node, Tensor};

fn run(mode: &str, ctm: &str, nearest: Option<&str>) -> Vec<f32> {
    let mut n = Node::new("r", "Resize", &["x", "", "s"], &["y"])
        .with_attr("mode", AttrValue::String(mode.into()))
        .with_attr(
            "coordinate_transformation_mode",
            AttrValue::String(ctm.into()),
        );
    if let Some(m) = nearest {
        n = n.with_attr("nearest_mode", AttrValue::String(m.into()));
    }
    let x = Tensor::from_f32(&[1, 1, 3, 4], (1..=12).map(|v| v as f32).collect());
    let s = Tensor::from_f32(&[4], vec![1.0, 1.0, 2.0, 1.5]);
    let y = resize::eval(
        &OpCtx {
            node: &n,
            opset: 13,
        },
        &[Some(&x), None, Some(&s)],
    )
    .unwrap();
    assert_eq!(y[0].shape, [1, 1, 6, 6]);
    y[0].as_f32().unwrap().to_vec()
}

fn close(a: &[f32], b: &[f32]) {
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-4, "{a:?}\nvs\n{b:?}");
    }
}

const NEAREST: [f32; 36] = [
    1., 1., 2., 3., 3., 4., 1., 1., 2., 3., 3., 4., 5., 5., 6., 7., 7., 8., 5., 5., 6., 7., 7., 8.,
    9., 9., 10., 11., 11., 12., 9., 9., 10., 11., 11., 12.,
];

#[test]
fn nearest_matches_onnxruntime() {
    close(&run("nearest", "asymmetric", Some("floor")), &NEAREST);
    close(&run("nearest", "half_pixel", None), &NEAREST);
}

#[test]
fn linear_half_pixel_matches_onnxruntime() {
    let want = [
        1.0, 1.5, 2.16667, 2.83333, 3.5, 4.0, 2.0, 2.5, 3.16667, 3.83333, 4.5, 5.0, 4.0, 4.5,
        5.16667, 5.83333, 6.5, 7.0, 6.0, 6.5, 7.16667, 7.83333, 8.5, 9.0, 8.0, 8.5, 9.16667,
        9.83333, 10.5, 11.0, 9.0, 9.5, 10.16667, 10.83333, 11.5, 12.0,
    ];
    close(&run("linear", "half_pixel", None), &want);
}

#[test]
fn linear_align_corners_matches_onnxruntime() {
    let want = [
        1.0, 1.6, 2.2, 2.8, 3.4, 4.0, 2.6, 3.2, 3.8, 4.4, 5.0, 5.6, 4.2, 4.8, 5.4, 6.0, 6.6, 7.2,
        5.8, 6.4, 7.0, 7.6, 8.2, 8.8, 7.4, 8.0, 8.6, 9.2, 9.8, 10.4, 9.0, 9.6, 10.2, 10.8, 11.4,
        12.0,
    ];
    close(&run("linear", "align_corners", None), &want);
}
