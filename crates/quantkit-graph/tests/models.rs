//! Real models from ../shared/models: float outputs must match onnxruntime's reference
//! outputs within 1e-4 × the output's largest magnitude (issue 5).

mod common;

use common::{npy_tensor, shared, take};
use quantkit_graph::{execute, load_model};

fn check(model: &str, input: &str, refs: &[&str], limit: usize) {
    let Some(dir) = shared("models") else { return };
    let graph = load_model(dir.join(model)).expect("model loads");
    let x = take(&npy_tensor(&dir.join(input)), limit);
    let n = x.shape[0];
    let name = graph.inputs[0].name.clone();
    let outs = execute(&graph, vec![(name, x)]).expect("model runs");
    assert_eq!(outs.len(), refs.len());
    for ((oname, got), r) in outs.iter().zip(refs) {
        let want = take(&npy_tensor(&dir.join(r)), n);
        assert_eq!(got.shape, want.shape, "{model} output {oname}");
        let (g, w) = (got.as_f32().unwrap(), want.as_f32().unwrap());
        let mag = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        eprintln!("{model} {oname}: max abs err {err:.3e}, max |ref| {mag:.3e}");
        assert!(
            err <= 1e-4 * mag,
            "{model} output {oname}: max abs error {err} > 1e-4 × {mag}"
        );
    }
}

#[test]
fn mtcnn_pnet_grid_matches_reference() {
    check(
        "mtcnn/pnet.onnx",
        "mtcnn/pnet_input.npy",
        &["mtcnn/pnet_ref_output_0.npy", "mtcnn/pnet_ref_output_1.npy"],
        1,
    );
}

#[test]
fn mtcnn_pnet_crops_match_reference() {
    check(
        "mtcnn/pnet.onnx",
        "mtcnn/pnet12_input.npy",
        &[
            "mtcnn/pnet12_ref_output_0.npy",
            "mtcnn/pnet12_ref_output_1.npy",
        ],
        200,
    );
}

#[test]
fn mtcnn_rnet_matches_reference() {
    check(
        "mtcnn/rnet.onnx",
        "mtcnn/rnet_input.npy",
        &["mtcnn/rnet_ref_output_0.npy", "mtcnn/rnet_ref_output_1.npy"],
        200,
    );
}

#[test]
fn mtcnn_onet_matches_reference() {
    check(
        "mtcnn/onet.onnx",
        "mtcnn/onet_input.npy",
        &[
            "mtcnn/onet_ref_output_0.npy",
            "mtcnn/onet_ref_output_1.npy",
            "mtcnn/onet_ref_output_2.npy",
        ],
        200,
    );
}

#[test]
fn ppocr_cls_matches_reference() {
    // 32 of the 128 crops keep the dev-profile test fast; the CLI runs all of them.
    check(
        "ppocr-cls/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "ppocr-cls/cls_input.npy",
        &["ppocr-cls/cls_ref_output.npy"],
        32,
    );
}

/// `execute` fuses Conv+Relu pairs; `execute_with` (an observer can see the Conv output)
/// does not. Both must give the same bits on a real conv net (the committed LeNet).
#[test]
fn fused_conv_relu_equals_unfused() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/lenet.onnx");
    let graph = load_model(&path).expect("lenet loads");
    let n = 5;
    let x: Vec<f32> = (0..n * 784)
        .map(|i| ((i * 37) % 256) as f32 / 255.0)
        .collect();
    let x = quantkit_graph::Tensor::from_f32(&[n, 1, 28, 28], x);
    let name = graph.inputs[0].name.clone();
    let fused = execute(&graph, vec![(name.clone(), x.clone())]).unwrap();
    let mut seen = 0;
    let plain = quantkit_graph::execute_with(&graph, vec![(name, x)], |_, _| seen += 1).unwrap();
    assert!(seen > graph.nodes.len(), "the observer saw every value");
    assert_eq!(fused.len(), plain.len());
    for ((_, a), (_, b)) in fused.iter().zip(&plain) {
        let (a, b) = (a.as_f32().unwrap(), b.as_f32().unwrap());
        assert!(a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()));
    }
}
