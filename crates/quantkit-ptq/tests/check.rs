//! `quantkit_ptq::check`: the static deployability check flags an accumulator that can
//! overflow int32 and a multiplier with no fixed-point form, on hand-built QDQ graphs whose
//! figures are computed here from first principles; and stays quiet on the same graphs with
//! healthy sizes and scales.

use quantkit_graph::{AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};
use quantkit_ptq::check::{check, Severity, Target};

fn scalar(v: f32) -> Tensor {
    Tensor::scalar_f32(v)
}

fn u8_scalar(v: u8) -> Tensor {
    Tensor::new(vec![], Data::U8(vec![v])).unwrap()
}

/// `x → Q → DQ → MatMul(DQ(W int8 [K, N])) → Q → DQ → y` with u8 activations (zero point
/// `zx`), every weight `w`, input scale `sx`, weight scale `sw`, output scale `sy`.
fn qdq_matmul(k: usize, n: usize, w: i8, zx: u8, sx: f32, sw: f32, sy: f32) -> Graph {
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs = vec![ValueInfo::new("x", DType::F32, &[1, k])];
    g.outputs = vec![ValueInfo::new("y", DType::F32, &[1, n])];
    let init = |g: &mut Graph, name: &str, t: Tensor| {
        g.initializers.insert(name.into(), t);
    };
    init(&mut g, "sx", scalar(sx));
    init(&mut g, "zx", u8_scalar(zx));
    init(&mut g, "sw", scalar(sw));
    init(
        &mut g,
        "wq",
        Tensor::new(vec![k, n], Data::I8(vec![w; k * n])).unwrap(),
    );
    init(&mut g, "sy", scalar(sy));
    init(&mut g, "zy", u8_scalar(128));
    g.nodes = vec![
        Node::new("qx", "QuantizeLinear", &["x", "sx", "zx"], &["xq"]),
        Node::new("dqx", "DequantizeLinear", &["xq", "sx", "zx"], &["xf"]),
        Node::new("dqw", "DequantizeLinear", &["wq", "sw"], &["wf"]),
        Node::new("mm", "MatMul", &["xf", "wf"], &["m"]),
        Node::new("qy", "QuantizeLinear", &["m", "sy", "zy"], &["yq"]),
        Node::new("dqy", "DequantizeLinear", &["yq", "sy", "zy"], &["y"]),
    ];
    g
}

#[test]
fn an_accumulator_that_can_overflow_int32_is_an_error() {
    // 255 · 127 · K > 2^31 − 1 from K = 66 313 on: 70 000 overflows, 60 000 does not.
    let k = 70_000;
    let r = check(&qdq_matmul(k, 2, 127, 0, 1.0 / 255.0, 0.01, 0.05)).unwrap();
    assert_eq!(r.layers.len(), 1);
    let l = &r.layers[0];
    assert_eq!((l.node.as_str(), l.k, l.channels), ("mm", k, 2));
    assert_eq!(l.worst_accumulator, 255.0 * 127.0 * k as f64);
    assert!(l.headroom_bits < 0.0);
    let e: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    assert_eq!(e.len(), 1, "{:?}", r.findings);
    assert_eq!(e[0].node.as_deref(), Some("mm"));
    assert!(e[0].message.contains("overflow"), "{}", e[0].message);
    assert!(r.has_errors());

    // A mid-range zero point halves max |x − z|: 128 · 127 · 70 000 fits.
    let r = check(&qdq_matmul(k, 2, 127, 127, 1.0 / 255.0, 0.01, 0.05)).unwrap();
    assert_eq!(r.layers[0].worst_accumulator, 128.0 * 127.0 * k as f64);
    assert!(!r.has_errors(), "{:?}", r.findings);
    let r = check(&qdq_matmul(60_000, 2, 127, 0, 1.0 / 255.0, 0.01, 0.05)).unwrap();
    assert!(!r.has_errors(), "{:?}", r.findings);
}

#[test]
fn a_multiplier_without_fixed_point_form_is_an_error() {
    // M = s_x · s_w / s_y = 1 · 1 / 1e-10 = 1e10 ≥ 2^30.
    let r = check(&qdq_matmul(16, 4, 3, 0, 1.0, 1.0, 1e-10)).unwrap();
    let l = &r.layers[0];
    let (lo, hi) = l.multiplier.unwrap();
    assert!((lo - 1e10).abs() / 1e10 < 1e-6 && (hi - lo).abs() < 1e-3 * lo);
    assert!(l.shift.is_none());
    let e: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    assert_eq!(e.len(), 1, "{:?}", r.findings);
    assert_eq!(e[0].target, Target::FixedPoint);
    assert!(e[0].message.contains("fixed-point"), "{}", e[0].message);

    // M = (1/255) · 0.01 / 0.05 ≈ 7.8e-4 = M0 · 2^(shift − 31) with shift −10.
    let r = check(&qdq_matmul(16, 4, 3, 0, 1.0 / 255.0, 0.01, 0.05)).unwrap();
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(r.layers[0].shift, Some((-10, -10)));

    // M = 2 needs a left shift: a note, not an error.
    let r = check(&qdq_matmul(16, 4, 3, 0, 1.0, 1.0, 0.5)).unwrap();
    assert!(!r.has_errors());
    assert!(r.findings.iter().any(|f| f.severity == Severity::Note
        && f.target == Target::FixedPoint
        && f.message.contains("left shift")));
    assert_eq!(r.layers[0].shift, Some((2, 2)));

    // A multiplier below 2^−32 flushes to zero: a warning.
    let r = check(&qdq_matmul(16, 4, 3, 0, 1e-6, 1e-6, 1.0)).unwrap();
    assert!(!r.has_errors());
    assert!(r
        .findings
        .iter()
        .any(|f| f.severity == Severity::Warning && f.message.contains("flushes")));
}

#[test]
fn vpmaddubsw_pairs_are_counted_along_k() {
    // Every weight 127: each pair sums to 254 ≥ 129, all K/2 pairs per column at risk.
    let r = check(&qdq_matmul(16, 4, 127, 0, 1.0 / 255.0, 0.01, 0.05)).unwrap();
    assert_eq!(r.layers[0].maddubs_pairs_at_risk, Some((32, 32)));
    assert!(r
        .findings
        .iter()
        .any(|f| f.target == Target::OnnxRuntime && f.severity == Severity::Warning));
    // Weights of 64: pairs sum to 128, 255 · 128 = 32 640 ≤ 32 767: no risk.
    let r = check(&qdq_matmul(16, 4, 64, 0, 1.0 / 255.0, 0.01, 0.05)).unwrap();
    assert_eq!(r.layers[0].maddubs_pairs_at_risk, Some((0, 32)));
    assert!(r.findings.is_empty(), "{:?}", r.findings);
}

#[test]
fn qlinear_conv_is_checked_like_its_qdq_form() {
    // QLinearConv, 3 output channels of 2·3·3 = 18 weights each, 8-channel... K = 18.
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs = vec![ValueInfo::new("x", DType::U8, &[1, 2, 5, 5])];
    g.outputs = vec![ValueInfo::new("y", DType::U8, &[1, 3, 3, 3])];
    let w: Vec<i8> = (0..54).map(|i| (i % 7) as i8 - 3).collect();
    for (n, t) in [
        ("xs", scalar(0.02)),
        ("xz", u8_scalar(10)),
        (
            "w",
            Tensor::new(vec![3, 2, 3, 3], Data::I8(w.clone())).unwrap(),
        ),
        ("ws", Tensor::from_f32(&[3], vec![0.1, 0.2, 0.4])),
        ("wz", Tensor::new(vec![3], Data::I8(vec![0, 0, 0])).unwrap()),
        ("ys", scalar(1e-12)),
        ("yz", u8_scalar(0)),
        (
            "b",
            Tensor::new(vec![3], Data::I32(vec![5, -7, 1000])).unwrap(),
        ),
    ] {
        g.initializers.insert(n.into(), t);
    }
    g.nodes = vec![Node::new(
        "qconv",
        "QLinearConv",
        &["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
        &["y"],
    )
    .with_attr("kernel_shape", AttrValue::Ints(vec![3, 3]))];
    let r = check(&g).unwrap();
    let l = &r.layers[0];
    assert_eq!((l.k, l.channels), (18, 3));
    // Worst channel: max|x − 10| = 245, Σ|w| of the channel, plus |bias|.
    let worst = (0..3)
        .map(|c| {
            245.0
                * w[c * 18..(c + 1) * 18]
                    .iter()
                    .map(|&v| f64::from(v).abs())
                    .sum::<f64>()
                + [5.0, 7.0, 1000.0][c]
        })
        .fold(0.0, f64::max);
    assert_eq!(l.worst_accumulator, worst);
    // M = 0.02 · 0.4 / 1e-12 = 8e9 ≥ 2^30 for the last channel.
    assert!(r.has_errors());
    assert!(r.findings[0].message.contains("channel"));
}

#[test]
fn a_float_model_has_nothing_to_check_and_says_so() {
    let mut g = qdq_matmul(16, 4, 3, 0, 1.0, 1.0, 1.0);
    // Keep only the MatMul on float initializers.
    g.nodes.retain(|n| n.name == "mm");
    g.nodes[0].inputs = vec!["x".into(), "wf".into()];
    g.nodes[0].outputs = vec!["y".into()];
    g.initializers
        .insert("wf".into(), Tensor::from_f32(&[16, 4], vec![0.5; 64]));
    let r = check(&g).unwrap();
    assert!(r.layers.is_empty());
    assert!(!r.has_errors());
    assert!(r.findings[0].message.contains("nothing was checked"));
    // An empty scale tensor (malformed) is not an operand: no panic, nothing claimed.
    let mut g = qdq_matmul(16, 4, 3, 0, 1.0, 1.0, 1.0);
    g.initializers
        .insert("sw".into(), Tensor::from_f32(&[0], vec![]));
    let r = check(&g).unwrap();
    assert!(r.layers.is_empty());
}
