//! Whole models: the engine against the QDQ graph on the float executor.

mod common;

use common::{argmax_rows, cosine, repo};
use quantkit_data::{open_data, BatchOptions, OpenOptions};
use quantkit_engine::{compile, EngineOptions, Placement, RequantMode};
use quantkit_graph::{execute, load_model, Graph, Tensor};
use quantkit_ptq::{quantize_static, PtqConfig};

/// The committed Fashion-MNIST sample in batches of `batch` (all 1,000 images).
fn sample_batches(batch: usize) -> Vec<(Tensor, Vec<i64>)> {
    let mut d = open_data(
        repo().join("data/fashion-mnist-sample"),
        &OpenOptions::default(),
    )
    .unwrap();
    d.batches(&BatchOptions {
        batch_size: batch,
        ..Default::default()
    })
    .unwrap()
    .map(|b| {
        let b = b.unwrap();
        (Tensor::from_f32(&b.shape, b.data), b.labels.unwrap())
    })
    .collect()
}

fn quantized_lenet() -> Graph {
    let g = load_model(repo().join("models/lenet.onnx")).unwrap();
    let mut data = open_data(
        repo().join("data/fashion-mnist-sample"),
        &OpenOptions::default(),
    )
    .unwrap();
    let config = PtqConfig {
        calib_samples: Some(256),
        ..Default::default()
    };
    quantize_static(g, &mut data, &config, &mut |_, _| {})
        .unwrap()
        .0
}

struct Agreement {
    top1: f64,
    cosine: f64,
    engine_acc: f64,
    reference_acc: f64,
}

fn compare(q: &Graph, opts: &EngineOptions) -> Agreement {
    let plan = compile(q, opts).unwrap();
    let input = q.inputs[0].name.clone();
    let (mut same, mut total, mut ok_e, mut ok_r) = (0, 0, 0, 0);
    let (mut all_e, mut all_r) = (Vec::new(), Vec::new());
    for (x, labels) in sample_batches(100) {
        let want = execute(q, vec![(input.clone(), x.clone())])
            .unwrap()
            .remove(0)
            .1;
        let got = plan.run(vec![(input.as_str(), x)]).unwrap().remove(0).1;
        assert_eq!(got.shape, want.shape);
        let (a, b) = (argmax_rows(&got), argmax_rows(&want));
        for ((e, r), l) in a.iter().zip(&b).zip(&labels) {
            same += usize::from(e == r);
            ok_e += usize::from(*e as i64 == *l);
            ok_r += usize::from(*r as i64 == *l);
            total += 1;
        }
        all_e.extend(got.to_f32_vec());
        all_r.extend(want.to_f32_vec());
    }
    assert_eq!(total, 1000);
    Agreement {
        top1: same as f64 / total as f64,
        cosine: cosine(&all_e, &all_r),
        engine_acc: ok_e as f64 / total as f64,
        reference_acc: ok_r as f64 / total as f64,
    }
}

#[test]
fn lenet_engine_agrees_with_the_qdq_reference() {
    let q = quantized_lenet();
    let plan = compile(&q, &EngineOptions::default()).unwrap();
    // Both convs and both Gemms must really run as integer kernels, and each max pool
    // inside the conv before it.
    for op in ["Conv", "Gemm", "MaxPool"] {
        let nodes: Vec<_> = plan.report().iter().filter(|n| n.op_type == op).collect();
        assert!(!nodes.is_empty());
        for n in nodes {
            let ok = match (&n.placement, op) {
                (Placement::Fused { into }, "MaxPool") => into.starts_with("conv"),
                (placement, _) => matches!(placement, Placement::Integer { .. }),
            };
            assert!(ok, "{} ({op}) is {:?}", n.node, n.placement);
        }
    }
    let placement = |node: &str| {
        &plan
            .report()
            .iter()
            .find(|n| n.node == node)
            .unwrap()
            .placement
    };
    // fc1 reads pool2's NHWC codes in place; the input normalisation and its
    // QuantizeLinear are one step.
    let fused = |into: &str| Placement::Fused { into: into.into() };
    assert_eq!(*placement("flatten"), fused("fc1"));
    assert!(
        matches!(placement("normalize.sub"), Placement::Integer { kernel } if kernel.contains("sub, div, quantize")),
        "{:?}",
        placement("normalize.sub")
    );
    assert_eq!(*placement("normalize"), fused("normalize.sub"));
    assert_eq!(*placement("normalize_Q"), fused("normalize.sub"));
    let steps: Vec<String> = plan.steps().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        steps,
        ["normalize.sub", "conv1", "conv2", "fc1", "fc2", "output_DQ"]
    );
    for mode in [RequantMode::Float, RequantMode::FixedPoint] {
        let a = compare(
            &q,
            &EngineOptions {
                requant: mode,
                ..Default::default()
            },
        );
        println!(
            "lenet {mode:?}: top-1 agreement {:.4}, cosine {:.6}, accuracy engine {:.3} / QDQ reference {:.3}",
            a.top1, a.cosine, a.engine_acc, a.reference_acc
        );
        assert!(a.top1 >= 0.995, "top-1 agreement {}", a.top1);
        assert!(a.cosine > 0.999, "cosine {}", a.cosine);
    }
}

#[test]
#[ignore = "real model from ../shared/models, a few seconds in the dev profile: run with -- --ignored"]
fn mtcnn_rnet_engine_agrees_with_the_qdq_reference() {
    let d = common::shared().join("models/mtcnn");
    if !d.join("rnet.onnx").is_file() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but {} is missing",
            d.display()
        );
        eprintln!("skipping: {} not found", d.join("rnet.onnx").display());
        return;
    }
    let g = load_model(d.join("rnet.onnx")).unwrap();
    let input = g.inputs[0].name.clone();
    let mut data = open_data(d.join("rnet_input.npy"), &OpenOptions::default()).unwrap();
    let (q, _) = quantize_static(g, &mut data, &PtqConfig::default(), &mut |_, _| {}).unwrap();
    let plan = compile(&q, &EngineOptions::default()).unwrap();
    for n in plan.report() {
        if let Placement::Float { reason } = &n.placement {
            eprintln!("float island {} ({}): {reason}", n.node, n.op_type);
        }
    }
    let integer_convs = plan
        .report()
        .iter()
        .filter(|n| n.op_type == "Conv" && matches!(n.placement, Placement::Integer { .. }))
        .count();
    assert!(
        integer_convs > 0,
        "no conv of R-Net runs as an integer kernel"
    );
    let mut data = open_data(d.join("rnet_input.npy"), &OpenOptions::default()).unwrap();
    let n = data.len();
    let b = data
        .batches(&BatchOptions {
            batch_size: n,
            ..Default::default()
        })
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let x = Tensor::from_f32(&b.shape, b.data);
    let want = execute(&q, vec![(input.clone(), x.clone())]).unwrap();
    let got = plan.run(vec![(input.as_str(), x)]).unwrap();
    // Output 1 is [p(non-face), p(face)].
    let (w, e) = (want[1].1.to_f32_vec(), got[1].1.to_f32_vec());
    let face = |v: &[f32]| v.chunks(2).map(|c| c[1] > 0.5).collect::<Vec<_>>();
    let (fw, fe) = (face(&w), face(&e));
    let agree = fw.iter().zip(&fe).filter(|(a, b)| a == b).count() as f64 / fw.len() as f64;
    let cos = cosine(&e, &w);
    let box_cos = cosine(&got[0].1.to_f32_vec(), &want[0].1.to_f32_vec());
    println!(
        "R-Net ({integer_convs} integer convs): face decision agreement {agree:.4}, probability cosine {cos:.6}, box cosine {box_cos:.6}"
    );
    assert!(agree >= 0.995, "agreement {agree}");
    assert!(cos > 0.999, "cosine {cos}");
}

/// The `engine` fuzz target's find (`fuzz/seeds/models/regress-resize-empty-codes.onnx`): a
/// nearest Resize on codes whose scale (2.9e-42) empties an axis panicked in the gather's
/// per-plane loop. The plan now runs it and gives the QDQ graph's (empty) result.
#[test]
fn nearest_resize_to_an_empty_axis_on_codes_equals_the_graph() {
    let g = load_model(repo().join("fuzz/seeds/models/regress-resize-empty-codes.onnx")).unwrap();
    let x = Tensor::from_f32(
        &[1, 2, 4, 4],
        (0..32).map(|i| i as f32 / 8.0 - 2.0).collect(),
    );
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    let got = plan.run(vec![("x", x.clone())]);
    let want = execute(&g, vec![("x".into(), x)]);
    match (got, want) {
        (Ok(got), Ok(want)) => {
            assert_eq!(got[0].1.shape, want[0].1.shape);
            assert_eq!(got[0].1.to_f32_vec(), want[0].1.to_f32_vec());
        }
        (Err(_), Err(_)) => {}
        (got, want) => panic!("engine {got:?} vs graph {want:?}"),
    }
}
