//! A code map after a conv runs inside the conv step (issue 19, PP-OCR and MTCNN): a
//! table (HardSwish, Sigmoid, chains of them) or a per-channel PRelu on u8 codes that reads
//! only the conv's codes is applied by the conv step to its own output buffer. Checked bit
//! for bit against the graph's reference operators: the full graph on the engine must equal
//! the float executor run on the map's part of the graph (`DQ → op → Q`), fed the codes the
//! engine's conv writes (the conv part alone, compiled separately) — so the map is exact
//! whatever the conv's own rounding. And the map is gone from the plan's steps (fused), or
//! stays a step where it may not fuse (another reader of the conv's codes).

mod common;

use common::Lcg;
use quantkit_engine::{compile, EngineOptions};
use quantkit_graph::{execute, AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};

fn u8s(v: i32) -> Tensor {
    Tensor::new(vec![], Data::U8(vec![v as u8])).unwrap()
}

/// What follows the conv's `Q → DQ`.
#[derive(Clone, Copy, Debug)]
enum Map {
    HardSwish,
    Sigmoid,
    /// PRelu with one slope per channel (`[C, 1, 1]`, as MTCNN stores it).
    PRelu,
    /// PRelu, then a HardSigmoid table: both go into the conv.
    PReluThenHardSigmoid,
}

/// `x (u8 NCHW) → DQ → Conv k×k (+bias) → Q(c) → DQ → MAP → Q(y) [→ …]`, the graph output
/// `y` codes; `tap` makes the conv's codes a second graph output (so nothing fuses).
fn graph(map: Map, k: usize, c_in: usize, c_out: usize, hw: [usize; 2], tap: bool) -> Graph {
    let mut rng = Lcg(91 + k as u64 + c_out as u64);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs = vec![ValueInfo::new("xq", DType::U8, &[1, c_in, hw[0], hw[1]])];
    let gi = &mut g.initializers;
    gi.insert("xs".into(), Tensor::scalar_f32(0.02));
    gi.insert("xz".into(), u8s(117));
    let wv: Vec<i8> = (0..c_out * c_in * k * k)
        .map(|_| rng.int(-127, 127) as i8)
        .collect();
    gi.insert(
        "w".into(),
        Tensor::new(vec![c_out, c_in, k, k], Data::I8(wv)).unwrap(),
    );
    let ws: Vec<f32> = (0..c_out).map(|i| 0.0004 * (1 + i % 7) as f32).collect();
    gi.insert("ws".into(), Tensor::from_f32(&[c_out], ws.clone()));
    let bv: Vec<i32> = (0..c_out).map(|_| rng.int(-5_000, 5_000)).collect();
    gi.insert("b".into(), Tensor::new(vec![c_out], Data::I32(bv)).unwrap());
    gi.insert(
        "bs".into(),
        Tensor::from_f32(&[c_out], ws.iter().map(|s| s * 0.02).collect()),
    );
    gi.insert("cs".into(), Tensor::scalar_f32(0.03));
    gi.insert("cz".into(), u8s(140));
    gi.insert("ys".into(), Tensor::scalar_f32(0.021));
    gi.insert("yz".into(), u8s(33));
    gi.insert("hs".into(), Tensor::scalar_f32(1.0 / 255.0));
    gi.insert("hz".into(), u8s(0));
    let slopes: Vec<f32> = (0..c_out).map(|i| 0.05 + 0.011 * i as f32).collect();
    gi.insert("slope".into(), Tensor::from_f32(&[c_out, 1, 1], slopes));
    let pad = (k / 2) as i64;
    let mut nodes = vec![
        Node::new("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["xf"]),
        Node::new("dqw", "DequantizeLinear", &["w", "ws"], &["wf"])
            .with_attr("axis", AttrValue::Int(0)),
        Node::new("dqb", "DequantizeLinear", &["b", "bs"], &["bf"])
            .with_attr("axis", AttrValue::Int(0)),
        Node::new("conv", "Conv", &["xf", "wf", "bf"], &["c"])
            .with_attr("pads", AttrValue::Ints(vec![pad; 4])),
        Node::new("qc", "QuantizeLinear", &["c", "cs", "cz"], &["cq"]),
        Node::new("dqc", "DequantizeLinear", &["cq", "cs", "cz"], &["cf"]),
    ];
    let qy = Node::new("qy", "QuantizeLinear", &["m", "ys", "yz"], &["y"]);
    match map {
        Map::HardSwish => {
            nodes.push(Node::new("map", "HardSwish", &["cf"], &["m"]));
            nodes.push(qy);
        }
        Map::Sigmoid => {
            nodes.push(Node::new("map", "Sigmoid", &["cf"], &["m"]));
            nodes.push(Node::new(
                "qy",
                "QuantizeLinear",
                &["m", "hs", "hz"],
                &["y"],
            ));
        }
        Map::PRelu => {
            nodes.push(Node::new("map", "PRelu", &["cf", "slope"], &["m"]));
            nodes.push(qy);
        }
        Map::PReluThenHardSigmoid => {
            nodes.push(Node::new("map", "PRelu", &["cf", "slope"], &["m"]));
            nodes.push(Node::new(
                "qm",
                "QuantizeLinear",
                &["m", "ys", "yz"],
                &["mq"],
            ));
            nodes.push(Node::new(
                "dqm",
                "DequantizeLinear",
                &["mq", "ys", "yz"],
                &["mf"],
            ));
            nodes.push(Node::new("map2", "HardSigmoid", &["mf"], &["h"]));
            nodes.push(Node::new(
                "qy",
                "QuantizeLinear",
                &["h", "hs", "hz"],
                &["y"],
            ));
        }
    }
    g.nodes = nodes;
    g.outputs = vec![ValueInfo::new("y", DType::U8, &[])];
    if tap {
        g.outputs.push(ValueInfo::new("cq", DType::U8, &[]));
    }
    g
}

/// The graph cut after the conv's Q: its output is the conv's codes `cq`.
fn conv_part(full: &Graph) -> Graph {
    let mut g = full.clone();
    let end = g.nodes.iter().position(|n| n.name == "qc").unwrap();
    g.nodes.truncate(end + 1);
    g.outputs = vec![ValueInfo::new("cq", DType::U8, &[])];
    g
}

/// The graph's map part, from the conv's codes `cq` (an input) to `y`.
fn map_part(full: &Graph, shape: &[usize]) -> Graph {
    let mut g = full.clone();
    let start = g.nodes.iter().position(|n| n.name == "dqc").unwrap();
    g.nodes.drain(..start);
    g.inputs = vec![ValueInfo::new("cq", DType::U8, shape)];
    g.outputs = vec![ValueInfo::new("y", DType::U8, &[])];
    g
}

fn check(map: Map, k: usize, c_in: usize, c_out: usize, hw: [usize; 2]) {
    for tap in [false, true] {
        let g = graph(map, k, c_in, c_out, hw, tap);
        let mut rng = Lcg(5 + c_in as u64);
        let n = c_in * hw[0] * hw[1];
        let x = Tensor::new(
            vec![1, c_in, hw[0], hw[1]],
            Data::U8((0..n).map(|_| rng.int(0, 255) as u8).collect()),
        )
        .unwrap();
        let plan = compile(&g, &EngineOptions::default()).unwrap();
        let steps = plan.steps();
        let conv_step = steps.iter().find(|(n, _)| n == "conv").unwrap();
        let map_step = steps.iter().any(|(n, _)| n == "map" || n == "map2");
        assert_eq!(map_step, tap, "{map:?} k{k} tap {tap}: {steps:?}");
        if !tap {
            let want = match map {
                Map::PRelu => " + prelu",
                Map::PReluThenHardSigmoid => " + prelu + table",
                _ => " + table",
            };
            assert!(conv_step.1.ends_with(want), "{map:?}: {steps:?}");
        }
        let got = plan.run(vec![("xq", x.clone())]).unwrap().remove(0).1;
        // The reference: the engine's conv codes through the graph's own map operators.
        let conv = compile(&conv_part(&g), &EngineOptions::default()).unwrap();
        let cq = conv.run(vec![("xq", x)]).unwrap().remove(0).1;
        let want = execute(&map_part(&g, &cq.shape), vec![("cq".into(), cq.clone())])
            .unwrap()
            .remove(0)
            .1;
        assert_eq!(got.shape, want.shape);
        assert_eq!(got, want, "{map:?} k{k} c{c_in}→{c_out} {hw:?} tap {tap}");
        let distinct: std::collections::BTreeSet<i64> = got.to_i64_vec().into_iter().collect();
        assert!(
            distinct.len() > 10,
            "{map:?}: a near-constant output tests little"
        );
    }
}

#[test]
fn hardswish_and_sigmoid_tables_run_inside_1x1_3x3_and_depthwise_convs() {
    for map in [Map::HardSwish, Map::Sigmoid] {
        check(map, 1, 16, 24, [5, 7]);
        check(map, 3, 8, 16, [9, 11]);
    }
}

#[test]
fn per_channel_prelu_runs_inside_the_conv() {
    // O-Net's shapes in small: 32 and 17 output channels (a partial 16-channel block).
    check(Map::PRelu, 3, 3, 32, [12, 12]);
    check(Map::PRelu, 1, 8, 17, [3, 5]);
    check(Map::PReluThenHardSigmoid, 3, 4, 16, [6, 6]);
}
