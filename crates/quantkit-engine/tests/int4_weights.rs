//! 4-bit weights stored as ONNX int4 initializers (opset 21): the committed LeNet quantized
//! at W4A8 by PTQ, its weights re-tagged int4 by `quantkit_ptq::store_weights_int4`, written
//! and read back through the ONNX writer/reader (two codes per byte), compiles on the engine
//! and gives bit for bit the outputs of the same model with int8 storage, in a smaller file.
//! A truncated int4 payload is an error naming the tensor.

use std::path::PathBuf;

use quantkit_graph::{DType, Graph, OpKind, Tensor};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn lenet_w4() -> (Graph, Tensor) {
    let mut float = quantkit_graph::load_model(root().join("models/lenet.onnx")).unwrap();
    quantkit_ptq::prepare(&mut float).unwrap();
    let opts = quantkit_data::OpenOptions::default();
    let mut calib =
        quantkit_data::open_data(root().join("data/fashion-mnist-sample"), &opts).unwrap();
    let mut cfg = quantkit_ptq::PtqConfig {
        calib_samples: Some(128),
        ..Default::default()
    };
    cfg.qdq.weight_bits = 4;
    let (q, _) = quantkit_ptq::quantize_static(float, &mut calib, &cfg, &mut |_, _| {}).unwrap();
    let b = calib
        .batches(&quantkit_data::BatchOptions {
            batch_size: 200,
            limit: Some(200),
            ..Default::default()
        })
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    (q, Tensor::from_f32(&b.shape, b.data))
}

#[test]
fn int4_weights_round_trip_and_run_like_int8() {
    let (q8, x) = lenet_w4();
    let mut q4 = q8.clone();
    let n = quantkit_ptq::store_weights_int4(&mut q4).unwrap();
    assert_eq!(n, 4, "conv1, conv2, fc1, fc2");
    assert_eq!(q4.opset(), 21);

    let bytes = |g: &Graph, tag: &str| {
        let p =
            std::env::temp_dir().join(format!("quantkit-int4-{}-{tag}.onnx", std::process::id()));
        quantkit_graph::save_model(g, &p).unwrap();
        let b = std::fs::read(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        b
    };
    let (bytes8, bytes4) = (bytes(&q8, "8"), bytes(&q4, "4"));
    let p4 = quantkit_graph::onnx::decode_model(&bytes4, "lenet.w4").unwrap();
    eprintln!(
        "LeNet W4A8: {} bytes with int8 weight codes, {} with int4",
        bytes8.len(),
        bytes4.len()
    );
    assert!(
        bytes4.len() * 10 < bytes8.len() * 6,
        "int4 storage should take well under 60 % of the int8 file: {} vs {}",
        bytes4.len(),
        bytes8.len()
    );
    let back = quantkit_graph::import_model(&p4, "lenet.w4").unwrap();
    let weights: Vec<&Tensor> = back
        .nodes
        .iter()
        .filter(|n| n.is(OpKind::DequantizeLinear))
        .filter_map(|n| back.initializers.get(&n.inputs[0]))
        .filter(|t| t.dtype == DType::I4)
        .collect();
    assert_eq!(weights.len(), 4, "the int4 initializers survive the file");
    for (name, t) in &q4.initializers {
        assert_eq!(&back.initializers[name], t, "`{name}` read back");
    }

    let input = q8.inputs[0].name.clone();
    let run = |g: &Graph| {
        let plan = quantkit_engine::compile(g, &Default::default()).unwrap();
        plan.run(vec![(input.as_str(), x.clone())])
            .unwrap()
            .remove(0)
            .1
            .to_f32_vec()
    };
    let (y8, y4) = (run(&q8), run(&back));
    assert_eq!(
        y8, y4,
        "int4 and int8 storage of the same codes run the same"
    );
    // And the engine ran the int4 layers as integer steps, not float islands.
    let plan = quantkit_engine::compile(&back, &Default::default()).unwrap();
    for r in plan.report() {
        if matches!(r.op_type.as_str(), "Conv" | "Gemm" | "MatMul") {
            assert!(r.is_integer(), "{r:?}");
        }
    }
}

#[test]
fn truncated_int4_payload_names_the_tensor() {
    let (mut q, _) = lenet_w4();
    quantkit_ptq::store_weights_int4(&mut q).unwrap();
    let mut p = quantkit_graph::export_model(&q);
    // (The writer puts 4-bit payloads in raw_data.)
    let graph = p.graph.as_mut().unwrap();
    let t = graph
        .initializer
        .iter_mut()
        .find(|t| t.data_type == Some(quantkit_graph::onnx::proto::data_type::INT4))
        .expect("an int4 initializer");
    let name = t.name.clone().unwrap();
    let raw = t.raw_data.as_mut().expect("raw int4 payload");
    raw.pop();
    match quantkit_graph::import_model(&p, "truncated") {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(&name), "{msg}");
            assert!(msg.contains("4-bit"), "{msg}");
        }
        Ok(_) => panic!("a truncated int4 payload was accepted"),
    }
}
