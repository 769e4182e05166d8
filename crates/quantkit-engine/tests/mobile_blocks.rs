//! The element-wise pieces of a MobileNetV3-style block as PP-OCR's classifier exports them,
//! against the QDQ graph on the float executor: an NHWC input transposed to NCHW (the plan
//! only relabels the layout), HardSwish written `x·clip(x + 3, 0, 6)` → Q → DQ → `/6` → Q
//! (two tables the plan composes into one step), a squeeze-and-excite Mul by a per-channel
//! operand (element by element on small maps, 256-entry rows on large ones) and the
//! transpose back.

mod common;

use common::Lcg;
use quantkit_engine::{compile, EngineOptions, Placement};
use quantkit_graph::{execute, AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};

fn scalar_u8(v: u8) -> Tensor {
    Tensor::new(vec![], Data::U8(vec![v])).unwrap()
}

fn codes(shape: &[usize], rng: &mut Lcg) -> Tensor {
    let n = shape.iter().product();
    Tensor::new(
        shape.to_vec(),
        Data::U8((0..n).map(|_| rng.int(0, 255) as u8).collect()),
    )
    .unwrap()
}

fn transpose(name: &str, x: &str, y: &str, perm: &[i64]) -> Node {
    Node::new(name, "Transpose", &[x], &[y]).with_attr("perm", AttrValue::Ints(perm.to_vec()))
}

fn graph(c: usize, h: usize, w: usize) -> Graph {
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs = vec![
        ValueInfo::new("xq", DType::U8, &[1, h, w, c]),
        ValueInfo::new("sq", DType::U8, &[1, c, 1, 1]),
    ];
    g.outputs = vec![ValueInfo::new("zq", DType::U8, &[])];
    let gi = &mut g.initializers;
    for (name, s, z) in [
        ("x", 0.05f32, 128u8),
        ("h", 0.03, 20),
        ("d", 0.01, 20),
        ("s", 1.0 / 255.0, 0),
        ("y", 0.02, 30),
    ] {
        gi.insert(format!("{name}s"), Tensor::scalar_f32(s));
        gi.insert(format!("{name}z"), scalar_u8(z));
    }
    for (name, v) in [("three", 3.0f32), ("zero", 0.0), ("six", 6.0)] {
        gi.insert(name.into(), Tensor::scalar_f32(v));
    }
    g.nodes = vec![
        Node::new("dq0", "DequantizeLinear", &["xq", "xs", "xz"], &["x0"]),
        transpose("to_nchw", "x0", "x1", &[0, 3, 1, 2]),
        Node::new("q1", "QuantizeLinear", &["x1", "xs", "xz"], &["x1q"]),
        Node::new("dq1", "DequantizeLinear", &["x1q", "xs", "xz"], &["x"]),
        Node::new("add3", "Add", &["x", "three"], &["a"]),
        Node::new("clip", "Clip", &["a", "zero", "six"], &["r"]),
        Node::new("mul", "Mul", &["x", "r"], &["m"]),
        Node::new("qm", "QuantizeLinear", &["m", "hs", "hz"], &["mq"]),
        Node::new("dqm", "DequantizeLinear", &["mq", "hs", "hz"], &["mf"]),
        Node::new("div", "Div", &["mf", "six"], &["hsw"]),
        Node::new("qd", "QuantizeLinear", &["hsw", "ds", "dz"], &["hq"]),
        Node::new("dqh", "DequantizeLinear", &["hq", "ds", "dz"], &["hf"]),
        Node::new("dqs", "DequantizeLinear", &["sq", "ss", "sz"], &["sf"]),
        Node::new("se", "Mul", &["hf", "sf"], &["e"]),
        Node::new("qe", "QuantizeLinear", &["e", "ys", "yz"], &["eq"]),
        Node::new("dqe", "DequantizeLinear", &["eq", "ys", "yz"], &["ef"]),
        transpose("to_nhwc", "ef", "z", &[0, 2, 3, 1]),
        Node::new("qz", "QuantizeLinear", &["z", "ys", "yz"], &["zq"]),
    ];
    g
}

#[test]
fn hardswish_and_squeeze_excite_on_codes_equal_the_qdq_graph() {
    // 15 and 320 pixels per channel: the per-element and the row path of the SE Mul.
    for (c, h, w) in [(24, 3, 5), (17, 16, 20), (40, 2, 7)] {
        let g = graph(c, h, w);
        let plan = compile(&g, &EngineOptions::default()).unwrap();
        for node in ["mul", "div", "se", "to_nchw", "to_nhwc"] {
            let r = plan.report().iter().find(|r| r.node == node).unwrap();
            assert!(
                matches!(r.placement, Placement::Integer { .. }),
                "{node}: {r:?}"
            );
        }
        let steps = plan.steps();
        // HardSwish's two tables are one step; no step is left for the Div.
        assert!(
            steps.iter().any(|(_, d)| d.contains("then Div")),
            "{steps:?}"
        );
        assert!(!steps.iter().any(|(n, _)| n == "div"), "{steps:?}");
        let mut rng = Lcg(11 + c as u64);
        let inputs = vec![
            ("xq".to_string(), codes(&[1, h, w, c], &mut rng)),
            ("sq".to_string(), codes(&[1, c, 1, 1], &mut rng)),
        ];
        let got = plan.run(inputs.clone()).unwrap().remove(0).1;
        let want = execute(&g, inputs).unwrap().remove(0).1;
        assert_eq!(got.shape, vec![1, h, w, c]);
        assert_eq!(got.shape, want.shape);
        assert_eq!(got.to_i64_vec(), want.to_i64_vec(), "{c}x{h}x{w}");
    }
}
