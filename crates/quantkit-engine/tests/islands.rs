//! Integer steps for what real CNNs are made of (issue 19): SiLU/Swish and other functions of
//! one tensor's codes as one table, Add/Sub/Mul/Div of two quantized tensors, Concat with
//! per-input requantization, value-moving operators (Slice, Gather, Tile, Resize nearest,
//! Pad) and more unary tables on codes. Each case is a small QDQ graph whose engine output
//! must equal the float executor's (the graph's reference operators: DQ → float op → Q with
//! ONNX rounding) bit for bit, on operands in NCHW (graph inputs) and NHWC (a conv step's
//! output) layouts; and each checks the node became an integer step, not a float island.

mod common;

use common::Lcg;
use quantkit_engine::{compile, EngineOptions, Placement, StepKind};
use quantkit_graph::{execute, AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};

fn zp(dtype: DType, v: i32) -> Tensor {
    let data = match dtype {
        DType::U8 => Data::U8(vec![v as u8]),
        _ => Data::I8(vec![v as i8]),
    };
    Tensor::new(vec![], data).unwrap()
}

fn codes(dtype: DType, shape: &[usize], rng: &mut Lcg) -> Tensor {
    let n = shape.iter().product();
    let data = match dtype {
        DType::U8 => Data::U8((0..n).map(|_| rng.int(0, 255) as u8).collect()),
        _ => Data::I8((0..n).map(|_| rng.int(-128, 127) as i8).collect()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

/// A QDQ graph under construction: code inputs, parameters, nodes.
struct G {
    g: Graph,
    dtype: DType,
    rng: Lcg,
    inputs: Vec<(String, Tensor)>,
}

impl G {
    fn new(dtype: DType, seed: u64) -> G {
        G {
            g: Graph {
                opset_imports: vec![(String::new(), 17)],
                ..Default::default()
            },
            dtype,
            rng: Lcg(seed),
            inputs: Vec::new(),
        }
    }

    /// Scale `s`, zero point `z` named `p_s`/`p_z`.
    fn params(&mut self, p: &str, s: f32, z: i32) {
        self.g
            .initializers
            .insert(format!("{p}_s"), Tensor::scalar_f32(s));
        self.g
            .initializers
            .insert(format!("{p}_z"), zp(self.dtype, z));
    }

    /// A graph input of random codes, dequantized with parameters `p` into `name`.
    fn input(&mut self, name: &str, shape: &[usize], p: &str) {
        let t = codes(self.dtype, shape, &mut self.rng);
        self.g
            .inputs
            .push(ValueInfo::new(&format!("{name}_q"), self.dtype, shape));
        self.inputs.push((format!("{name}_q"), t));
        self.dq(&format!("{name}_q"), p, name);
    }

    /// A graph input of random codes through a 1×1 max-pool step (so the plan holds it
    /// NHWC; a pool on codes is exact, unlike a conv step, whose float-scale output stage
    /// may differ from the float executor's conv by one code), dequantized with parameters
    /// `p` into `name`.
    fn conv_input(&mut self, name: &str, shape: &[usize], p: &str) {
        self.input(&format!("{name}_in"), shape, "cin");
        self.node(
            Node::new(
                &format!("{name}_pool"),
                "MaxPool",
                &[&format!("{name}_in")],
                &[&format!("{name}_c")],
            )
            .with_attr("kernel_shape", AttrValue::Ints(vec![1, 1])),
        );
        self.q(&format!("{name}_c"), p, &format!("{name}_cq"));
        self.dq(&format!("{name}_cq"), p, name);
    }

    fn node(&mut self, n: Node) {
        self.g.nodes.push(n);
    }

    fn dq(&mut self, x: &str, p: &str, y: &str) {
        self.node(Node::new(
            &format!("dq_{y}"),
            "DequantizeLinear",
            &[x, &format!("{p}_s"), &format!("{p}_z")],
            &[y],
        ));
    }

    fn q(&mut self, x: &str, p: &str, y: &str) {
        self.node(Node::new(
            &format!("q_{y}"),
            "QuantizeLinear",
            &[x, &format!("{p}_s"), &format!("{p}_z")],
            &[y],
        ));
    }

    /// Ends the graph at codes `y` and checks the engine against the float executor; the
    /// nodes in `integer` must be integer steps.
    fn check(mut self, y: &str, integer: &[&str]) -> quantkit_engine::Plan {
        self.g.outputs = vec![ValueInfo::new(y, self.dtype, &[])];
        let plan = compile(&self.g, &EngineOptions::default()).unwrap();
        for name in integer {
            let r = plan
                .report()
                .iter()
                .find(|r| r.node == *name)
                .unwrap_or_else(|| panic!("no node {name}"));
            assert!(r.is_integer(), "{name}: {:?}", r.placement);
        }
        let got = plan.run(self.inputs.clone()).unwrap().remove(0).1;
        let want = execute(&self.g, self.inputs.clone()).unwrap().remove(0).1;
        assert_eq!(got.dtype, want.dtype);
        assert_eq!(got.shape, want.shape);
        let (g, w) = (got.to_i64_vec(), want.to_i64_vec());
        let diff = g.iter().zip(&w).filter(|(a, b)| a != b).count();
        let first = g.iter().zip(&w).position(|(a, b)| a != b);
        let x0 = self.inputs[0].1.to_i64_vec();
        assert_eq!(
            diff,
            0,
            "{diff} of {} codes differ; first at {first:?}: got {:?} want {:?}, input 0 there {:?}",
            g.len(),
            first.map(|i| g[i]),
            first.map(|i| w[i]),
            first.and_then(|i| x0.get(i))
        );
        plan
    }
}

const DTYPES: [(DType, i32); 2] = [(DType::U8, 128), (DType::I8, 0)];

/// SiLU as YOLO/EfficientNet exports it: `Mul(DQ(x), Sigmoid(DQ(x))) → Q`, both DQs of the
/// same codes (one DQ read twice, or two DQ nodes), NCHW and NHWC: one table step.
#[test]
fn silu_is_one_table() {
    for (dt, z) in DTYPES {
        for conv in [false, true] {
            for two_dqs in [false, true] {
                let mut g = G::new(dt, 11);
                g.params("x", 0.05, z - 7);
                g.params("cin", 0.02, z);
                g.params("y", 0.03, z - 100 + 90);
                if conv {
                    g.conv_input("x", &[2, 5, 6, 7], "x");
                } else {
                    g.input("x", &[2, 5, 6, 7], "x");
                }
                let xs = if two_dqs {
                    let src = if conv { "x_cq" } else { "x_q" };
                    g.dq(src, "x", "x2");
                    "x2"
                } else {
                    "x"
                };
                g.node(Node::new("sig", "Sigmoid", &[xs], &["s"]));
                g.node(Node::new("mul", "Mul", &["x", "s"], &["m"]));
                g.q("m", "y", "y");
                let plan = g.check("y", &["mul", "sig"]);
                let kinds = plan.step_kinds();
                assert!(
                    !kinds.contains(&StepKind::Float),
                    "{dt} conv {conv}: {:?}",
                    plan.steps()
                );
            }
        }
    }
}

/// SiLU in the full QDQ form (the Sigmoid's output quantized too, as ONNX Runtime's
/// quantizer writes it): `Mul(DQ(x), DQ(Q(Sigmoid(DQ(x)))))` is still one table of x.
#[test]
fn qdq_silu_and_hardswish_are_tables() {
    for (dt, z) in DTYPES {
        let mut g = G::new(dt, 12);
        g.params("x", 0.04, z + 3);
        g.params("cin", 0.02, z);
        g.params("s", 1.0 / 255.0, if dt == DType::U8 { 0 } else { -128 });
        g.params("y", 0.025, z - 20);
        g.conv_input("x", &[1, 4, 5, 6], "x");
        g.node(Node::new("sig", "Sigmoid", &["x"], &["s"]));
        g.q("s", "s", "sq");
        g.dq("sq", "s", "sf");
        g.node(Node::new("mul", "Mul", &["sf", "x"], &["m"]));
        g.q("m", "y", "y");
        let plan = g.check("y", &["mul"]);
        assert!(!plan.step_kinds().contains(&StepKind::Float));

        // HardSwish written out: x · HardSigmoid(x), then a Relu before the Q.
        let mut g = G::new(dt, 13);
        g.params("x", 0.04, z + 3);
        g.params("y", 0.02, z - 50);
        g.input("x", &[3, 17], "x");
        g.node(Node::new("hs", "HardSigmoid", &["x"], &["h"]));
        g.node(Node::new("mul", "Mul", &["x", "h"], &["m"]));
        g.node(Node::new("relu", "Relu", &["m"], &["r"]));
        g.q("r", "y", "y");
        g.check("y", &["mul", "relu"]);

        // HardSwish as PaddlePaddle exports it, every intermediate quantized (the 3 a
        // quantized constant, the 6 a float one): x · (Clip(x + 3, 0, 6) / 6).
        let mut g = G::new(dt, 14);
        g.params("x", 0.04, z + 3);
        g.params("cin", 0.02, z);
        g.params("a", 0.05, z - 60);
        g.params("k", 0.1, z);
        g.params("d", 1.0 / 200.0, z - 100);
        g.params("y", 0.02, z - 50);
        g.conv_input("x", &[2, 3, 4, 5], "x");
        g.g.initializers.insert(
            "three".into(),
            Tensor::new(
                vec![],
                match dt {
                    DType::U8 => Data::U8(vec![158]),
                    _ => Data::I8(vec![30]),
                },
            )
            .unwrap(),
        );
        g.g.initializers
            .insert("six".into(), Tensor::scalar_f32(6.0));
        g.g.initializers
            .insert("lo".into(), Tensor::scalar_f32(0.0));
        g.g.initializers
            .insert("hi".into(), Tensor::scalar_f32(6.0));
        g.dq("three", "k", "three_f");
        g.node(Node::new("add", "Add", &["x", "three_f"], &["a0"]));
        g.q("a0", "a", "a0q");
        g.dq("a0q", "a", "a0f");
        g.node(Node::new("clip", "Clip", &["a0f", "lo", "hi"], &["c0"]));
        g.q("c0", "a", "c0q");
        g.dq("c0q", "a", "c0f");
        g.node(Node::new("div", "Div", &["c0f", "six"], &["d0"]));
        g.q("d0", "d", "d0q");
        g.dq("d0q", "d", "d0f");
        g.node(Node::new("mul", "Mul", &["x", "d0f"], &["m"]));
        g.q("m", "y", "y");
        let plan = g.check("y", &["mul"]);
        assert!(!plan.step_kinds().contains(&StepKind::Float));
        // The pool and one table step: the Add/Clip/Div steps are dead and dropped.
        assert_eq!(plan.step_count(), 2, "{:?}", plan.steps());

        // The same with float constants and only the Div's result quantized (quantkit's
        // quantizer leaves Add/Clip unquantized): Div anchors a table, then Mul another.
        let mut g = G::new(dt, 15);
        g.params("x", 0.04, z + 3);
        g.params("d", 1.0 / 200.0, z - 100);
        g.params("y", 0.02, z - 50);
        g.input("x", &[2, 3, 4, 5], "x");
        for (k, v) in [("three", 3.0), ("six", 6.0), ("lo", 0.0), ("hi", 6.0)] {
            g.g.initializers.insert(k.into(), Tensor::scalar_f32(v));
        }
        g.node(Node::new("add", "Add", &["x", "three"], &["a0"]));
        g.node(Node::new("clip", "Clip", &["a0", "lo", "hi"], &["c0"]));
        g.node(Node::new("div", "Div", &["c0", "six"], &["d0"]));
        g.q("d0", "d", "d0q");
        g.dq("d0q", "d", "d0f");
        g.node(Node::new("mul", "Mul", &["x", "d0f"], &["m"]));
        g.q("m", "y", "y");
        let plan = g.check("y", &["mul"]);
        assert!(
            !plan.step_kinds().contains(&StepKind::Float),
            "{:?}",
            plan.steps()
        );
    }
}

/// Mul/Add/Sub/Div of two quantized tensors with a fused Relu: same shape (in the same and
/// in different layouts), a per-channel operand on either side (squeeze-and-excitation),
/// one element, and a general broadcast; bit-exact everywhere.
#[test]
fn binary_ops_of_two_code_tensors_are_exact() {
    let shapes: [(Vec<usize>, Vec<usize>); 7] = [
        (vec![2, 3, 6, 5], vec![2, 3, 6, 5]),
        // Above 2^17 elements: the table of every code pair.
        (vec![2, 3, 150, 150], vec![2, 3, 150, 150]),
        (vec![2, 3, 6, 5], vec![1, 3, 1, 1]),
        (vec![2, 3, 6, 5], vec![2, 3, 1, 1]),
        (vec![2, 3, 6, 5], vec![1]),
        (vec![2, 3, 6, 5], vec![1, 1, 6, 1]),
        (vec![3, 1, 1], vec![2, 3, 4, 4]),
    ];
    let mut case = 0;
    for (dt, z) in DTYPES {
        for op in ["Mul", "Add", "Sub", "Div"] {
            for (sa, sb) in &shapes {
                for (conv_a, relu) in [(false, false), (true, true), (true, false)] {
                    let conv_a = conv_a && sa.len() == 4;
                    case += 1;
                    let mut g = G::new(dt, 100 + case);
                    g.params("a", 0.05, z - 11);
                    g.params("cin", 0.02, z);
                    // Division by codes near zero gives ±∞ and NaN: Q saturates and maps
                    // NaN to the zero point, and the step must agree.
                    g.params("b", if op == "Div" { 0.7 } else { 0.03 }, z + 5);
                    g.params("y", if op == "Mul" { 0.02 } else { 0.06 }, z + 1);
                    if conv_a {
                        g.conv_input("a", sa, "a");
                    } else {
                        g.input("a", sa, "a");
                    }
                    g.input("b", sb, "b");
                    g.node(Node::new("op", op, &["a", "b"], &["m"]));
                    let last = if relu {
                        g.node(Node::new("relu", "Relu", &["m"], &["r"]));
                        "r"
                    } else {
                        "m"
                    };
                    g.q(last, "y", "y");
                    g.check("y", &["op"]);
                }
            }
        }
    }
}

/// Concat of inputs with their own parameters (one equal to the output's: a copy), on the
/// channel axis of NHWC conv outputs, mixed NHWC/NCHW, and on another axis.
#[test]
fn concat_requantizes_per_input() {
    for (dt, z) in DTYPES {
        for (axis, conv) in [
            (1i64, [true, true, true]),
            (1, [true, false, true]),
            (-1, [false, true, false]),
            (2, [true, true, false]),
        ] {
            let mut g = G::new(dt, 200 + axis.unsigned_abs());
            g.params("cin", 0.02, z);
            g.params("a", 0.05, z - 11);
            g.params("b", 0.03, z + 5);
            g.params("y", 0.03, z + 5);
            g.params("c", 0.1, z);
            let shapes = [[2, 3, 4, 5], [2, 2, 4, 5], [2, 4, 4, 5]];
            let shapes: Vec<Vec<usize>> = shapes
                .iter()
                .map(|s| {
                    let mut s = s.to_vec();
                    if axis != 1 {
                        s[1] = 3;
                        let a = if axis < 0 { 3 } else { axis as usize };
                        s[a] += 1;
                    }
                    s
                })
                .collect();
            for ((name, p), (s, c)) in [("a", "a"), ("b", "b"), ("c", "c")]
                .into_iter()
                .zip(shapes.iter().zip(conv))
            {
                if c {
                    g.conv_input(name, s, p);
                } else {
                    g.input(name, s, p);
                }
            }
            g.node(
                Node::new("cat", "Concat", &["a", "b", "c"], &["m"])
                    .with_attr("axis", AttrValue::Int(axis)),
            );
            g.q("m", "y", "y");
            g.check("y", &["cat"]);
        }
    }
}

/// Operators that move values run on the codes: Slice (YOLO's Focus), Gather, Tile,
/// Resize nearest, Pad with zero (the zero point), DepthToSpace; Exp/Neg/Abs as tables.
#[test]
fn moving_and_unary_ops_run_on_codes() {
    for (dt, z) in DTYPES {
        for conv in [false, true] {
            let run = |n: Node, consts: Vec<(&str, Tensor)>, params_y: (f32, i32)| {
                let mut g = G::new(dt, 300);
                g.params("x", 0.05, z - 9);
                g.params("cin", 0.02, z);
                g.params("y", params_y.0, params_y.1);
                if conv {
                    g.conv_input("x", &[2, 4, 6, 8], "x");
                } else {
                    g.input("x", &[2, 4, 6, 8], "x");
                }
                for (k, t) in consts {
                    g.g.initializers.insert(k.into(), t);
                }
                let name = n.name.clone();
                let out = n.outputs[0].clone();
                g.node(n);
                g.q(&out, "y", "y");
                g.check("y", &[&name]);
            };
            let same = (0.05, z - 9);
            let other = (0.07, z + 3);
            for y in [same, other] {
                run(
                    Node::new("slice", "Slice", &["x", "st", "en", "ax", "sp"], &["m"]),
                    vec![
                        ("st", Tensor::from_i64(&[2], vec![0, 1])),
                        ("en", Tensor::from_i64(&[2], vec![i64::MAX, i64::MAX])),
                        ("ax", Tensor::from_i64(&[2], vec![2, 3])),
                        ("sp", Tensor::from_i64(&[2], vec![2, 2])),
                    ],
                    y,
                );
                run(
                    Node::new("gather", "Gather", &["x", "ix"], &["m"])
                        .with_attr("axis", AttrValue::Int(1)),
                    vec![("ix", Tensor::from_i64(&[3], vec![3, 0, 3]))],
                    y,
                );
                run(
                    Node::new("tile", "Tile", &["x", "rep"], &["m"]),
                    vec![("rep", Tensor::from_i64(&[4], vec![1, 2, 1, 2]))],
                    y,
                );
                run(
                    Node::new("resize", "Resize", &["x", "", "sc"], &["m"])
                        .with_attr("mode", AttrValue::String("nearest".into())),
                    vec![("sc", Tensor::from_f32(&[4], vec![1.0, 1.0, 2.0, 2.0]))],
                    y,
                );
                run(
                    Node::new("resize", "Resize", &["x", "", "sc"], &["m"])
                        .with_attr("mode", AttrValue::String("nearest".into()))
                        .with_attr(
                            "coordinate_transformation_mode",
                            AttrValue::String("asymmetric".into()),
                        )
                        .with_attr(
                            "nearest_mode",
                            AttrValue::String("round_prefer_ceil".into()),
                        ),
                    vec![("sc", Tensor::from_f32(&[4], vec![1.0, 1.0, 1.5, 0.75]))],
                    y,
                );
                run(
                    Node::new("resize", "Resize", &["x", "", "", "sz"], &["m"])
                        .with_attr("mode", AttrValue::String("nearest".into())),
                    vec![("sz", Tensor::from_i64(&[4], vec![2, 4, 13, 5]))],
                    y,
                );
                run(
                    Node::new("pad", "Pad", &["x", "pads"], &["m"]),
                    vec![("pads", Tensor::from_i64(&[8], vec![0, 0, 1, 2, 0, 0, 2, 1]))],
                    y,
                );
                run(
                    Node::new("d2s", "DepthToSpace", &["x"], &["m"])
                        .with_attr("blocksize", AttrValue::Int(2)),
                    vec![],
                    y,
                );
                for op in ["Exp", "Neg", "Abs"] {
                    run(Node::new("u", op, &["x"], &["m"]), vec![], y);
                }
            }
        }
    }
}

/// What has no exact integer form here stays a float island, with the reason in the
/// report: linear Resize, Pad with a value that is no code, and Mul of two different
/// tensors with per-channel activation parameters.
#[test]
fn what_is_not_exact_stays_float() {
    let (dt, z) = (DType::U8, 128);
    let mut g = G::new(dt, 400);
    g.params("x", 0.05, z);
    g.params("y", 0.05, z);
    g.input("x", &[1, 2, 4, 4], "x");
    g.g.initializers.insert(
        "sc".into(),
        Tensor::from_f32(&[4], vec![1.0, 1.0, 2.0, 2.0]),
    );
    g.node(
        Node::new("resize", "Resize", &["x", "", "sc"], &["m"])
            .with_attr("mode", AttrValue::String("linear".into())),
    );
    g.q("m", "y", "y");
    let plan = g.check("y", &[]);
    let r = plan.report().iter().find(|r| r.node == "resize").unwrap();
    assert!(matches!(r.placement, Placement::Float { .. }), "{r:?}");

    let mut g = G::new(dt, 401);
    g.params("x", 0.05, z);
    g.params("y", 0.05, z);
    g.input("x", &[1, 2, 4, 4], "x");
    g.g.initializers.insert(
        "pads".into(),
        Tensor::from_i64(&[8], vec![0, 0, 1, 1, 0, 0, 1, 1]),
    );
    g.g.initializers
        .insert("pv".into(), Tensor::scalar_f32(0.0123));
    g.node(Node::new("pad", "Pad", &["x", "pads", "pv"], &["m"]));
    g.q("m", "y", "y");
    let plan = g.check("y", &[]);
    let r = plan.report().iter().find(|r| r.node == "pad").unwrap();
    match &r.placement {
        Placement::Float { reason } => assert!(reason.contains("not a code"), "{reason}"),
        p => panic!("{p:?}"),
    }
}

/// PRelu with one slope per channel (`[C, 1, 1]` as MTCNN stores it, and `[1, C, 1, 1]`)
/// or one slope: a table per channel, on NCHW and NHWC codes.
#[test]
fn prelu_per_channel_is_tables() {
    for (dt, z) in DTYPES {
        for conv in [false, true] {
            for slope_shape in [vec![4, 1, 1], vec![1, 4, 1, 1], vec![1]] {
                let mut g = G::new(dt, 500);
                g.params("x", 0.05, z - 9);
                g.params("cin", 0.02, z);
                g.params("y", 0.04, z - 30);
                if conv {
                    g.conv_input("x", &[2, 4, 3, 5], "x");
                } else {
                    g.input("x", &[2, 4, 3, 5], "x");
                }
                let n: usize = slope_shape.iter().product();
                let slopes: Vec<f32> = (0..n).map(|i| 0.1 + 0.37 * i as f32).collect();
                g.g.initializers
                    .insert("slope".into(), Tensor::from_f32(&slope_shape, slopes));
                g.node(Node::new("prelu", "PRelu", &["x", "slope"], &["m"]));
                g.q("m", "y", "y");
                g.check("y", &["prelu"]);
            }
        }
    }
}

/// GlobalAveragePool on codes (squeeze-and-excitation blocks): the reference's f64 sums
/// (computed as integer sums of the table's units, `steps/pool.rs`), bit-exact, on NCHW and
/// NHWC codes and a plane of 4,096 values.
#[test]
fn global_average_pool_is_exact() {
    for (dt, z) in DTYPES {
        for conv in [false, true] {
            for shape in [[2, 5, 3, 4], [1, 3, 64, 64]] {
                let mut g = G::new(dt, 600);
                g.params("x", 0.0123, z - 9);
                g.params("cin", 0.02, z);
                g.params("y", 0.0011, z + 2);
                if conv {
                    g.conv_input("x", &shape, "x");
                } else {
                    g.input("x", &shape, "x");
                }
                g.node(Node::new("gap", "GlobalAveragePool", &["x"], &["m"]));
                g.q("m", "y", "y");
                g.check("y", &["gap"]);
            }
        }
    }
}

/// Attention probabilities as quantkit quantizes PP-OCRv4's text recognizer:
/// `DQ(scores) → Softmax(axis 3) → Q`, u8 with that model's parameters (scores scale
/// 0.04127199, zero point 108; probabilities 0.0025107323, zero point 0, a scale whose
/// reciprocal, 398.29, is no integer). The engine runs it as a float island and must equal the
/// QDQ graph bit for bit, i.e. `Q(softmax(DQ(x)))` with ONNX rounding: checked here against
/// the float executor and against a softmax in f64 (equal except within 10⁻⁴ of a step of a
/// rounding tie, where f32 and f64 may round apart).
///
/// ONNX Runtime does not compute this: its graph optimizer fuses the same three nodes into
/// com.microsoft `QLinearSoftmax`, which multiplies by `floor(1/y_scale)` (398) instead of
/// dividing by `y_scale`, so it rounds 1.2 % of that model's probability codes one step low
/// (docs/architecture.md, "The engine, the QDQ reference and ONNX Runtime"). The last
/// assertion keeps this fixture one where that rule moves codes, so a Softmax step that
/// copied it would fail the comparison above.
#[test]
fn attention_softmax_is_the_reference_not_qlinear_softmax() {
    let (dt, s_x, z_x, s_y) = (DType::U8, 0.041_271_99_f32, 108, 0.002_510_732_3_f32);
    let shape = [2, 8, 24, 24];
    let mut g = G::new(dt, 700);
    g.params("x", s_x, z_x);
    g.params("y", s_y, 0);
    g.input("x", &shape, "x");
    g.node(Node::new("softmax", "Softmax", &["x"], &["p"]).with_attr("axis", AttrValue::Int(3)));
    g.q("p", "y", "y");
    let inputs = g.inputs.clone();
    let x = inputs[0].1.to_i64_vec();
    let plan = g.check("y", &[]);
    let r = plan.report().iter().find(|r| r.node == "softmax").unwrap();
    assert!(matches!(r.placement, Placement::Float { .. }), "{r:?}");

    // The same codes from an f64 softmax, and by ONNX Runtime's QLinearSoftmax rule.
    let got = plan.run(inputs).unwrap().remove(0).1.to_i64_vec();
    let floor_recip = (1.0 / s_y as f64).floor();
    assert_eq!(floor_recip, 398.0);
    let (mut near_tie, mut moved_by_floor) = (0, 0);
    for (row, codes) in x.chunks(24).enumerate() {
        let v: Vec<f64> = codes
            .iter()
            .map(|&c| (c - z_x as i64) as f64 * s_x as f64)
            .collect();
        let max = v.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = v.iter().map(|a| (a - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        for (k, ek) in e.iter().enumerate() {
            let p = ek / sum;
            let t = p / s_y as f64;
            let exact = t.round_ties_even().clamp(0.0, 255.0) as i64;
            let at = got[row * 24 + k];
            if ((t - t.floor()) - 0.5).abs() < 1e-4 {
                near_tie += 1;
            } else {
                assert_eq!(at, exact, "row {row} element {k}: p = {p}, p/s = {t}");
                let ort = (p * floor_recip).round_ties_even().clamp(0.0, 255.0) as i64;
                if ort != exact {
                    moved_by_floor += 1;
                }
            }
        }
    }
    assert!(near_tie < 10, "{near_tie} near ties");
    // 9,216 probabilities, none near a tie; ONNX Runtime's rule moves 109 of them (1.2 %).
    assert!(
        moved_by_floor > 20,
        "floor(1/s) moves only {moved_by_floor} codes on this fixture"
    );
}
