//! ONNX protobuf round trips and the bad-input errors of issue 5.

mod common;

use prost::Message;
use quantkit_graph::onnx::{decode_model, export_model, import_model, proto};
use quantkit_graph::{execute, AttrValue, Graph, GraphError, Node, OpError, Tensor, ValueInfo};
use quantkit_graph::{DType, Result};

const MODELS: &[&str] = &[
    "mtcnn/pnet.onnx",
    "mtcnn/rnet.onnx",
    "mtcnn/onet.onnx",
    "ppocr-cls/ch_ppocr_mobile_v2.0_cls_infer.onnx",
];

#[test]
fn protobuf_round_trip_is_byte_exact_on_shared_models() {
    let Some(dir) = common::shared("models") else {
        return;
    };
    for m in MODELS {
        let bytes = std::fs::read(dir.join(m)).unwrap();
        let model = decode_model(&bytes, m).unwrap();
        assert_eq!(
            model.encode_to_vec(),
            bytes,
            "{m}: decode→encode changed bytes"
        );
    }
}

#[test]
fn protobuf_round_trip_is_byte_exact_on_conformance_models() {
    let Some(dir) = common::shared("conformance/onnx-node") else {
        return;
    };
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path().join("model.onnx");
        if let Ok(bytes) = std::fs::read(&p) {
            let model = decode_model(&bytes, "x").unwrap();
            assert_eq!(model.encode_to_vec(), bytes, "{}", p.display());
            n += 1;
        }
    }
    assert!(n > 100);
}

#[test]
fn export_then_import_preserves_graph() {
    let Some(dir) = common::shared("models") else {
        return;
    };
    for m in MODELS {
        let g = quantkit_graph::load_model(dir.join(m)).unwrap();
        let bytes = export_model(&g).encode_to_vec();
        let g2 = import_model(&decode_model(&bytes, m).unwrap(), m).unwrap();
        assert_eq!(g.nodes, g2.nodes, "{m}");
        assert_eq!(g.initializers, g2.initializers, "{m}");
        assert_eq!(g.inputs, g2.inputs, "{m}");
        assert_eq!(g.outputs, g2.outputs, "{m}");
        assert_eq!(g.opset_imports, g2.opset_imports, "{m}");
        assert_eq!(g.meta, g2.meta, "{m}");
    }
}

#[test]
fn ppocr_constants_become_initializers() {
    let Some(dir) = common::shared("models") else {
        return;
    };
    let g = quantkit_graph::load_model(dir.join(MODELS[3])).unwrap();
    assert!(g.nodes.iter().all(|n| n.op_type != "Constant"));
    // 133,700 float weights (the README's 133,777 also counts 77 int64 shape constants,
    // most of which constant folding removes).
    let floats: usize = g
        .initializers
        .values()
        .filter(|t| t.dtype == DType::F32)
        .map(Tensor::len)
        .sum();
    assert_eq!(floats, 133_700);
    assert_eq!(g.opset(), 11);
}

#[test]
fn truncated_protobuf_is_a_decode_error() {
    let Some(dir) = common::shared("models") else {
        return;
    };
    let bytes = std::fs::read(dir.join(MODELS[0])).unwrap();
    for cut in [bytes.len() / 2, bytes.len() - 1, 7] {
        match decode_model(&bytes[..cut], "pnet.onnx") {
            Err(GraphError::Decode { what, .. }) => assert_eq!(what, "pnet.onnx"),
            other => panic!("cut at {cut}: expected a decode error, got {other:?}"),
        }
    }
    let garbage: Vec<u8> = (0..200u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    assert!(decode_model(&garbage, "garbage").is_err());
}

fn tiny(nodes: Vec<Node>, inits: &[(&str, Tensor)]) -> Result<Graph> {
    let mut g = Graph {
        inputs: vec![ValueInfo::new("x", DType::F32, &[2, 3])],
        outputs: vec![ValueInfo::new("y", DType::F32, &[2, 3])],
        opset_imports: vec![(String::new(), 17)],
        nodes,
        ..Graph::default()
    };
    for (k, t) in inits {
        g.initializers.insert(k.to_string(), t.clone());
    }
    let bytes = export_model(&g).encode_to_vec();
    import_model(&decode_model(&bytes, "tiny").unwrap(), "tiny")
}

#[test]
fn missing_initializer_names_node_and_value() {
    let err = tiny(vec![Node::new("add0", "Add", &["x", "w"], &["y"])], &[]).unwrap_err();
    match err {
        GraphError::MissingValue {
            node,
            op_type,
            value,
        } => {
            assert_eq!(
                (node.as_str(), op_type.as_str(), value.as_str()),
                ("add0", "Add", "w")
            )
        }
        e => panic!("{e}"),
    }
}

#[test]
fn unknown_op_names_node_op_and_domain() {
    let mut n = Node::new("weird0", "FancyOp", &["x"], &["y"]);
    n.domain = "com.example".into();
    let g = tiny(vec![n], &[]).unwrap();
    let x = Tensor::from_f32(&[2, 3], vec![0.0; 6]);
    let err = execute(&g, vec![("x".into(), x)]).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, GraphError::UnknownOp { .. }));
    assert!(
        msg.contains("weird0") && msg.contains("FancyOp") && msg.contains("com.example"),
        "{msg}"
    );
}

#[test]
fn shape_mismatch_is_an_op_error_naming_the_node() {
    let w = Tensor::from_f32(&[4], vec![1.0; 4]);
    let g = tiny(
        vec![Node::new("add0", "Add", &["x", "w"], &["y"])],
        &[("w", w)],
    )
    .unwrap();
    let err = execute(
        &g,
        vec![("x".into(), Tensor::from_f32(&[2, 3], vec![0.0; 6]))],
    )
    .unwrap_err();
    match &err {
        GraphError::Op {
            node,
            source: OpError::ShapeMismatch { .. },
            ..
        } => assert_eq!(node, "add0"),
        e => panic!("{e}"),
    }
    let w = Tensor::from_f32(&[4, 1], vec![1.0; 4]);
    let g = tiny(
        vec![Node::new("mm", "MatMul", &["x", "w"], &["y"])],
        &[("w", w)],
    )
    .unwrap();
    let err = execute(
        &g,
        vec![("x".into(), Tensor::from_f32(&[2, 3], vec![0.0; 6]))],
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            GraphError::Op {
                source: OpError::ShapeMismatch { .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn wrong_input_name_dtype_or_shape_is_rejected() {
    let g = tiny(vec![Node::new("r", "Relu", &["x"], &["y"])], &[]).unwrap();
    let ok = Tensor::from_f32(&[2, 3], vec![-1.0, 2.0, -3.0, 4.0, 0.0, 1.0]);
    let y = execute(&g, vec![("x".into(), ok.clone())]).unwrap();
    assert_eq!(y[0].1.as_f32().unwrap(), &[0.0, 2.0, 0.0, 4.0, 0.0, 1.0]);
    assert!(matches!(
        execute(&g, vec![("z".into(), ok.clone())]),
        Err(GraphError::UnknownInput { .. })
    ));
    assert!(matches!(
        execute(&g, vec![]),
        Err(GraphError::MissingInput { .. })
    ));
    let bad_dtype = ok.cast(DType::F64);
    assert!(matches!(
        execute(&g, vec![("x".into(), bad_dtype)]),
        Err(GraphError::InputMismatch { .. })
    ));
    let bad_shape = Tensor::from_f32(&[3, 2], vec![0.0; 6]);
    assert!(matches!(
        execute(&g, vec![("x".into(), bad_shape)]),
        Err(GraphError::InputMismatch { .. })
    ));
}

#[test]
fn observer_sees_every_value() {
    let g = tiny(
        vec![
            Node::new("r", "Relu", &["x"], &["h"]),
            Node::new("n", "NotAnOperator", &["h"], &["y"]).with_attr("unused", AttrValue::Int(0)),
        ],
        &[],
    )
    .unwrap();
    // An unknown operator (not one ONNX might add: the suite grows) fails the plan before
    // anything runs, so nothing is observed.
    let mut seen = Vec::new();
    let x = Tensor::from_f32(&[2, 3], vec![1.0; 6]);
    assert!(
        quantkit_graph::execute_with(&g, vec![("x".into(), x.clone())], |n, _| seen
            .push(n.to_string()))
        .is_err()
    );
    assert!(seen.is_empty());
    let g = tiny(
        vec![
            Node::new("r", "Relu", &["x"], &["h"]),
            Node::new("s", "Sigmoid", &["h"], &["y"]),
        ],
        &[],
    )
    .unwrap();
    quantkit_graph::execute_with(&g, vec![("x".into(), x)], |n, _| seen.push(n.to_string()))
        .unwrap();
    assert_eq!(seen, ["x", "h", "y"]);
}

#[test]
fn corrupt_tensor_payload_names_the_tensor() {
    let t = proto::TensorProto {
        name: Some("w".into()),
        dims: vec![2, 2],
        data_type: Some(1),
        raw_data: Some(vec![0; 7]),
        ..Default::default()
    };
    match quantkit_graph::onnx::tensor_from_proto(&t) {
        Err(GraphError::InvalidTensor { tensor, .. }) => assert_eq!(tensor, "w"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn constant_shape_arithmetic_is_folded() {
    // Shape(x) → Reshape(x, shape) with x of static shape: Shape folds into an initializer.
    let g = tiny(
        vec![
            Node::new("s", "Shape", &["x"], &["sh"]),
            Node::new("r", "Reshape", &["x", "sh"], &["y"]),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(g.nodes.len(), 1);
    assert_eq!(g.initializers["sh"].as_i64().unwrap(), &[2, 3]);
    assert_eq!(g.value_info["y"].static_shape(), Some(vec![2, 3]));
}

/// A value declared without a type (as some exporters leave `If` branch outputs) is written
/// without one, not with element type 0, which ONNX Runtime refuses ("Invalid tensor data
/// type 0"); reading it back gives the same untyped value.
#[test]
fn an_untyped_value_is_written_without_a_type() {
    let untyped = ValueInfo {
        name: "y".into(),
        dtype: None,
        onnx_elem_type: 0,
        shape: None,
    };
    let g = Graph {
        inputs: vec![ValueInfo::new("x", DType::F32, &[2, 3])],
        outputs: vec![untyped.clone()],
        opset_imports: vec![(String::new(), 17)],
        nodes: vec![Node::new("r", "Relu", &["x"], &["y"])],
        ..Graph::default()
    };
    let m = export_model(&g);
    let out = &m.graph.as_ref().unwrap().output[0];
    assert!(out.r#type.is_none(), "{out:?}");
    let g2 = import_model(
        &decode_model(&m.encode_to_vec(), "untyped").unwrap(),
        "untyped",
    )
    .unwrap();
    assert_eq!(g2.outputs, vec![untyped]);
    // A typed value keeps its type.
    let typed = export_model(&Graph {
        outputs: vec![ValueInfo::new("y", DType::F32, &[2, 3])],
        ..g
    });
    let t = typed.graph.as_ref().unwrap().output[0]
        .r#type
        .as_ref()
        .unwrap();
    assert!(matches!(
        &t.value,
        Some(proto::type_proto::Value::TensorType(tt)) if tt.elem_type == Some(1)
    ));
}
