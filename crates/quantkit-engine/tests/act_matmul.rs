//! MatMul of two quantized activations (`DQ(a) → MatMul ← DQ(b) → Q`, QLinearMatMul with a
//! non-constant B) as an integer step: equal codes with the graph crate's QLinearMatMul (the
//! i64 reference of ONNX Runtime's operator), within one code of the QDQ graph on the float
//! executor (rounding ties), the ONNX node tests of QLinearMatMul through the step, and the
//! float island where the kernel does not take the shapes.

mod common;

use common::{shared, Lcg};
use quantkit_engine::{compile, EngineOptions, Placement};
use quantkit_graph::{
    execute, load_model, load_tensor_pb, DType, Data, Graph, Node, Tensor, ValueInfo,
};

fn scalar(dtype: DType, v: i32) -> Tensor {
    let data = match dtype {
        DType::U8 => Data::U8(vec![v as u8]),
        _ => Data::I8(vec![v as i8]),
    };
    Tensor::new(vec![], data).unwrap()
}

fn range(t: DType) -> (i32, i32) {
    if t == DType::U8 {
        (0, 255)
    } else {
        (-128, 127)
    }
}

fn codes(dtype: DType, shape: &[usize], rng: &mut Lcg) -> Tensor {
    let n = shape.iter().product();
    let data = match dtype {
        DType::U8 => Data::U8((0..n).map(|_| rng.int(0, 255) as u8).collect()),
        _ => Data::I8((0..n).map(|_| rng.int(-128, 127) as i8).collect()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

fn placement(plan: &quantkit_engine::Plan, node: &str) -> Placement {
    plan.report()
        .iter()
        .find(|r| r.node == node)
        .unwrap_or_else(|| panic!("no node {node} in the report"))
        .placement
        .clone()
}

/// Parameters of one case: (a type, b type, y type), zero points and scales.
struct Params {
    types: [DType; 3],
    zps: [i32; 3],
    scales: [f32; 3],
}

impl Params {
    fn random(types: [DType; 3], k: usize, rng: &mut Lcg) -> Params {
        let zp = |t: DType, rng: &mut Lcg| {
            let (lo, hi) = range(t);
            rng.int(lo + 64, hi - 64)
        };
        let (sa, sb) = (rng.float(0.01, 0.05), rng.float(0.01, 0.05));
        // Spread the products (≈ √K·74² of them) over the output codes.
        let sy = sa * sb * 74.0 * 74.0 * (k as f32).sqrt() / 60.0;
        Params {
            types,
            zps: [zp(types[0], rng), zp(types[1], rng), zp(types[2], rng)],
            scales: [sa, sb, sy],
        }
    }
    fn insert(&self, g: &mut Graph) {
        for (i, p) in ["a", "b", "y"].iter().enumerate() {
            g.initializers
                .insert(format!("{p}s"), Tensor::scalar_f32(self.scales[i]));
            g.initializers
                .insert(format!("{p}z"), scalar(self.types[i], self.zps[i]));
        }
    }
}

fn graph(a: &[usize], b: &[usize], p: &Params) -> Graph {
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs = vec![
        ValueInfo::new("a", p.types[0], a),
        ValueInfo::new("b", p.types[1], b),
    ];
    g.outputs = vec![ValueInfo::new("y", p.types[2], &[])];
    p.insert(&mut g);
    g
}

/// `DQ(a) → MatMul ← DQ(b) → Q`.
fn qdq(a: &[usize], b: &[usize], p: &Params) -> Graph {
    let mut g = graph(a, b, p);
    g.nodes = vec![
        Node::new("dqa", "DequantizeLinear", &["a", "as", "az"], &["fa"]),
        Node::new("dqb", "DequantizeLinear", &["b", "bs", "bz"], &["fb"]),
        Node::new("mm", "MatMul", &["fa", "fb"], &["fy"]),
        Node::new("q", "QuantizeLinear", &["fy", "ys", "yz"], &["y"]),
    ];
    g
}

/// `QLinearMatMul(a, b)` with constant parameters.
fn qlinear(a: &[usize], b: &[usize], p: &Params) -> Graph {
    let mut g = graph(a, b, p);
    g.nodes = vec![Node::new(
        "mm",
        "QLinearMatMul",
        &["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
        &["y"],
    )];
    g
}

fn run(g: &Graph, a: &Tensor, b: &Tensor) -> (Tensor, Tensor) {
    let plan = compile(g, &EngineOptions::default()).unwrap();
    let feeds = || vec![("a", a.clone()), ("b", b.clone())];
    let got = plan.run(feeds()).unwrap().remove(0).1;
    let want = execute(
        g,
        feeds()
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect(),
    )
    .unwrap()
    .remove(0)
    .1;
    (got, want)
}

const SHAPES: &[(&[usize], &[usize])] = &[
    // Attention Q·Kᵀ and P·V: [N, heads, T, d] × [N, heads, d, T], [.., T, T] × [.., T, d].
    (&[2, 2, 12, 8], &[2, 2, 8, 12]),
    (&[2, 2, 12, 12], &[2, 2, 12, 8]),
    // Broadcast batch axes, 2-D and 3-D operands.
    (&[2, 1, 5, 16], &[3, 16, 7]),
    (&[6, 20], &[20, 9]),
];

#[test]
fn qdq_matmul_of_two_activations_is_qlinear_matmul() {
    let mut rng = Lcg(11);
    let (u, s) = (DType::U8, DType::I8);
    for (i, &(sa, sb)) in SHAPES.iter().enumerate() {
        for types in [[u, u, u], [s, s, s], [u, s, u], [s, u, s], [u, u, s]] {
            let what = format!("{sa:?} × {sb:?} {types:?}");
            let k = sa[sa.len() - 1];
            let p = Params::random(types, k, &mut rng);
            let g = qdq(sa, sb, &p);
            let plan = compile(&g, &EngineOptions::default()).unwrap();
            assert!(
                matches!(placement(&plan, "mm"), Placement::Integer { .. }),
                "{what}: {:?}",
                placement(&plan, "mm")
            );
            let (a, b) = (codes(types[0], sa, &mut rng), codes(types[1], sb, &mut rng));
            let (got, float) = run(&g, &a, &b);
            // ONNX Runtime's operator: the graph crate's QLinearMatMul (exact i64 sums).
            let (_, want) = run(&qlinear(sa, sb, &p), &a, &b);
            assert_eq!(got.shape, want.shape, "{what}");
            assert_eq!(got.dtype, want.dtype, "{what}");
            let (gv, wv, fv) = (got.to_i64_vec(), want.to_i64_vec(), float.to_i64_vec());
            assert_eq!(gv, wv, "{what}: against QLinearMatMul");
            assert!(wv.iter().any(|&v| v != wv[0]), "{what}: constant output");
            // The QDQ graph's f32 MatMul: one code apart at most (rounding ties).
            let off = gv.iter().zip(&fv).filter(|(g, f)| g != f).count();
            let far = gv.iter().zip(&fv).any(|(g, f)| (g - f).abs() > 1);
            assert!(
                !far && off * 100 <= gv.len(),
                "{what}: {off} codes off the QDQ graph"
            );
            if i == 0 {
                eprintln!(
                    "{what}: {off} of {} codes differ from the f32 QDQ graph",
                    gv.len()
                );
            }
        }
    }
}

#[test]
fn qlinear_matmul_with_an_activation_b_is_an_integer_step() {
    let mut rng = Lcg(12);
    let (u, s) = (DType::U8, DType::I8);
    for &(sa, sb) in SHAPES {
        for types in [[u, u, u], [s, s, s], [u, s, s], [s, u, u]] {
            let what = format!("QLinearMatMul {sa:?} × {sb:?} {types:?}");
            let p = Params::random(types, sa[sa.len() - 1], &mut rng);
            let g = qlinear(sa, sb, &p);
            let plan = compile(&g, &EngineOptions::default()).unwrap();
            assert!(
                matches!(placement(&plan, "mm"), Placement::Integer { .. }),
                "{what}: {:?}",
                placement(&plan, "mm")
            );
            let (a, b) = (codes(types[0], sa, &mut rng), codes(types[1], sb, &mut rng));
            let (got, want) = run(&g, &a, &b);
            assert_eq!(got.shape, want.shape, "{what}");
            assert_eq!(got.to_i64_vec(), want.to_i64_vec(), "{what}");
        }
    }
}

/// A 1-D operand (known at compile time, or only at run time) is not the batched kernel's:
/// the float island, bit for bit the float executor's.
#[test]
fn one_dimensional_operands_run_the_float_island() {
    let mut rng = Lcg(13);
    let types = [DType::U8, DType::I8, DType::U8];
    for (sa, sb) in [(&[3, 5, 16][..], &[16][..]), (&[16][..], &[2, 16, 9][..])] {
        let p = Params::random(types, 16, &mut rng);
        for known in [true, false] {
            let what = format!("{sa:?} × {sb:?} shapes known {known}");
            let mut g = qdq(sa, sb, &p);
            if !known {
                for v in &mut g.inputs {
                    v.shape = None;
                }
            }
            let plan = compile(&g, &EngineOptions::default()).unwrap();
            let pl = placement(&plan, "mm");
            // Known: the report says why; unknown: the step falls back at run time.
            assert_eq!(
                matches!(pl, Placement::Integer { .. }),
                !known,
                "{what}: {pl:?}"
            );
            let (a, b) = (codes(types[0], sa, &mut rng), codes(types[1], sb, &mut rng));
            let (got, want) = run(&g, &a, &b);
            assert_eq!(got.shape, want.shape, "{what}");
            let wv = want.to_i64_vec();
            assert_eq!(got.to_i64_vec(), wv, "{what}");
            assert!(wv.iter().any(|&v| v != wv[0]), "{what}: constant output");
        }
    }
}

/// The ONNX node tests of QLinearMatMul (`../shared/conformance/onnx-node`), with the
/// scales and zero points made constants as in a real model and A, B fed at run time:
/// the f32-scale cases run the integer step, the f16-scale ones the graph operator (the
/// engine's parameters are f32); all give the expected codes.
#[test]
fn onnx_node_tests_of_qlinear_matmul_run_the_step() {
    let dir = shared().join("conformance/onnx-node");
    if !dir.exists() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "{} missing (required under CI)",
            dir.display()
        );
        eprintln!("skipping: {} not found", dir.display());
        return;
    }
    let mut integer = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let case = e.unwrap().path();
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("test_qlinearmatmul") {
            continue;
        }
        let mut g = load_model(case.join("model.onnx")).unwrap();
        g.nodes[0].name = "mm".into();
        let data = case.join("test_data_set_0");
        let inputs: Vec<Tensor> = (0..8)
            .map(|i| {
                load_tensor_pb(data.join(format!("input_{i}.pb")))
                    .unwrap()
                    .1
            })
            .collect();
        let names: Vec<String> = g.inputs.iter().map(|v| v.name.clone()).collect();
        for i in [1, 2, 4, 5, 6, 7] {
            g.initializers.insert(names[i].clone(), inputs[i].clone());
        }
        g.inputs = vec![g.inputs[0].clone(), g.inputs[3].clone()];
        let want = load_tensor_pb(data.join("output_0.pb")).unwrap().1;
        let plan = compile(&g, &EngineOptions::default()).unwrap();
        let is_int = matches!(placement(&plan, "mm"), Placement::Integer { .. });
        assert_eq!(is_int, name.ends_with("float32"), "{name}");
        integer += usize::from(is_int);
        let got = plan
            .run(vec![
                (names[0].as_str(), inputs[0].clone()),
                (names[3].as_str(), inputs[3].clone()),
            ])
            .unwrap()
            .remove(0)
            .1;
        assert_eq!(got.shape, want.shape, "{name}");
        assert_eq!(got.to_i64_vec(), want.to_i64_vec(), "{name}");
    }
    assert_eq!(integer, 4, "the four f32-scale cases");
}
