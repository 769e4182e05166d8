//! The narrow-width starting point of QAT (`QatInit::Mse`, docs/qat.md "The starting
//! point") on the committed LeNet at W4A4 against PTQ's min/max start: lower activation
//! error on the float activations of the calibration images, weight error never above
//! max/q_max's per channel, the EMA observers leave the calibrated ranges alone, and the
//! export still runs on the engine with exact mode equal to it.

use std::collections::HashMap;

use quantkit_graph::{Graph, Tensor as GTensor};
use quantkit_train::graph::GraphNet;
use quantkit_train::qat::{Qat, QatInit, QatOptions};

mod common;
use common::root;

const SAMPLES: usize = 128;

fn setup() -> (Graph, Graph, quantkit_data::DataSource) {
    let mut float = quantkit_graph::load_model(root().join("models/lenet.onnx")).unwrap();
    quantkit_ptq::prepare(&mut float).unwrap();
    let opts = quantkit_data::OpenOptions::default();
    let mut calib =
        quantkit_data::open_data(root().join("data/fashion-mnist-sample"), &opts).unwrap();
    let mut cfg = quantkit_ptq::PtqConfig {
        calib_samples: Some(SAMPLES),
        ..Default::default()
    };
    cfg.qdq.weight_bits = 4;
    let (qdq, _) =
        quantkit_ptq::quantize_static(float.clone(), &mut calib, &cfg, &mut |_, _| {}).unwrap();
    (float, qdq, calib)
}

fn batch(data: &mut quantkit_data::DataSource) -> GTensor {
    let b = data
        .batches(&quantkit_data::BatchOptions {
            batch_size: SAMPLES,
            limit: Some(SAMPLES),
            ..Default::default()
        })
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    GTensor::from_f32(&b.shape, b.data)
}

fn sq_err(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum()
}

/// `(tensor, scale values, qmax, is_weight)` of every fake-quant step.
fn quantizers(q: &Qat) -> Vec<(String, Vec<f32>, i32, bool)> {
    q.net
        .fake_quants()
        .map(|(_, f, _, ss)| {
            (
                f.tensor.clone(),
                q.net.stored(ss).unwrap().to_f32_vec(),
                f.qmax,
                f.is_weight,
            )
        })
        .collect()
}

#[test]
fn mse_start_beats_minmax_at_four_bits_and_exports_exactly() {
    let (float, qdq, mut calib) = setup();
    let ranges =
        quantkit_train::qat_init::activation_ranges(&float, &mut calib, 4, false, SAMPLES).unwrap();
    let opts = |init| QatOptions {
        weight_bits: 4,
        activation_bits: 4,
        init,
        ..Default::default()
    };
    let old = Qat::from_ptq(&float, &qdq, &opts(QatInit::MinMax)).unwrap();
    let new = Qat::from_ptq(
        &float,
        &qdq,
        &opts(QatInit::Mse {
            activation_ranges: ranges.clone(),
        }),
    )
    .unwrap();
    // A narrow activation without a calibrated range is an error naming it.
    let mut missing = ranges.clone();
    let first = new
        .net
        .fake_quants()
        .find(|(_, f, _, _)| !f.is_weight)
        .map(|(_, f, _, _)| f.tensor.clone())
        .unwrap();
    missing.remove(&first);
    let e = Qat::from_ptq(
        &float,
        &qdq,
        &opts(QatInit::Mse {
            activation_ranges: missing,
        }),
    )
    .unwrap_err();
    assert!(e.to_string().contains(&first), "{e}");

    // Activations: the error of each start's fake quantization on the float model's own
    // activations of the calibration images (the data both were chosen on).
    let x = batch(&mut calib);
    let fnet = GraphNet::build(&float, &HashMap::new(), &HashMap::new()).unwrap();
    let fv = fnet.forward(vec![x.clone()]).unwrap();
    let (mut e_old, mut e_new, mut compared) = (0f64, 0f64, 0);
    let steps_old: Vec<_> = old
        .net
        .fake_quants()
        .map(|(_, f, _, ss)| (f.clone(), ss))
        .collect();
    for ((fo, so), (_, fnq, _, sn)) in steps_old.iter().zip(new.net.fake_quants()) {
        assert_eq!(fo.tensor, fnq.tensor);
        if fo.is_weight || fo.qmax != 15 {
            continue;
        }
        let Some(v) = fnet.slot_of(&fo.tensor).and_then(|s| fv.slot(s)) else {
            continue;
        };
        let xs = v.to_f32_vec();
        let a = sq_err(
            &xs,
            &fo.forward(&xs, &v.shape, &old.net.stored(*so).unwrap().to_f32_vec()),
        );
        let b = sq_err(
            &xs,
            &fnq.forward(&xs, &v.shape, &new.net.stored(sn).unwrap().to_f32_vec()),
        );
        eprintln!(
            "activation `{}`: min/max start {a:.4e}, mse start {b:.4e}",
            fo.tensor
        );
        e_old += a;
        e_new += b;
        compared += 1;
    }
    assert!(compared >= 4, "{compared} activations compared");
    eprintln!("activations: min/max {e_old:.4e}, mse {e_new:.4e}");
    assert!(
        e_new < 0.8 * e_old,
        "mse start {e_new} against min/max {e_old}"
    );

    // Weights: per channel never worse than max/q_max, better overall.
    let (qo, qn) = (quantizers(&old), quantizers(&new));
    let mut weights = 0;
    for (((name, so, qmax, w), (_, sn, _, _)), (_, f, _, _)) in
        qo.iter().zip(&qn).zip(new.net.fake_quants())
    {
        if !w || *qmax != 7 {
            continue;
        }
        weights += 1;
        let t = new.net.stored(new.net.slot_of(name).unwrap()).unwrap();
        let wv = t.to_f32_vec();
        let (eo, en) = (
            sq_err(&wv, &f.forward(&wv, &t.shape, so)),
            sq_err(&wv, &f.forward(&wv, &t.shape, sn)),
        );
        eprintln!("weight `{name}`: max/q_max {eo:.4e}, clip search {en:.4e}");
        assert!(en < eo, "`{name}`");
        for (c, (a, b)) in so.iter().zip(sn).enumerate() {
            assert!(
                b <= a,
                "`{name}` channel {c}: scale {b} above max/q_max's {a}"
            );
        }
    }
    assert_eq!(weights, 4);

    // The observers move the min/max start's ranges and leave the calibrated ones.
    let (mut old, mut new) = (old, new);
    for (i, q) in [&mut old, &mut new].into_iter().enumerate() {
        let before = quantizers(q);
        let v = q.net.forward(vec![x.clone()]).unwrap();
        q.observe(&v).unwrap();
        let after = quantizers(q);
        let moved = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| !b.3 && b.1 != a.1)
            .count();
        if i == 1 {
            assert_eq!(moved, 0, "calibrated ranges moved");
        } else {
            assert!(moved > 0, "the min/max start's observers did not run");
        }
    }

    // The export runs on the engine, and exact mode equals it bit for bit.
    let out = new.export().unwrap();
    let plan = quantkit_engine::compile(&out, &Default::default()).unwrap();
    let exact = new
        .exact_plan(&out, &plan, quantkit_engine::RequantMode::Float)
        .unwrap();
    let name = out.inputs[0].name.clone();
    let ey = plan
        .run(vec![(name.as_str(), x.clone())])
        .unwrap()
        .remove(0)
        .1;
    let xy = new.predict_exact(x, &exact).unwrap();
    assert_eq!(xy.to_f32_vec(), ey.to_f32_vec(), "exact mode = engine");
}
