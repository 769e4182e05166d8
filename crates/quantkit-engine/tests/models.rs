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
    // Both convs and both Gemms must really run as integer kernels.
    for op in ["Conv", "Gemm", "MaxPool", "Flatten"] {
        let nodes: Vec<_> = plan.report().iter().filter(|n| n.op_type == op).collect();
        assert!(!nodes.is_empty());
        for n in nodes {
            assert!(
                matches!(n.placement, Placement::Integer { .. }),
                "{} ({op}) is {:?}",
                n.node,
                n.placement
            );
        }
    }
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
