//! Dynamic quantization (ONNX Runtime's `quantize_dynamic` layout, written by
//! `quantkit_ptq::quantize_dynamic`): the engine's fused dynamic step against the float
//! executor running the same graph node by node. The step repeats the graph's f32
//! arithmetic in the same order (DynamicQuantizeLinear, exact i32 accumulation, Cast, Mul by
//! `x_scale · w_scale`, Add bias), so the outputs are asserted bit for bit equal.

mod common;

use common::{argmax_rows, repo, Lcg};
use quantkit_data::{open_data, BatchOptions, OpenOptions};
use quantkit_engine::{compile, EngineOptions, Placement};
use quantkit_graph::{execute, load_model, AttrValue, DType, Graph, Node, Tensor, ValueInfo};
use quantkit_ptq::{quantize_dynamic, PtqConfig, QdqOptions};

fn random(rng: &mut Lcg, shape: &[usize], lo: f32, hi: f32) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_f32(shape, (0..n).map(|_| rng.float(lo, hi)).collect())
}

fn dynamic(g: Graph, per_channel: bool) -> Graph {
    let config = PtqConfig {
        qdq: QdqOptions {
            per_channel,
            ..PtqConfig::default().qdq
        },
        ..Default::default()
    };
    quantize_dynamic(g, &config).unwrap().0
}

/// Every ConvInteger/MatMulInteger is the anchor of a dynamic step and every node of its
/// chain is fused into it.
fn assert_all_fused(g: &Graph) {
    let plan = compile(g, &EngineOptions::default()).unwrap();
    let mut anchors = 0;
    for n in plan.report() {
        match n.op_type.as_str() {
            "ConvInteger" | "MatMulInteger" => {
                anchors += 1;
                assert!(
                    matches!(&n.placement, Placement::Integer { kernel } if kernel.starts_with("dynamic")),
                    "{} is {:?}",
                    n.node,
                    n.placement
                );
            }
            "DynamicQuantizeLinear" | "Cast" | "Mul" => {
                assert!(
                    n.is_integer(),
                    "{} ({}) is {:?}",
                    n.node,
                    n.op_type,
                    n.placement
                )
            }
            _ => {}
        }
    }
    assert!(anchors > 0);
}

/// Engine and float executor on the same inputs: identical bits.
fn assert_bit_equal(g: &Graph, inputs: Vec<Tensor>) {
    let plan = compile(g, &EngineOptions::default()).unwrap();
    let name = g.inputs[0].name.clone();
    for x in inputs {
        let want = execute(g, vec![(name.clone(), x.clone())]).unwrap();
        let got = plan.run(vec![(name.as_str(), x)]).unwrap();
        assert_eq!(got.len(), want.len());
        for ((gn, gt), (wn, wt)) in got.iter().zip(&want) {
            assert_eq!(gn, wn);
            assert_eq!(gt.shape, wt.shape, "{gn}");
            let (a, b) = (gt.as_f32().unwrap(), wt.as_f32().unwrap());
            let diff = a
                .iter()
                .zip(b)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count();
            assert_eq!(diff, 0, "{gn}: {diff} of {} values differ", a.len());
        }
    }
}

/// x[N,3,9,9] → Conv(8, 3x3, pad 1, bias) → Relu → Conv(6, 3x3, stride 2, no bias) → y,
/// plus a depthwise conv on the first conv's output (shared DynamicQuantizeLinear).
fn conv_graph(rng: &mut Lcg) -> Graph {
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        inputs: vec![ValueInfo::new("x", DType::F32, &[2, 3, 9, 9])],
        outputs: vec![
            ValueInfo::new("y", DType::F32, &[2, 6, 4, 4]),
            ValueInfo::new("z", DType::F32, &[2, 8, 9, 9]),
        ],
        ..Default::default()
    };
    g.initializers
        .insert("w1".into(), random(rng, &[8, 3, 3, 3], -0.5, 0.5));
    g.initializers
        .insert("b1".into(), random(rng, &[8], -0.2, 0.2));
    g.initializers
        .insert("w2".into(), random(rng, &[6, 8, 3, 3], -0.3, 0.3));
    g.initializers
        .insert("wd".into(), random(rng, &[8, 1, 3, 3], -0.4, 0.4));
    g.initializers
        .insert("bd".into(), random(rng, &[8], -0.1, 0.1));
    let ints = |v: &[i64]| AttrValue::Ints(v.to_vec());
    g.nodes = vec![
        Node::new("conv1", "Conv", &["x", "w1", "b1"], &["c1"])
            .with_attr("pads", ints(&[1, 1, 1, 1])),
        Node::new("relu", "Relu", &["c1"], &["r1"]),
        Node::new("conv2", "Conv", &["r1", "w2"], &["y"]).with_attr("strides", ints(&[2, 2])),
        Node::new("dw", "Conv", &["r1", "wd", "bd"], &["z"])
            .with_attr("pads", ints(&[1, 1, 1, 1]))
            .with_attr("group", AttrValue::Int(8)),
    ];
    g
}

#[test]
fn dynamic_conv_is_one_step_and_bit_equal_to_the_graph() {
    let mut rng = Lcg(7);
    for per_channel in [true, false] {
        let g = dynamic(conv_graph(&mut rng), per_channel);
        assert_all_fused(&g);
        // Mixed-sign inputs, all-positive inputs (zero point 0), all-zero (empty range).
        let inputs = vec![
            random(&mut rng, &[2, 3, 9, 9], -1.0, 2.0),
            random(&mut rng, &[2, 3, 9, 9], 0.5, 3.0),
            random(&mut rng, &[2, 3, 9, 9], -4.0, -0.5),
            Tensor::from_f32(&[2, 3, 9, 9], vec![0.0; 2 * 3 * 81]),
        ];
        assert_bit_equal(&g, inputs);
    }
}

/// x[N,3,11,11] → Conv(8, 3x3, pad 1, bias) → Relu → MaxPool(2x2/2) → Conv(6, 3x3, no
/// bias) → MaxPool(3x3/2, pads 1, dilation-free) → y: each conv's step absorbs its float
/// Relu and MaxPool (odd sizes: the 2x2 pool drops the last row/column, the 3x3 pool has
/// padding taps at the borders).
fn conv_pool_graph(rng: &mut Lcg) -> Graph {
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        inputs: vec![ValueInfo::new("x", DType::F32, &[2, 3, 11, 11])],
        outputs: vec![ValueInfo::new("y", DType::F32, &[2, 6, 2, 2])],
        ..Default::default()
    };
    g.initializers
        .insert("w1".into(), random(rng, &[8, 3, 3, 3], -0.5, 0.5));
    g.initializers
        .insert("b1".into(), random(rng, &[8], -0.2, 0.2));
    g.initializers
        .insert("w2".into(), random(rng, &[6, 8, 3, 3], -0.3, 0.3));
    let ints = |v: &[i64]| AttrValue::Ints(v.to_vec());
    g.nodes = vec![
        Node::new("conv1", "Conv", &["x", "w1", "b1"], &["c1"])
            .with_attr("pads", ints(&[1, 1, 1, 1])),
        Node::new("relu", "Relu", &["c1"], &["r1"]),
        Node::new("pool1", "MaxPool", &["r1"], &["p1"])
            .with_attr("kernel_shape", ints(&[2, 2]))
            .with_attr("strides", ints(&[2, 2])),
        Node::new("conv2", "Conv", &["p1", "w2"], &["c2"]),
        Node::new("pool2", "MaxPool", &["c2"], &["y"])
            .with_attr("kernel_shape", ints(&[3, 3]))
            .with_attr("strides", ints(&[2, 2]))
            .with_attr("pads", ints(&[1, 1, 1, 1])),
    ];
    g
}

#[test]
fn dynamic_conv_absorbs_relu_and_max_pool_bit_equal_to_the_graph() {
    let mut rng = Lcg(11);
    for per_channel in [true, false] {
        let g = dynamic(conv_pool_graph(&mut rng), per_channel);
        assert_all_fused(&g);
        let plan = compile(&g, &EngineOptions::default()).unwrap();
        for n in plan.report() {
            if matches!(n.op_type.as_str(), "Relu" | "MaxPool") {
                assert!(n.is_integer(), "{} is {:?}", n.node, n.placement);
            }
        }
        let inputs = vec![
            random(&mut rng, &[2, 3, 11, 11], -1.0, 2.0),
            random(&mut rng, &[2, 3, 11, 11], -4.0, -0.5),
            Tensor::from_f32(&[2, 3, 11, 11], vec![0.0; 2 * 3 * 121]),
        ];
        assert_bit_equal(&g, inputs);
    }
}

/// A batch larger than the dynamic step's chunk of images (64 output channels of 32×32 are
/// 16 images per 4 MiB chunk; 37 images make chunks of 16, 16 and 5): the chunked conv,
/// epilogue and pool give the graph's bits.
#[test]
fn dynamic_conv_over_several_image_chunks_is_bit_equal_to_the_graph() {
    let mut rng = Lcg(23);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        inputs: vec![ValueInfo::new("x", DType::F32, &[37, 3, 32, 32])],
        outputs: vec![ValueInfo::new("y", DType::F32, &[37, 64, 16, 16])],
        ..Default::default()
    };
    g.initializers
        .insert("w".into(), random(&mut rng, &[64, 3, 3, 3], -0.5, 0.5));
    g.initializers
        .insert("b".into(), random(&mut rng, &[64], -0.2, 0.2));
    let ints = |v: &[i64]| AttrValue::Ints(v.to_vec());
    g.nodes = vec![
        Node::new("conv", "Conv", &["x", "w", "b"], &["c"]).with_attr("pads", ints(&[1, 1, 1, 1])),
        Node::new("relu", "Relu", &["c"], &["r"]),
        Node::new("pool", "MaxPool", &["r"], &["y"])
            .with_attr("kernel_shape", ints(&[2, 2]))
            .with_attr("strides", ints(&[2, 2])),
    ];
    let g = dynamic(g, true);
    assert_all_fused(&g);
    assert_bit_equal(&g, vec![random(&mut rng, &[37, 3, 32, 32], -1.0, 2.0)]);
}

/// x[4,20] → Gemm(transB, bias) → Relu → MatMul([.., 12]×[12,5]) on a 3-D reshape-free input.
fn gemm_graph(rng: &mut Lcg) -> Graph {
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        inputs: vec![ValueInfo::new("x", DType::F32, &[4, 20])],
        outputs: vec![ValueInfo::new("y", DType::F32, &[4, 5])],
        ..Default::default()
    };
    g.initializers
        .insert("w1".into(), random(rng, &[12, 20], -0.5, 0.5));
    g.initializers
        .insert("b1".into(), random(rng, &[12], -0.2, 0.2));
    g.initializers
        .insert("w2".into(), random(rng, &[12, 5], -0.4, 0.4));
    g.nodes = vec![
        Node::new("fc1", "Gemm", &["x", "w1", "b1"], &["h"]).with_attr("transB", AttrValue::Int(1)),
        Node::new("relu", "Relu", &["h"], &["r"]),
        Node::new("fc2", "MatMul", &["r", "w2"], &["y"]),
    ];
    g
}

#[test]
fn dynamic_gemm_and_matmul_are_one_step_and_bit_equal_to_the_graph() {
    let mut rng = Lcg(11);
    for per_channel in [true, false] {
        let g = dynamic(gemm_graph(&mut rng), per_channel);
        assert_all_fused(&g);
        let inputs = vec![
            random(&mut rng, &[4, 20], -1.0, 1.0),
            random(&mut rng, &[4, 20], 0.0, 5.0),
            Tensor::from_f32(&[4, 20], vec![0.0; 80]),
        ];
        assert_bit_equal(&g, inputs);
    }
}

#[test]
fn a_chain_with_an_extra_reader_stays_in_the_graph_and_still_matches() {
    let mut rng = Lcg(3);
    let mut g = dynamic(gemm_graph(&mut rng), true);
    // Expose fc1's Cast output as a graph output: the chain is no longer private.
    let cast = g
        .nodes
        .iter()
        .find(|n| n.op_type == "Cast")
        .unwrap()
        .outputs[0]
        .clone();
    g.outputs.push(ValueInfo::new(&cast, DType::F32, &[4, 12]));
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    let anchors: Vec<_> = plan
        .report()
        .iter()
        .filter(|n| n.op_type == "MatMulInteger")
        .collect();
    assert_eq!(anchors.len(), 2);
    let dynamic_steps = anchors
        .iter()
        .filter(|n| matches!(n.placement, Placement::Integer { .. }))
        .count();
    assert_eq!(dynamic_steps, 1, "{anchors:?}");
    assert_bit_equal(&g, vec![random(&mut rng, &[4, 20], -1.0, 1.0)]);
}

#[test]
fn a_wrong_input_type_is_a_typed_error_naming_the_node() {
    let mut rng = Lcg(5);
    let mut g = dynamic(gemm_graph(&mut rng), true);
    g.inputs[0] = ValueInfo::new("x", DType::F64, &[4, 20]);
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    let x = Tensor::new(vec![4, 20], quantkit_graph::Data::F64(vec![0.5; 80])).unwrap();
    let err = plan.run(vec![("x", x)]).unwrap_err().to_string();
    println!("{err}");
    assert!(err.contains("fc1") && err.contains("expected f32"), "{err}");
}

#[test]
fn lenet_dynamic_on_the_engine_equals_the_float_executor() {
    let float = load_model(repo().join("models/lenet.onnx")).unwrap();
    let g = dynamic(float.clone(), true);
    assert_all_fused(&g);
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    let input = g.inputs[0].name.clone();
    let mut d = open_data(
        repo().join("data/fashion-mnist-sample"),
        &OpenOptions::default(),
    )
    .unwrap();
    let batches = d
        .batches(&BatchOptions {
            batch_size: 100,
            ..Default::default()
        })
        .unwrap();
    let (mut same_graph, mut same_float, mut total) = (0, 0, 0);
    let mut bits_differ = 0;
    for b in batches {
        let b = b.unwrap();
        let x = Tensor::from_f32(&b.shape, b.data);
        let got = plan
            .run(vec![(input.as_str(), x.clone())])
            .unwrap()
            .remove(0)
            .1;
        let want = execute(&g, vec![(input.clone(), x.clone())])
            .unwrap()
            .remove(0)
            .1;
        let f32_ref = execute(&float, vec![(input.clone(), x)])
            .unwrap()
            .remove(0)
            .1;
        assert_eq!(got.shape, want.shape);
        bits_differ += got
            .as_f32()
            .unwrap()
            .iter()
            .zip(want.as_f32().unwrap())
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        let (e, r, f) = (argmax_rows(&got), argmax_rows(&want), argmax_rows(&f32_ref));
        for i in 0..e.len() {
            same_graph += usize::from(e[i] == r[i]);
            same_float += usize::from(e[i] == f[i]);
            total += 1;
        }
    }
    assert_eq!(total, 1000);
    let (ag, af) = (
        same_graph as f64 / total as f64,
        same_float as f64 / total as f64,
    );
    println!("lenet dynamic: engine vs dynamic graph top-1 {ag:.4} ({bits_differ} values differ), engine vs f32 model top-1 {af:.4}");
    assert_eq!(bits_differ, 0);
    assert!(ag >= 0.995);
    assert!(af >= 0.995, "top-1 agreement with the f32 model {af}");
}
