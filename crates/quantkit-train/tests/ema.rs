//! Weight averaging in QAT (`Qat::enable_ema`): the averaged model is the moving average of
//! the trained parameters computed by hand beside the training, it is what the export
//! writes, exact mode on it equals the integer engine on its export, and its exact plans
//! are never mixed up with the training model's.

use std::borrow::Cow;

use quantkit_graph::{Graph, Tensor as GTensor};
use quantkit_train::losses::LossKind;
use quantkit_train::optim::Adam;
use quantkit_train::qat::{Qat, QatOptions};

mod common;
use common::{root, sample};

fn lenet_w4a8(observer_steps: usize) -> Qat {
    let mut float = quantkit_graph::load_model(root().join("models/lenet.onnx")).unwrap();
    quantkit_ptq::prepare(&mut float).unwrap();
    let mut calib = quantkit_data::open_data(
        root().join("data/fashion-mnist-sample"),
        &quantkit_data::OpenOptions::default(),
    )
    .unwrap();
    let mut cfg = quantkit_ptq::PtqConfig {
        calib_samples: Some(256),
        ..Default::default()
    };
    cfg.qdq.weight_bits = 4;
    let (qdq, _) =
        quantkit_ptq::quantize_static(float.clone(), &mut calib, &cfg, &mut |_, _| {}).unwrap();
    Qat::from_ptq(
        &float,
        &qdq,
        &QatOptions {
            weight_bits: 4,
            lsq: true,
            observer_steps,
            ..Default::default()
        },
    )
    .unwrap()
}

/// The trainable parameters' values, by index in the store (`None`: not trainable).
fn trainable(q: &Qat) -> Vec<Option<Vec<f32>>> {
    q.net
        .params
        .iter()
        .map(|p| p.trainable.then(|| p.value.data().to_vec()))
        .collect()
}

fn top1(y: &GTensor) -> Vec<usize> {
    let k = y.shape[1];
    y.to_f32_vec()
        .chunks(k)
        .map(|r| {
            (0..k)
                .reduce(|b, i| if r[i] > r[b] { i } else { b })
                .unwrap()
        })
        .collect()
}

fn initializers_equal(a: &Graph, b: &Graph) -> bool {
    a.initializers.len() == b.initializers.len()
        && a.initializers
            .iter()
            .all(|(n, t)| b.initializers.get(n).is_some_and(|u| u.data == t.data))
}

/// LeNet W4A8 with LSQ, 16 Adam steps at a high learning rate with `--ema 0.8`: after each
/// step the average `a ← 0.8·a + 0.2·p`, computed here from the parameters the training
/// model holds, equals `Qat::averaged`'s parameters; the export of the averaged model is
/// the export of the training model with those parameters written in (and not the last
/// step's); exact mode on it gives the engine's logits bit for bit on 488 held-out images;
/// a plan of one model is refused by the other.
#[test]
fn the_average_is_what_exports_and_exact_mode_equals_the_engine() {
    let (x, labels) = sample();
    let mut qat = lenet_w4a8(0);
    assert!(matches!(qat.deployed().unwrap(), Cow::Borrowed(_)));
    qat.enable_ema(0.8, false).unwrap();
    // The decay as the average uses it: the f32 given, widened.
    let d = f64::from(0.8f32);
    let mut avg: Vec<Option<Vec<f64>>> = trainable(&qat)
        .into_iter()
        .map(|p| p.map(|v| v.into_iter().map(f64::from).collect()))
        .collect();
    assert!(avg.iter().flatten().count() >= 8, "weights, biases, scales");
    // The same average in the form the implementation updates it (`a += (1 − d)(p − a)`,
    // timm's lerp), which rounds alike, for the bit-exact comparison of the export.
    let mut lerp = avg.clone();
    let (per, batch, steps) = (784, 32, 16);
    let mut opt = Adam::new(0.0);
    for s in 0..steps {
        let xb = GTensor::from_f32(
            &[batch, 1, 28, 28],
            x[s * batch * per..(s + 1) * batch * per].to_vec(),
        );
        qat.train_step(
            &mut opt,
            xb,
            LossKind::CrossEntropy,
            Some(&labels[s * batch..(s + 1) * batch]),
            None,
            3e-3,
        )
        .unwrap();
        for ((a, l), p) in avg.iter_mut().zip(&mut lerp).zip(trainable(&qat)) {
            if let (Some(a), Some(l), Some(p)) = (a, l, p) {
                for ((a, l), p) in a.iter_mut().zip(l.iter_mut()).zip(p) {
                    *a = d * *a + (1.0 - d) * f64::from(p);
                    *l += (1.0 - d) * (f64::from(p) - *l);
                }
            }
        }
    }
    let e = qat.ema().unwrap();
    assert_eq!(e.updates(), steps as u64);
    assert!((e.start_weight() - d.powi(steps as i32)).abs() < 1e-12);
    let averaged = qat.averaged();
    let (mut moved, mut n) = (0, 0);
    for ((a, got), now) in avg.iter().zip(trainable(&averaged)).zip(trainable(&qat)) {
        let (Some(a), Some(got), Some(now)) = (a, got, now) else {
            continue;
        };
        for ((a, g), p) in a.iter().zip(&got).zip(&now) {
            let want = *a as f32;
            assert!(
                (g - want).abs() <= 1e-6 * want.abs().max(1e-3),
                "averaged {g} against {want} by hand"
            );
            moved += usize::from((g - p).abs() > 1e-7);
            n += 1;
        }
    }
    assert!(
        moved * 2 > n,
        "the average is not the last step: {moved}/{n} differ"
    );

    // The export is the averaged model's.
    let out = averaged.export().unwrap();
    assert!(!initializers_equal(&out, &qat.export().unwrap()));
    let mut by_hand = qat.clone();
    for (p, a) in by_hand.net.params.iter_mut().zip(&lerp) {
        if let Some(a) = a {
            let v: Vec<f32> = a.iter().map(|&a| a as f32).collect();
            p.value.data_mut().copy_from_slice(&v);
        }
    }
    let hand = by_hand.export().unwrap();
    let same_codes = out
        .initializers
        .iter()
        .filter(|(_, t)| !matches!(t.dtype, quantkit_graph::DType::F32))
        .all(|(k, t)| hand.initializers[k].data == t.data);
    assert!(
        same_codes,
        "weight and bias codes of the hand-averaged model"
    );
    let deployed = qat.deployed().unwrap();
    assert!(matches!(deployed, Cow::Owned(_)));
    assert!(initializers_equal(&deployed.export().unwrap(), &out));

    // Exact mode on the averaged model = the engine on its export.
    let plan = quantkit_engine::compile(&out, &Default::default()).unwrap();
    let exact = averaged
        .exact_plan(&out, &plan, quantkit_engine::RequantMode::Float)
        .unwrap();
    let held = 1000 - steps * batch;
    let xe = GTensor::from_f32(&[held, 1, 28, 28], x[steps * batch * per..].to_vec());
    let xy = averaged.predict_exact(xe.clone(), &exact).unwrap();
    let name = out.inputs[0].name.clone();
    let ey = plan.run(vec![(name, xe.clone())]).unwrap().remove(0).1;
    assert_eq!(xy.to_f32_vec(), ey.to_f32_vec(), "exact mode logits");
    assert_eq!(top1(&xy), top1(&ey));
    // Plans are not interchangeable between the averaged and the training model.
    let err = qat
        .predict_exact(xe.clone(), &exact)
        .expect_err("averaged plan");
    assert!(err.to_string().contains("averaged"), "{err}");
    let own = qat.export().unwrap();
    let own_plan = quantkit_engine::compile(&own, &Default::default()).unwrap();
    let own_exact = qat
        .exact_plan(&own, &own_plan, quantkit_engine::RequantMode::Float)
        .unwrap();
    assert!(averaged.predict_exact(xe, &own_exact).is_err());
}

/// While the observers move activation ranges the average restarts at every step: it
/// covers only the steps after them.
#[test]
fn the_average_starts_after_the_observers() {
    let (x, labels) = sample();
    let mut qat = lenet_w4a8(5);
    qat.enable_ema(0.9, true).unwrap();
    let mut opt = Adam::new(0.0);
    let (per, batch) = (784, 16);
    for s in 0..8 {
        let xb = GTensor::from_f32(
            &[batch, 1, 28, 28],
            x[s * batch * per..(s + 1) * batch * per].to_vec(),
        );
        qat.train_step(
            &mut opt,
            xb,
            LossKind::CrossEntropy,
            Some(&labels[s * batch..(s + 1) * batch]),
            None,
            1e-3,
        )
        .unwrap();
        if s < 5 {
            assert_eq!(qat.ema().unwrap().updates(), 0, "step {s}");
            assert_eq!(trainable(&qat.averaged()), trainable(&qat));
        }
    }
    assert_eq!(qat.ema().unwrap().updates(), 3);
    assert!(qat.enable_ema(1.0, false).is_err());
}
