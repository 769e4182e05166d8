//! QOperator output: the committed LeNet quantized on the committed sample runs in ONNX
//! Runtime and in quantkit's executor and agrees with the QDQ model; a model with every
//! op the pass rewrites gets the QLinear contrib ops ONNX Runtime's quantizer writes.

mod common;

use common::*;
use quantkit_graph::{AttrValue, DType, Graph, Node, Tensor, ValueInfo};
use quantkit_ptq::{quantize_static, to_qoperator, Format, PtqConfig};

fn count(g: &Graph, op: &str) -> usize {
    g.nodes.iter().filter(|n| n.op_type == op).count()
}

#[test]
fn lenet_qoperator_runs_in_ort_and_quantkit_and_agrees_with_qdq() {
    let g = quantkit_graph::load_model(repo().join("models/lenet.onnx")).unwrap();
    let (qdq, _) =
        quantize_static(g, &mut sample_data(), &PtqConfig::default(), &mut |_, _| {}).unwrap();
    let (qop, r) = to_qoperator(qdq.clone()).unwrap();
    // Layout: everything integer between one QuantizeLinear and one DequantizeLinear.
    assert_eq!(count(&qop, "QLinearConv"), 2);
    assert_eq!(count(&qop, "QGemm"), 2);
    assert_eq!(count(&qop, "MaxPool"), 2);
    assert_eq!(count(&qop, "QuantizeLinear"), 1);
    assert_eq!(count(&qop, "DequantizeLinear"), 1);
    for op in ["Conv", "Gemm", "Relu"] {
        assert_eq!(count(&qop, op), 0, "{op} left");
    }
    assert_eq!(r.fused_into_range.len(), 3);
    assert_eq!(r.direct.len(), 3);
    let names: Vec<&str> = r.left_float.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["normalize.sub", "normalize"]);
    assert!(qop
        .opset_imports
        .contains(&("com.microsoft".to_string(), 1)));
    let qg = qop.nodes.iter().find(|n| n.op_type == "QGemm").unwrap();
    assert_eq!(qg.domain, "com.microsoft");
    assert_eq!(qop.initializers[&qg.inputs[6]].dtype, DType::I32);

    let dir = scratch("qop-lenet");
    let (pq, pd) = (dir.join("lenet.qop.onnx"), dir.join("lenet.qdq.onnx"));
    quantkit_graph::save_model(&qop, &pq).unwrap();
    quantkit_graph::save_model(&qdq, &pd).unwrap();
    let qop = quantkit_graph::load_model(&pq).unwrap();
    // quantkit's executor runs the QOperator file (exact integer QLinearConv/QGemm).
    let x = sample_batch(1000);
    let few = Tensor::from_f32(&[200, 1, 28, 28], x.to_f32_vec()[..200 * 784].to_vec());
    let ours = run(&qop, "input", &few).to_f32_vec();
    let ours_qdq = run(&qdq, "input", &few).to_f32_vec();
    let a = agreement(&argmax_rows(&ours, 10), &argmax_rows(&ours_qdq, 10));
    eprintln!("quantkit: QOperator vs QDQ top-1 agreement {a:.4} on 200 images");
    assert!(a >= 0.99, "quantkit QOperator vs QDQ agreement {a}");
    if !have_ort() {
        return;
    }
    let yq = run_ort(&pq, "input", &x);
    let yd = run_ort(&pd, "input", &x);
    let a = agreement(&argmax_rows(&yq, 10), &argmax_rows(&yd, 10));
    let d = max_abs_diff(&yq, &yd);
    eprintln!("ORT: QOperator vs QDQ top-1 agreement {a:.4} on 1000 images, max |logit diff| {d}");
    assert!(a >= 0.995, "ORT QOperator vs QDQ agreement {a}");
    // quantkit's exact integer QOperator execution against the QDQ model as ORT runs it
    // node by node (float-exact Q/DQ): the same function up to the one rounding that
    // MaxPool/Flatten skip. (ORT's own int8 kernels are not the reference here: on AVX2
    // without VNNI its u8×s8 kernels saturate 16-bit pair sums, ONNX Runtime's documented
    // U8S8 caveat, so it differs from any exact implementation.)
    let plain = run_ort_with(&pd, "input", &few, false);
    let a = agreement(&argmax_rows(&ours, 10), &argmax_rows(&plain, 10));
    let out_scale = qop.initializers["output_scale"].to_f32_vec()[0];
    let d = max_abs_diff(&ours, &plain);
    eprintln!(
        "quantkit QOperator vs ORT QDQ (no fusion): agreement {a:.4}, max |diff| {d} ({:.1} output steps)",
        d / out_scale
    );
    assert!(a >= 0.995, "quantkit QOperator vs ORT QDQ: {a}");
    let yq200 = &yq[..200 * 10];
    let a = agreement(&argmax_rows(&ours, 10), &argmax_rows(yq200, 10));
    eprintln!("quantkit vs ORT on the QOperator file: agreement {a:.4}");
    assert!(a >= 0.97, "quantkit vs ORT on the QOperator model: {a}");
    std::fs::remove_dir_all(&dir).ok();
}

fn rand_vec(n: usize, a: f32, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a
        })
        .collect()
}

/// Two convs → Add → (Sigmoid ‖ LeakyRelu) → Concat → AveragePool → Relu →
/// GlobalAveragePool → Reshape → MatMul(8→10) on [N, 1, 28, 28].
fn mixed_model() -> Graph {
    let mut g = graph_28x28("mixed");
    g.outputs.push(ValueInfo::new("y", DType::F32, &[1, 10]));
    g.outputs[0].shape.as_mut().unwrap()[0] = quantkit_graph::Dim::Symbolic("N".into());
    let mut init = |name: &str, shape: &[usize], v: Vec<f32>| {
        g.initializers
            .insert(name.into(), Tensor::from_f32(shape, v));
    };
    init("wa", &[4, 1, 3, 3], rand_vec(36, 0.8, 1));
    init("ba", &[4], rand_vec(4, 0.1, 2));
    init("wb", &[4, 1, 3, 3], rand_vec(36, 0.8, 3));
    init("wm", &[8, 10], rand_vec(80, 2.0, 4));
    g.initializers.insert(
        "shape".into(),
        Tensor::new(vec![2], quantkit_graph::Data::I64(vec![0, 8])).unwrap(),
    );
    let pads = AttrValue::Ints(vec![1, 1, 1, 1]);
    g.nodes = vec![
        Node::new("conv_a", "Conv", &["x", "wa", "ba"], &["ca"]).with_attr("pads", pads.clone()),
        Node::new("relu_a", "Relu", &["ca"], &["ra"]),
        Node::new("conv_b", "Conv", &["x", "wb"], &["cb"]).with_attr("pads", pads),
        Node::new("add", "Add", &["ra", "cb"], &["s"]),
        Node::new("sig", "Sigmoid", &["s"], &["t"]),
        Node::new("leaky", "LeakyRelu", &["s"], &["l"]).with_attr("alpha", AttrValue::Float(0.1)),
        Node::new("cat", "Concat", &["t", "l"], &["c"]).with_attr("axis", AttrValue::Int(1)),
        Node::new("avg", "AveragePool", &["c"], &["p"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![2, 2]))
            .with_attr("strides", AttrValue::Ints(vec![2, 2])),
        Node::new("relu_p", "Relu", &["p"], &["rp"]),
        Node::new("gap", "GlobalAveragePool", &["rp"], &["gp"]),
        Node::new("reshape", "Reshape", &["gp", "shape"], &["f"]),
        Node::new("mm", "MatMul", &["f", "wm"], &["y"]),
    ];
    g
}

#[test]
fn every_rewritten_op_gets_ort_qlinear_form_and_runs_in_ort() {
    let config = PtqConfig {
        format: Format::QOperator,
        calib_samples: Some(200),
        ..Default::default()
    };
    let (q, s) =
        quantize_static(mixed_model(), &mut sample_data(), &config, &mut |_, _| {}).unwrap();
    assert_eq!(s.format, "qoperator");
    let r = s.qoperator.as_ref().unwrap();
    let got: Vec<(&str, &str)> = r
        .converted
        .iter()
        .map(|(n, _, to)| (n.as_str(), to.as_str()))
        .collect();
    for want in [
        ("conv_a", "QLinearConv"),
        ("conv_b", "QLinearConv"),
        ("add", "QLinearAdd"),
        ("sig", "QLinearSigmoid"),
        ("leaky", "QLinearLeakyRelu"),
        ("cat", "QLinearConcat"),
        ("avg", "QLinearAveragePool"),
        ("gap", "QLinearGlobalAveragePool"),
        ("mm", "QLinearMatMul"),
    ] {
        assert!(got.contains(&want), "{want:?} not in {got:?}");
    }
    assert_eq!(r.direct, [("reshape".to_string(), "Reshape".to_string())]);
    assert_eq!(
        r.fused_into_range,
        [("conv_a".to_string(), "relu_a".to_string())]
    );
    // A Relu on its own has no QOperator form: it stays float between DQ and Q.
    let relu = r.left_float.iter().find(|f| f.name == "relu_p").unwrap();
    assert!(relu.reason.contains("no QOperator form"), "{}", relu.reason);
    let rp = q.nodes.iter().find(|n| n.name == "relu_p").unwrap();
    let prod = q
        .nodes
        .iter()
        .find(|n| n.outputs[0] == rp.inputs[0])
        .unwrap();
    assert_eq!(prod.op_type, "DequantizeLinear");
    let cons = q
        .nodes
        .iter()
        .find(|n| n.inputs.contains(&rp.outputs[0]))
        .unwrap();
    assert_eq!(cons.op_type, "QuantizeLinear");
    for n in q.nodes.iter().filter(|n| {
        n.op_type.starts_with("QLinear")
            && n.op_type != "QLinearConv"
            && n.op_type != "QLinearMatMul"
    }) {
        assert_eq!(n.domain, "com.microsoft", "{}", n.op_type);
    }
    // quantkit's executor runs every one of them (com.microsoft ops of the graph crate)
    // and agrees with the QDQ model it was rewritten from.
    let x = sample_batch(300);
    let qdq_q = quantize_static(
        mixed_model(),
        &mut sample_data(),
        &PtqConfig {
            calib_samples: Some(200),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap()
    .0;
    let (ours, ours_qdq) = (
        run(&q, "x", &x).to_f32_vec(),
        run(&qdq_q, "x", &x).to_f32_vec(),
    );
    let a = agreement(&argmax_rows(&ours, 10), &argmax_rows(&ours_qdq, 10));
    eprintln!("mixed model in quantkit: QOperator vs QDQ top-1 agreement {a:.4}");
    assert!(a >= 0.95, "quantkit QOperator vs QDQ agreement {a}");
    if !have_ort() {
        return;
    }
    let dir = scratch("qop-mixed");
    let (pq, pf) = (dir.join("mixed.qop.onnx"), dir.join("mixed.float.onnx"));
    quantkit_graph::save_model(&q, &pq).unwrap();
    quantkit_graph::save_model(&mixed_model(), &pf).unwrap();
    let (qdq, _) = quantize_static(
        mixed_model(),
        &mut sample_data(),
        &PtqConfig {
            calib_samples: Some(200),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    let pd = dir.join("mixed.qdq.onnx");
    quantkit_graph::save_model(&qdq, &pd).unwrap();
    let (yq, yd, yf) = (
        run_ort(&pq, "x", &x),
        run_ort(&pd, "x", &x),
        run_ort(&pf, "x", &x),
    );
    let a = agreement(&argmax_rows(&yq, 10), &argmax_rows(&yd, 10));
    let (cq, cd) = (cosine(&yq, &yf), cosine(&yd, &yf));
    eprintln!("mixed model in ORT: QOperator vs QDQ top-1 agreement {a:.4}; cosine to float: QOperator {cq:.5}, QDQ {cd:.5}");
    assert!(a >= 0.95, "agreement {a}");
    assert!(cq >= 0.99 && cq >= cd - 0.01, "cosine {cq} (QDQ {cd})");
    let b = agreement(&argmax_rows(&ours, 10), &argmax_rows(&yq, 10));
    eprintln!("mixed model: quantkit vs ORT on the QOperator file, top-1 agreement {b:.4}");
    assert!(b >= 0.95, "quantkit vs ORT on the QOperator file {b}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Conv → Clip(lo, 6) → Conv → Flatten: y [N, 4·24·24].
fn clip_model(lo: f32) -> Graph {
    let mut g = graph_28x28("clip");
    g.outputs
        .push(ValueInfo::new("y", DType::F32, &[1, 4 * 24 * 24]));
    g.outputs[0].shape.as_mut().unwrap()[0] = quantkit_graph::Dim::Symbolic("N".into());
    let mut init = |name: &str, shape: &[usize], v: Vec<f32>| {
        g.initializers
            .insert(name.into(), Tensor::from_f32(shape, v));
    };
    init("w1", &[4, 1, 3, 3], rand_vec(36, 2.0, 11));
    init("b1", &[4], rand_vec(4, 1.0, 12));
    init("w2", &[4, 4, 3, 3], rand_vec(144, 0.5, 13));
    init("lo", &[], vec![lo]);
    init("hi", &[], vec![6.0]);
    g.nodes = vec![
        Node::new("conv1", "Conv", &["x", "w1", "b1"], &["c1"]),
        Node::new("clip", "Clip", &["c1", "lo", "hi"], &["r1"]),
        Node::new("conv2", "Conv", &["r1", "w2"], &["c2"]),
        Node::new("flat", "Flatten", &["c2"], &["y"]),
    ];
    g
}

/// Regression: a Clip whose lower bound is above the calibrated range's zero point cannot
/// vanish into the output range (the range [0, 6] also holds values in [0, 1)); it stays
/// float, and both variants compute what the QDQ model computes.
#[test]
fn fused_clip_disappears_only_when_the_output_range_reproduces_it() {
    let x = sample_batch(50);
    for (lo, fused) in [(0.0, true), (1.0, false)] {
        let (qdq, _) = quantize_static(
            clip_model(lo),
            &mut sample_data(),
            &PtqConfig {
                calib_samples: Some(100),
                ..Default::default()
            },
            &mut |_, _| {},
        )
        .unwrap();
        let (qop, r) = to_qoperator(qdq.clone()).unwrap();
        let conv1 = r.converted.iter().any(|(n, _, _)| n == "conv1");
        assert_eq!(conv1, fused, "Clip({lo}, 6): {r:?}");
        assert_eq!(count(&qop, "Clip"), usize::from(!fused));
        assert!(r.converted.iter().any(|(n, _, _)| n == "conv2"));
        if !fused {
            let f = r.left_float.iter().find(|f| f.name == "conv1").unwrap();
            assert!(f.reason.contains("clips to"), "{}", f.reason);
        }
        let (a, b) = (
            run(&qdq, "x", &x).to_f32_vec(),
            run(&qop, "x", &x).to_f32_vec(),
        );
        let c = cosine(&a, &b);
        assert!(c > 0.9999, "Clip({lo}, 6): QOperator vs QDQ cosine {c}");
    }
}

/// Flatten → MatMul(784→32) → Relu → MatMul(32→10): per-channel MatMul weights become
/// per-column QLinearMatMul, which both quantkit's executor and ONNX Runtime run.
#[test]
fn matmul_mlp_runs_per_column_qlinear_matmul_in_quantkit_and_ort() {
    let mut g = graph_28x28("mlp");
    g.outputs.push(ValueInfo::new("y", DType::F32, &[1, 10]));
    g.outputs[0].shape.as_mut().unwrap()[0] = quantkit_graph::Dim::Symbolic("N".into());
    g.initializers.insert(
        "w1".into(),
        Tensor::from_f32(&[784, 32], rand_vec(784 * 32, 0.1, 21)),
    );
    g.initializers.insert(
        "w2".into(),
        Tensor::from_f32(&[32, 10], rand_vec(320, 0.5, 22)),
    );
    g.nodes = vec![
        Node::new("flat", "Flatten", &["x"], &["f"]),
        Node::new("mm1", "MatMul", &["f", "w1"], &["h"]),
        Node::new("relu", "Relu", &["h"], &["r"]),
        Node::new("mm2", "MatMul", &["r", "w2"], &["y"]),
    ];
    let (qdq, _) = quantize_static(
        g,
        &mut sample_data(),
        &PtqConfig {
            calib_samples: Some(200),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    let (qop, r) = to_qoperator(qdq.clone()).unwrap();
    assert_eq!(count(&qop, "QLinearMatMul"), 2);
    assert_eq!(
        r.fused_into_range,
        [("mm1".to_string(), "relu".to_string())]
    );
    let mm = qop.nodes.iter().find(|n| n.name == "mm1").unwrap();
    assert_eq!(qop.initializers[&mm.inputs[4]].shape, [32]);
    let x = sample_batch(300);
    let (yd, yq) = (
        run(&qdq, "x", &x).to_f32_vec(),
        run(&qop, "x", &x).to_f32_vec(),
    );
    let a = agreement(&argmax_rows(&yd, 10), &argmax_rows(&yq, 10));
    eprintln!(
        "MLP quantkit: QOperator vs QDQ agreement {a:.4}, max |diff| {}",
        max_abs_diff(&yd, &yq)
    );
    assert!(a >= 0.995, "{a}");
    if !have_ort() {
        return;
    }
    let dir = scratch("qop-mlp");
    let (p, pd) = (dir.join("mlp.qop.onnx"), dir.join("mlp.qdq.onnx"));
    quantkit_graph::save_model(&qop, &p).unwrap();
    quantkit_graph::save_model(&qdq, &pd).unwrap();
    let (yo, yod) = (run_ort(&p, "x", &x), run_ort(&pd, "x", &x));
    let a = agreement(&argmax_rows(&yo, 10), &argmax_rows(&yod, 10));
    let b = agreement(&argmax_rows(&yq, 10), &argmax_rows(&yo, 10));
    eprintln!("MLP in ORT: QOperator vs QDQ agreement {a:.4}; quantkit vs ORT on the QOperator file {b:.4}");
    assert!(a >= 0.995, "ORT QOperator vs QDQ {a}");
    // Raw pixels reach u8 255 and weights ±127 over K = 784: ORT's AVX2 (non-VNNI) u8×s8
    // kernel saturates 16-bit pair sums (its output equals that saturating model exactly,
    // checked in numpy), so only a loose bound holds against the exact executor.
    assert!(b >= 0.9, "quantkit vs ORT {b}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The zoo's ResNet-8 (residual `QLinearAdd`, `QLinearGlobalAveragePool`) and MobileNet
/// (`QLinearGlobalAveragePool`; HardSwish stays float between DQ and Q) in QOperator form,
/// calibrated on 100 sample images, run in quantkit's executor and on the integer engine
/// (the contrib ops as graph-op float islands), and agree in top-1 with the float model on
/// 64 images.
#[test]
fn zoo_resnet8_and_mobilenet_qoperator_run_in_the_executor_and_the_engine() {
    let x = sample_batch(64);
    for model in ["resnet8", "mobilenet"] {
        let g = quantkit_graph::load_model(repo().join(format!("models/{model}.onnx"))).unwrap();
        let input = g.inputs[0].name.clone();
        let float = run(&g, &input, &x).to_f32_vec();
        let config = PtqConfig {
            format: Format::QOperator,
            calib_samples: Some(100),
            ..Default::default()
        };
        let (q, s) = quantize_static(g, &mut sample_data(), &config, &mut |_, _| {}).unwrap();
        let r = s.qoperator.as_ref().unwrap();
        let contrib: Vec<&str> = q
            .nodes
            .iter()
            .filter(|n| n.domain == "com.microsoft")
            .map(|n| n.op_type.as_str())
            .collect();
        assert!(
            contrib.contains(&"QLinearGlobalAveragePool"),
            "{model}: {contrib:?}"
        );
        if model == "resnet8" {
            assert!(contrib.contains(&"QLinearAdd"), "{model}: {contrib:?}");
        }
        eprintln!(
            "{model}: {} nodes converted, contrib ops {contrib:?}",
            r.converted.len()
        );
        let top = argmax_rows(&float, 10);
        let ours = run(&q, &input, &x).to_f32_vec();
        let a = agreement(&top, &argmax_rows(&ours, 10));
        let plan = quantkit_engine::compile(&q, &quantkit_engine::EngineOptions::default())
            .unwrap_or_else(|e| panic!("{model}: the engine rejects the QOperator model: {e}"));
        let islands: Vec<String> = plan
            .report()
            .iter()
            .filter(|n| !n.is_integer() && contrib.iter().any(|&c| c == n.op_type))
            .map(|n| n.op_type.clone())
            .collect();
        let eng = plan.run(vec![(input.as_str(), x.clone())]).unwrap()[0]
            .1
            .to_f32_vec();
        let b = agreement(&top, &argmax_rows(&eng, 10));
        let c = agreement(&argmax_rows(&ours, 10), &argmax_rows(&eng, 10));
        eprintln!(
            "{model} QOperator top-1 agreement with float on 64 images: executor {a:.4}, \
             engine {b:.4} (executor vs engine {c:.4}); engine float islands {islands:?}"
        );
        assert!(a >= 0.95, "{model}: executor vs float {a}");
        assert!(b >= 0.95, "{model}: engine vs float {b}");
    }
}
