//! The float input prologue `x → (Add | Sub | Mul | Div with a constant)+ → QuantizeLinear`
//! as one step, against the same nodes on the float executor: the codes must be equal bit
//! for bit, rounding ties, NaN, ±∞, signed zeros and saturation included.

mod common;

use common::Lcg;
use quantkit_engine::{compile, EngineOptions, Placement, Plan};
use quantkit_graph::{execute, AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};

fn scalar(dtype: DType, v: i32) -> Tensor {
    let data = match dtype {
        DType::U8 => Data::U8(vec![v as u8]),
        _ => Data::I8(vec![v as i8]),
    };
    Tensor::new(vec![], data).unwrap()
}

fn placement<'a>(plan: &'a Plan, node: &str) -> &'a Placement {
    &plan
        .report()
        .iter()
        .find(|r| r.node == node)
        .unwrap()
        .placement
}

/// `x → ops → QuantizeLinear(s, z) → y` (the codes are the output), where each op is
/// `(op type, constant, constant first)`.
fn chain(ops: &[(&str, Tensor, bool)], s: f32, z: Tensor) -> Graph {
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    let mut x = ValueInfo::new("x", DType::F32, &[]);
    x.shape = None;
    g.inputs = vec![x];
    g.outputs = vec![ValueInfo::new("y", z.dtype, &[])];
    g.initializers.insert("s".into(), Tensor::scalar_f32(s));
    g.initializers.insert("z".into(), z);
    let mut v = "x".to_string();
    for (i, (op, c, first)) in ops.iter().enumerate() {
        let (cn, out) = (format!("c{i}"), format!("v{i}"));
        g.initializers.insert(cn.clone(), c.clone());
        let ins = if *first {
            [cn.as_str(), v.as_str()]
        } else {
            [v.as_str(), cn.as_str()]
        };
        g.nodes
            .push(Node::new(&format!("op{i}"), op, &ins, &[out.as_str()]));
        v = out;
    }
    g.nodes.push(Node::new(
        "q",
        "QuantizeLinear",
        &[v.as_str(), "s", "z"],
        &["y"],
    ));
    g
}

/// Asserts the chain compiled to one prologue step and that its codes equal the executor's.
fn assert_fused_and_same(g: &Graph, x: &Tensor, what: &str) -> Tensor {
    let plan = compile(g, &EngineOptions::default()).unwrap();
    assert!(
        matches!(placement(&plan, "op0"), Placement::Integer { kernel } if kernel.contains("in one pass")),
        "{what}: {:?}",
        plan.report()
    );
    for r in plan.report().iter().filter(|r| r.node != "op0") {
        assert_eq!(
            r.placement,
            Placement::Fused { into: "op0".into() },
            "{what}: {}",
            r.node
        );
    }
    assert_eq!(plan.step_count(), 1, "{what}");
    let got = plan.run(vec![("x", x.clone())]).unwrap().remove(0).1;
    let want = execute(g, vec![("x".into(), x.clone())])
        .unwrap()
        .remove(0)
        .1;
    assert_eq!(got, want, "{what}");
    got
}

/// Values that hit every edge of `(x − m) / s / scale` and its rounding: exact ties after
/// the arithmetic, values next to them, signed zeros, subnormals, the saturation bounds and
/// beyond, ±∞ and NaN.
fn edge_values(m: f32, s: f32, scale: f32) -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1e-40,
        -1e-40,
        m,
    ];
    // x such that (x − m)/s/scale lands on k + 0.5 (a tie, when the f32 arithmetic is
    // exact) and on its neighbours one ulp away.
    for k in -300..300 {
        let t = (k as f32 + 0.5) * scale * s + m;
        v.extend([
            t,
            f32::from_bits(t.to_bits() + 1),
            f32::from_bits(t.to_bits() - 1),
        ]);
        v.push(k as f32 * scale * s + m);
    }
    v
}

#[test]
fn sub_div_quantize_equals_the_graph_ops() {
    let mut rng = Lcg(7);
    for (zt, z) in [
        (DType::U8, 0),
        (DType::U8, 128),
        (DType::U8, 255),
        (DType::I8, -128),
        (DType::I8, 0),
        (DType::I8, 127),
    ] {
        // The normalisation of an image model and one with an exact power-of-two scale,
        // where ties are common.
        for (m, s, scale) in [
            (0.2860f32, 0.3530f32, 0.0173f32),
            (0.5, 0.25, 0.5),
            (0.0, 1.0, 1.0),
        ] {
            let g = chain(
                &[
                    ("Sub", Tensor::scalar_f32(m), false),
                    ("Div", Tensor::scalar_f32(s), false),
                ],
                scale,
                scalar(zt, z),
            );
            let mut v = edge_values(m, s, scale);
            v.extend((0..2000).map(|_| rng.float(-3.0, 3.0)));
            let n = v.len();
            let x = Tensor::from_f32(&[1, 1, 1, n], v);
            let got = assert_fused_and_same(&g, &x, &format!("{zt} {z} m {m} s {s}"));
            // The case reaches both ends of the code range.
            let c = got.to_i64_vec();
            let (lo, hi) = if zt == DType::U8 {
                (0, 255)
            } else {
                (-128, 127)
            };
            assert!(c.contains(&lo) && c.contains(&hi), "{zt} {z}");
        }
    }
}

#[test]
fn every_operator_and_operand_order_and_shape() {
    let mut rng = Lcg(8);
    let c = Tensor::scalar_f32;
    let ops: Vec<(&str, Tensor, bool)> = vec![
        ("Add", c(0.75), false),
        ("Mul", c(-1.5), true),
        ("Sub", c(3.0), true),
        ("Div", c(0.3), true),
        ("Add", c(-0.1), true),
        ("Mul", c(1.7), false),
        // A one-element constant of higher rank broadcasts the output to rank 5.
        ("Div", Tensor::from_f32(&[1, 1, 1, 1, 1], vec![1.3]), false),
    ];
    let g = chain(&ops, 0.05, scalar(DType::I8, 3));
    for shape in [
        vec![2, 3, 5, 7],
        vec![1, 1, 28, 28],
        vec![1],
        vec![0, 3],
        vec![3, 40000],
    ] {
        let n: usize = shape.iter().product();
        let mut v: Vec<f32> = (0..n).map(|_| rng.float(-4.0, 4.0)).collect();
        // Division by the input: zeros give ±∞, which must saturate the same way.
        for i in (0..n).step_by(97) {
            v[i] = if i % 2 == 0 { 0.0 } else { -0.0 };
        }
        let x = Tensor::from_f32(&shape, v);
        let got = assert_fused_and_same(&g, &x, &format!("{shape:?}"));
        assert_eq!(got.rank(), 5);
    }
}

#[test]
fn per_channel_constants_equal_the_graph_ops() {
    let mut rng = Lcg(9);
    let mean = Tensor::from_f32(&[1, 3, 1, 1], vec![0.485, 0.456, 0.406]);
    let std = Tensor::from_f32(&[3, 1, 1], vec![0.229, 0.224, 0.225]);
    let g = chain(
        &[
            ("Sub", mean, false),
            ("Div", std, false),
            ("Mul", Tensor::scalar_f32(0.9), false),
        ],
        0.021,
        scalar(DType::U8, 114),
    );
    // The last shape is large enough to run in parallel tasks.
    for shape in [[2, 3, 5, 7], [1, 3, 1, 1], [1, 3, 64, 64], [2, 3, 128, 128]] {
        let n: usize = shape.iter().product();
        let x = Tensor::from_f32(&shape, (0..n).map(|_| rng.float(-0.5, 1.5)).collect());
        assert_fused_and_same(&g, &x, &format!("{shape:?}"));
    }
    // Inputs the one-pass loop does not take run the graph's nodes: a single channel that
    // the constants broadcast to three (a larger output), and a channel count that does not
    // broadcast (the graph's error).
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    let x = Tensor::from_f32(
        &[2, 1, 4, 4],
        (0..32).map(|_| rng.float(0.0, 1.0)).collect(),
    );
    let got = plan.run(vec![("x", x.clone())]).unwrap().remove(0).1;
    let want = execute(&g, vec![("x".into(), x)]).unwrap().remove(0).1;
    assert_eq!(got.shape, [2, 3, 4, 4]);
    assert_eq!(got, want);
    let x = Tensor::from_f32(&[1, 2, 2, 2], vec![0.5; 8]);
    assert!(plan.run(vec![("x", x.clone())]).is_err());
    assert!(execute(&g, vec![("x".into(), x)]).is_err());
}

#[test]
fn an_input_that_is_not_f32_gets_the_graph_ops_error() {
    let mut g = chain(
        &[("Sub", Tensor::scalar_f32(0.5), false)],
        0.1,
        scalar(DType::U8, 0),
    );
    // No declared type, so the input reaches the step.
    g.inputs[0].dtype = None;
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    assert!(matches!(placement(&plan, "op0"), Placement::Integer { .. }));
    let x = Tensor::from_i64(&[4], vec![1, 2, 3, 4]);
    assert!(plan.run(vec![("x", x.clone())]).is_err());
    assert!(execute(&g, vec![("x".into(), x)]).is_err());
}

#[test]
fn chains_that_do_not_fit_stay_graph_ops() {
    let c = Tensor::scalar_f32;
    // An intermediate value that is also a graph output.
    let mut g = chain(
        &[("Sub", c(0.5), false), ("Div", c(0.25), false)],
        0.1,
        scalar(DType::U8, 0),
    );
    g.outputs.push(ValueInfo::new("v0", DType::F32, &[]));
    // A constant with several values that are not per channel.
    let h = chain(
        &[(
            "Mul",
            Tensor::from_f32(&[4], vec![1.0, 2.0, 3.0, 4.0]),
            false,
        )],
        0.1,
        scalar(DType::U8, 0),
    );
    // Blocked quantization.
    let mut b = chain(&[("Sub", c(0.5), false)], 0.1, scalar(DType::U8, 0));
    b.nodes[1] = b.nodes[1]
        .clone()
        .with_attr("block_size", AttrValue::Int(2));
    // No NaN: the f32 graph output would not compare equal to itself.
    let x = Tensor::from_f32(&[2, 4], vec![0.1, 0.7, -3.0, 9.0, 0.25, 0.3, -1e30, 1.0]);
    for (what, g) in [("graph output", &g), ("vector constant", &h)] {
        let plan = compile(g, &EngineOptions::default()).unwrap();
        assert!(
            matches!(placement(&plan, "op0"), Placement::Float { .. }),
            "{what}: {:?}",
            plan.report()
        );
        assert_eq!(
            plan.run(vec![("x", x.clone())]).unwrap(),
            execute(g, vec![("x".into(), x.clone())]).unwrap(),
            "{what}"
        );
    }
    let plan = compile(&b, &EngineOptions::default()).unwrap();
    assert!(matches!(placement(&plan, "op0"), Placement::Float { .. }));
}
