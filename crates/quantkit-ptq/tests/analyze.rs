//! `quantkit_ptq::analyze`: local and propagated SQNR agree with a direct computation, and
//! a deliberately destroyed layer is ranked first and recovers the output when left float.

use quantkit_core::ErrorMetrics;
use quantkit_graph::{execute, execute_with, AttrValue, DType, Graph, Node, Tensor, ValueInfo};
use quantkit_ptq::analyze::{analyze, AnalyzeOptions, Feed, Setup};
use quantkit_ptq::{PtqConfig, QdqOptions};

mod common;
use common::rand_vec;

fn graph(name: &str, side: usize) -> Graph {
    common::graph_io(name, &[1, 1, side, side], "logits")
}

fn init(g: &mut Graph, name: &str, shape: &[usize], v: Vec<f32>) {
    g.initializers
        .insert(name.into(), Tensor::from_f32(shape, v));
}

fn feeds(batches: usize, n: usize, side: usize, seed: u64) -> Vec<Feed> {
    (0..batches)
        .map(|b| {
            let v: Vec<f32> = rand_vec(n * side * side, 1.0, seed + b as u64)
                .iter()
                .map(|x| x.abs())
                .collect();
            vec![("x".to_string(), Tensor::from_f32(&[n, 1, side, side], v))]
        })
        .collect()
}

/// x[N,1,8,8] → conv1(1→4, 3×3) → relu1 → conv2(4→3, 3×3) → flatten → fc(→5).
fn small() -> Graph {
    let mut g = graph("small", 8);
    init(&mut g, "w1", &[4, 1, 3, 3], rand_vec(36, 0.6, 1));
    init(&mut g, "b1", &[4], rand_vec(4, 0.1, 2));
    init(&mut g, "w2", &[3, 4, 3, 3], rand_vec(108, 0.3, 3));
    init(&mut g, "b2", &[3], rand_vec(3, 0.1, 4));
    init(&mut g, "wf", &[48, 5], rand_vec(240, 0.2, 5));
    init(&mut g, "bf", &[5], rand_vec(5, 0.1, 6));
    g.nodes = vec![
        Node::new("conv1", "Conv", &["x", "w1", "b1"], &["c1"]),
        Node::new("relu1", "Relu", &["c1"], &["r1"]),
        Node::new("conv2", "Conv", &["r1", "w2", "b2"], &["c2"]),
        Node::new("flat", "Flatten", &["c2"], &["f"]),
        Node::new("fc", "Gemm", &["f", "wf", "bf"], &["logits"]),
    ];
    g
}

fn qdq(x: &[f32], (s, z): (f32, i32)) -> Vec<f32> {
    x.iter()
        .map(|&v| {
            let q = ((v / s).round_ties_even() as i32 + z).clamp(0, 255);
            (q - z) as f32 * s
        })
        .collect()
}

fn f32s(g: &Graph, name: &str) -> Vec<f32> {
    g.initializers[name].to_f32_vec()
}

fn ints(g: &Graph, name: &str) -> Vec<f32> {
    let t = &g.initializers[name];
    match &t.data {
        quantkit_graph::Data::I8(v) => v.iter().map(|&x| f32::from(x)).collect(),
        quantkit_graph::Data::I32(v) => v.iter().map(|&x| x as f32).collect(),
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn local_and_propagated_sqnr_match_a_direct_computation() {
    let calib = feeds(3, 8, 8, 100);
    let eval = feeds(2, 6, 8, 200);
    let setup = Setup::new(small(), &PtqConfig::default(), &calib, &mut |_, _| {}).unwrap();
    let report = analyze(&setup, &eval, &AnalyzeOptions::default(), &mut |_, _, _| {}).unwrap();
    let conv2 = report.layers.iter().find(|l| l.name == "conv2").unwrap();
    let c1 = report.layers.iter().find(|l| l.name == "conv1").unwrap();
    assert_eq!(c1.op, "Conv+Relu");
    assert_eq!(conv2.output.as_deref(), Some("c2"));
    let q = setup.quantized().unwrap();

    // Direct: conv2 by hand on the float r1 — input through Q/DQ with r1's parameters,
    // weight and bias dequantized from the QDQ graph's initializers, output through c2's Q/DQ.
    let ws = f32s(&q, "conv2.w_scale");
    let w: Vec<f32> = ints(&q, "conv2.w_q")
        .iter()
        .enumerate()
        .map(|(i, v)| v * ws[i / 36])
        .collect();
    let bs = f32s(&q, "conv2.b_scale");
    let b: Vec<f32> = ints(&q, "conv2.b_q")
        .iter()
        .zip(&bs)
        .map(|(v, s)| v * s)
        .collect();
    let mut one = Graph {
        nodes: vec![Node::new("c", "Conv", &["i", "w", "b"], &["o"])],
        opset_imports: vec![(String::new(), 13)],
        ..Default::default()
    };
    one.inputs
        .push(ValueInfo::new("i", DType::F32, &[6, 4, 6, 6]));
    one.outputs
        .push(ValueInfo::new("o", DType::F32, &[6, 3, 4, 4]));
    init(&mut one, "w", &[3, 4, 3, 3], w);
    init(&mut one, "b", &[3], b);
    let (mut reference, mut local, mut propagated) = (vec![], vec![], vec![]);
    for feed in &eval {
        let mut vals = std::collections::HashMap::new();
        execute_with(&setup.float, feed.clone(), |n, t| {
            vals.insert(n.to_string(), t.clone());
        })
        .unwrap();
        let r1 = qdq(vals["r1"].as_f32().unwrap(), setup.act["r1"]);
        let o = execute(
            &one,
            vec![("i".into(), Tensor::from_f32(&[6, 4, 6, 6], r1))],
        )
        .unwrap();
        local.extend(qdq(o[0].1.as_f32().unwrap(), setup.act["c2"]));
        reference.extend_from_slice(vals["c2"].as_f32().unwrap());
        execute_with(&q, feed.clone(), |n, t| {
            if n == "c2_dq" {
                propagated.extend_from_slice(t.as_f32().unwrap());
            }
        })
        .unwrap();
    }
    let direct_local = ErrorMetrics::compute(&reference, &local).unwrap();
    let direct_prop = ErrorMetrics::compute(&reference, &propagated).unwrap();
    let (l, p) = (conv2.local.unwrap(), conv2.propagated.unwrap());
    eprintln!(
        "conv2 local {:.3} dB (direct {:.3}), propagated {:.3} dB (direct {:.3})",
        l.sqnr_db, direct_local.sqnr_db, p.sqnr_db, direct_prop.sqnr_db
    );
    assert!(
        (l.sqnr_db - direct_local.sqnr_db).abs() < 0.05,
        "{l:?} {direct_local:?}"
    );
    assert!(
        (p.sqnr_db - direct_prop.sqnr_db).abs() < 1e-6,
        "{p:?} {direct_prop:?}"
    );
    assert!((p.max_abs - direct_prop.max_abs).abs() < 1e-6);
    // Accumulated error: the propagated figure is no better than the local one here.
    assert!(p.sqnr_db < l.sqnr_db + 0.5);
    // Weight error of conv2 against the float weight, per tensor and per channel.
    let we = &conv2.weights[0];
    assert_eq!(we.tensor, "w2");
    assert_eq!(we.channels.len(), 3);
    assert!(we.total.sqnr_db > 30.0, "{:?}", we.total);
    // Every layer got sensitivity (no top_k), and the whole-model figures are finite.
    assert!(report.layers.iter().all(|l| l.sensitivity.is_some()));
    assert!(report.output.sqnr_db.is_finite());
    assert_eq!(report.samples, 12);
    // A zero time budget still runs the first candidate.
    let opts = AnalyzeOptions {
        top_k: None,
        budget: Some(std::time::Duration::ZERO),
        ..Default::default()
    };
    let r = analyze(&setup, &eval, &opts, &mut |_, _, _| {}).unwrap();
    assert_eq!(
        r.layers.iter().filter(|l| l.sensitivity.is_some()).count(),
        1
    );
}

/// x[N,1,10,10] → conv1(1→8) → relu1 → conv2(8→8) → relu2 → conv3(8→8) → relu3 → flatten
/// → fc(→10). `destroy`: conv2's channel 0 weights ×1000 and conv3's weights reading that
/// channel ÷1000 — the same function, but per-tensor weights and a 1000× activation range
/// flatten every other channel of conv2 to zero.
fn conv_net(destroy: bool) -> Graph {
    let mut g = graph("convnet", 10);
    init(&mut g, "w1", &[8, 1, 3, 3], rand_vec(72, 0.6, 11));
    init(&mut g, "b1", &[8], rand_vec(8, 0.05, 12));
    let mut w2 = rand_vec(576, 0.25, 13);
    let mut w3 = rand_vec(576, 0.25, 14);
    if destroy {
        for v in &mut w2[..72] {
            *v *= 1000.0;
        }
        for o in 0..8 {
            for v in &mut w3[o * 72..o * 72 + 9] {
                *v /= 1000.0;
            }
        }
    }
    init(&mut g, "w2", &[8, 8, 3, 3], w2);
    init(&mut g, "b2", &[8], vec![0.0; 8]);
    init(&mut g, "w3", &[8, 8, 3, 3], w3);
    init(&mut g, "b3", &[8], rand_vec(8, 0.05, 15));
    init(&mut g, "wf", &[72, 10], rand_vec(720, 0.15, 16));
    init(&mut g, "bf", &[10], rand_vec(10, 0.1, 17));
    let pad = |n: Node| n.with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1]));
    g.nodes = vec![
        pad(Node::new("conv1", "Conv", &["x", "w1", "b1"], &["c1"])),
        Node::new("relu1", "Relu", &["c1"], &["r1"]),
        Node::new("conv2", "Conv", &["r1", "w2", "b2"], &["c2"]),
        Node::new("relu2", "Relu", &["c2"], &["r2"]),
        Node::new("conv3", "Conv", &["r2", "w3", "b3"], &["c3"]),
        Node::new("relu3", "Relu", &["c3"], &["r3"]),
        Node::new("pool", "MaxPool", &["r3"], &["p"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![2, 2]))
            .with_attr("strides", AttrValue::Ints(vec![2, 2])),
        Node::new("flat", "Flatten", &["p"], &["f"]),
        Node::new("fc", "Gemm", &["f", "wf", "bf"], &["logits"]),
    ];
    g
}

#[test]
fn a_destroyed_layer_ranks_first_and_leaving_it_float_recovers_the_output() {
    let config = PtqConfig {
        qdq: QdqOptions {
            per_channel: false,
            ..Default::default()
        },
        ..Default::default()
    };
    let calib = feeds(4, 8, 10, 300);
    let eval = feeds(4, 8, 10, 400);
    let healthy = Setup::new(conv_net(false), &config, &calib, &mut |_, _| {}).unwrap();
    let healthy = analyze(
        &healthy,
        &eval,
        &AnalyzeOptions::default(),
        &mut |_, _, _| {},
    )
    .unwrap();
    let setup = Setup::new(conv_net(true), &config, &calib, &mut |_, _| {}).unwrap();
    let mut stages = Vec::new();
    let report = analyze(
        &setup,
        &eval,
        &AnalyzeOptions {
            top_k: Some(3),
            budget: None,
            ..Default::default()
        },
        &mut |s, d, t| stages.push((s, d, t)),
    )
    .unwrap();
    for l in &report.layers {
        eprintln!(
            "{:8} {:10} w {:7.2} local {:7.2} (worst ch {:7.2}) prop {:7.2} sens {:?}",
            l.name,
            l.op,
            l.weights.first().map_or(f64::NAN, |w| w.total.sqnr_db),
            l.local.map_or(f64::NAN, |s| s.sqnr_db),
            l.local_worst_channel.map_or(f64::NAN, |s| s.sqnr_db),
            l.propagated.map_or(f64::NAN, |s| s.sqnr_db),
            l.sensitivity.map(|s| (
                s.left_float.sqnr_db,
                s.recovered,
                s.only_quantized.unwrap().sqnr_db
            ))
        );
    }
    eprintln!(
        "output: healthy {:.2} dB top-1 {:?}, destroyed {:.2} dB top-1 {:?}",
        healthy.output.sqnr_db,
        healthy.output.top1_agreement,
        report.output.sqnr_db,
        report.output.top1_agreement
    );
    // The destroyed layer ruins the model ...
    assert!(report.output.sqnr_db < healthy.output.sqnr_db - 10.0);
    // ... is ranked first ...
    let first = &report.layers[0];
    assert_eq!(first.name, "conv2");
    assert_eq!(first.op, "Conv+Relu");
    // ... though its tensor SQNR, dominated by the outlier channel, looks healthy: the
    // flattened channels show in its worst channel (and in conv3's local SQNR, which
    // includes conv3's input Q/DQ).
    assert!(first.local.unwrap().sqnr_db > 30.0);
    assert!(
        first.local_worst_channel.unwrap().sqnr_db < 3.0,
        "{first:?}"
    );
    // ... and leaving it float recovers most of the output error.
    let s = first.sensitivity.unwrap();
    assert!(s.recovered > 0.9, "{s:?}");
    assert!(s.left_float.sqnr_db > report.output.sqnr_db + 10.0, "{s:?}");
    // Its weight error shows the outlier channel: the other channels are flattened.
    let w = &first.weights[0];
    assert_eq!(w.channels.len(), 8);
    assert!(w.channels[0].sqnr_db > 30.0);
    assert!(w.channels[1..].iter().all(|c| c.sqnr_db < 5.0), "{w:?}");
    // top_k: sensitivity ran on three layers only; progress was reported as each stage
    // began (done 0, with the layers the sensitivity passes take) and for passes and layers.
    assert_eq!(
        report
            .layers
            .iter()
            .filter(|l| l.sensitivity.is_some())
            .count(),
        3
    );
    use quantkit_ptq::analyze::Stage;
    let want: Vec<(Stage, usize, usize)> = (0..=4)
        .map(|d| (Stage::Passes, d, 4))
        .chain((0..=3).map(|d| (Stage::Sensitivity, d, 3)))
        .collect();
    assert_eq!(stages, want);
}

/// The graph analyze measures is the one `quantize_static` writes from the same data: same
/// preparation, plan, calibration and parameters.
#[test]
fn setup_quantizes_as_quantize_static_does() {
    let calib = feeds(3, 8, 10, 500);
    let dir = std::env::temp_dir().join(format!("quantkit-ptq-analyze-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let npy = dir.join("calib.npy");
    let all: Vec<f32> = calib
        .iter()
        .flat_map(|f| f[0].1.as_f32().unwrap().to_vec())
        .collect();
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let mut header =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (24, 1, 10, 10), }".to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in &all {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(&npy, bytes).unwrap();
    let config = PtqConfig {
        batch_size: 8,
        ..Default::default()
    };
    let mut data = quantkit_data::open_data(&npy, &Default::default()).unwrap();
    let (expected, _) =
        quantkit_ptq::quantize_static(conv_net(false), &mut data, &config, &mut |_, _| {}).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let setup = Setup::new(conv_net(false), &config, &calib, &mut |_, _| {}).unwrap();
    let got = setup.quantized().unwrap();
    assert_eq!(got.nodes, expected.nodes);
    assert_eq!(got.initializers, expected.initializers);
}

/// The search's ranking runs its sensitivity passes on a few batches and only the
/// left-in-float pass: the share recovered is then that of those batches, computed from
/// the same graphs a direct run gives, and the other pass is left out.
#[test]
fn sensitivity_on_a_subset_of_batches_matches_a_direct_run_on_those_batches() {
    use quantkit_ptq::analyze::{sensitivity_batches, sensitivity_cost};
    use quantkit_ptq::mixed::{MixedConfig, Precision};
    assert_eq!(sensitivity_batches(&[2; 6], Some(4)), vec![0, 3]);
    assert_eq!(sensitivity_batches(&[2; 6], Some(5)), vec![0, 2, 4]);
    assert_eq!(sensitivity_batches(&[2; 6], Some(1)), vec![0]);
    assert_eq!(
        sensitivity_batches(&[2; 6], Some(12)),
        (0..6).collect::<Vec<_>>()
    );
    assert_eq!(
        sensitivity_batches(&[2; 6], None),
        (0..6).collect::<Vec<_>>()
    );
    // Two full passes per layer were the old estimate; one pass over a quarter of the
    // samples from the middle of the graph costs an eighth of one pass.
    assert_eq!(sensitivity_cost(2, 0.0, 10.0, 1.0, 1.0), 20.0);
    assert_eq!(sensitivity_cost(1, 0.5, 10.0, 0.25, 0.5), 1.75);

    let calib = feeds(3, 8, 8, 100);
    let eval = feeds(6, 2, 8, 300);
    let setup = Setup::new(small(), &PtqConfig::default(), &calib, &mut |_, _| {}).unwrap();
    let opts = AnalyzeOptions {
        sensitivity_samples: Some(4),
        left_float_only: true,
        ..Default::default()
    };
    let r = analyze(&setup, &eval, &opts, &mut |_, _, _| {}).unwrap();
    assert_eq!(r.samples, 12);
    assert_eq!(r.sensitivity_samples, 4);
    let noise = |g: &Graph| -> f64 {
        [0, 3]
            .iter()
            .map(|&b| {
                let f = execute(&setup.float, eval[b].clone()).unwrap();
                let q = execute(g, eval[b].clone()).unwrap();
                f[0].1
                    .as_f32()
                    .unwrap()
                    .iter()
                    .zip(q[0].1.as_f32().unwrap())
                    .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
                    .sum::<f64>()
            })
            .sum()
    };
    let all = noise(&setup.quantized().unwrap());
    assert!(all > 0.0);
    for l in &r.layers {
        let s = l.sensitivity.as_ref().expect("every layer ran");
        assert!(s.only_quantized.is_none(), "{}", l.name);
        let mut c = MixedConfig::default();
        c.set(&l.name, Precision::Float);
        let direct = 1.0 - noise(&setup.mixed(&c).unwrap()) / all;
        assert!(
            (s.recovered - direct).abs() < 1e-9,
            "{}: {} vs {direct}",
            l.name,
            s.recovered
        );
    }
}
