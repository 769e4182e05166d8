//! `--method auto` (issue 18): ranges chosen by the quantized model's output error.
//!
//! 1. A model where the consumers' local error and the model output disagree: an input
//!    with one rare outlier read by MatMul → Clip(0, 1). Run alone, the MatMul needs the
//!    outlier (minmax wins locally); behind the Clip it is discarded, so the output wants
//!    the clipped range and its finer grid. The new rule picks the clipped range, and its
//!    model's output error is lower than the local rule's on fresh data.
//! 2. On the committed MobileNet (HardSwish activations, where minmax ranges are wide),
//!    auto's output error on held-out samples (never seen by calibration or by the search)
//!    is not above minmax's, and auto did move some range (so the comparison is not minmax
//!    against itself; on LeNet nothing passes the paired test and auto is minmax).

mod common;
use common::{rand_vec, repo};

use quantkit_core::{CalibrationMethod, Granularity, Observer};
use quantkit_graph::{execute, execute_with, DType, Dim, Graph, Node, Tensor, ValueInfo};
use quantkit_ptq::analyze::{Feed, Setup};
use quantkit_ptq::auto::{choose_local, Incremental, AUTO_SAMPLES};
use quantkit_ptq::{insert_qdq, PtqConfig};
use std::collections::{BTreeMap, HashMap};

const F: usize = 64;

fn init(g: &mut Graph, name: &str, shape: &[usize], v: Vec<f32>) {
    g.initializers
        .insert(name.into(), Tensor::from_f32(shape, v));
}

/// x[N, 64] → MatMul(identity) → Clip(0, 1) → MatMul(random) → y.
fn clipped() -> Graph {
    let mut g = common::graph_io("clipped", &[1, F], "y");
    let mut eye = vec![0f32; F * F];
    for i in 0..F {
        eye[i * F + i] = 1.0;
    }
    init(&mut g, "eye", &[F, F], eye);
    g.initializers
        .insert("lo".into(), Tensor::from_f32(&[], vec![0.0]));
    g.initializers
        .insert("hi".into(), Tensor::from_f32(&[], vec![1.0]));
    init(&mut g, "w2", &[F, 10], rand_vec(F * 10, 0.5, 7));
    g.nodes = vec![
        Node::new("mm1", "MatMul", &["x", "eye"], &["m"]),
        Node::new("clip", "Clip", &["m", "lo", "hi"], &["u"]),
        Node::new("mm2", "MatMul", &["u", "w2"], &["y"]),
    ];
    g
}

/// `batches` feeds of `n` samples, values in [0, 1); when `outlier`, the first batch's
/// first element is 30 (one element in all the calibration data: below the 0.01 % that
/// percentile=99.99 keeps).
fn feeds(batches: usize, n: usize, seed: u64, outlier: bool) -> Vec<Feed> {
    (0..batches)
        .map(|b| {
            let mut v: Vec<f32> = rand_vec(n * F, 1.0, seed + b as u64)
                .iter()
                .map(|x| x.abs())
                .collect();
            if outlier && b == 0 {
                v[0] = 30.0;
            }
            vec![("x".to_string(), Tensor::from_f32(&[n, F], v))]
        })
        .collect()
}

fn auto_config() -> PtqConfig {
    PtqConfig {
        method: CalibrationMethod::Auto,
        ..Default::default()
    }
}

/// Σ (y − y_float)² / Σ y_float² of output 0 over `data`.
fn output_error(float: &Graph, q: &Graph, data: &[Feed]) -> f64 {
    let (mut n, mut s) = (0f64, 0f64);
    for f in data {
        let r = execute(float, f.clone()).unwrap()[0].1.to_f32_vec();
        let a = execute(q, f.clone()).unwrap()[0].1.to_f32_vec();
        for (x, y) in r.iter().zip(&a) {
            let (x, y) = (f64::from(*x), f64::from(*y));
            s += x * x;
            n += (x - y) * (x - y);
        }
    }
    n / s
}

#[test]
fn output_rule_clips_what_a_later_clip_discards_where_the_local_rule_does_not() {
    let calib = feeds(8, 64, 100, true);
    let setup = Setup::new(clipped(), &auto_config(), &calib, &mut |_, _| {}).unwrap();
    let report = setup.auto.as_ref().expect("auto report");
    let x = report
        .choices
        .iter()
        .find(|c| c.tensor == "x")
        .expect("x is quantized");
    eprintln!("{report:#?}");

    // The local rule on the same observers and selection samples.
    let mut observers: HashMap<String, Box<dyn Observer>> = HashMap::new();
    for f in &calib {
        execute_with(&setup.float, f.clone(), |name, t| {
            if setup.plan.activations.iter().any(|a| a == name) {
                observers
                    .entry(name.to_string())
                    .or_insert_with(|| {
                        CalibrationMethod::Auto.observer(name, Granularity::PerTensor)
                    })
                    .observe(t.as_f32().unwrap(), &t.shape)
                    .unwrap();
            }
        })
        .unwrap();
    }
    let kept = &calib[..(AUTO_SAMPLES / 64).min(calib.len())];
    let (local_act, local) = choose_local(
        &setup.float,
        &setup.plan.activations,
        &observers,
        &setup.options.activation_scheme(),
        kept,
    )
    .unwrap();
    let lx = local.iter().find(|c| c.tensor == "x").unwrap();
    assert_eq!(
        lx.method, "minmax",
        "locally the MatMul needs the outlier: {lx:?}"
    );
    assert_ne!(
        x.method, "minmax",
        "behind Clip(0, 1) the output wants the outlier clipped: {x:?}"
    );
    // The screen (two of three candidates face minmax) keeps mse's [0, 28.2] and
    // entropy's [0, 2.0] here, not percentile's tighter range that the unscreened search
    // picks (`screen_keeping_every_candidate_is_the_full_search`): clipped all the same,
    // the outlier is not kept.
    assert!(
        x.range.1 <= 2.0,
        "clipped to the bulk, not the outlier: {x:?}"
    );

    // The output rule's model is better on data neither rule saw, with and without an
    // outlier.
    let auto_q = setup.quantized().unwrap();
    let local_q = insert_qdq(
        setup.float.clone(),
        &setup.plan,
        &local_act.into_iter().collect::<BTreeMap<_, _>>(),
        &setup.options,
    )
    .unwrap();
    for outlier in [false, true] {
        let fresh = feeds(4, 64, 900, outlier);
        let (ea, el) = (
            output_error(&setup.float, &auto_q, &fresh),
            output_error(&setup.float, &local_q, &fresh),
        );
        eprintln!("outlier {outlier}: output error auto {ea:.3e}, local {el:.3e}");
        assert!(
            ea < 0.5 * el,
            "auto {ea:.3e} should be well below local {el:.3e}"
        );
    }
    assert!(report.auto_error < report.minmax_error);
    assert!(report.auto_check_error <= report.minmax_check_error);
    assert!(report.reverted.is_empty(), "{report:?}");
}

/// The committed 1,000-image sample in batches of 32: the first `calib` images calibrate,
/// the rest is held out.
fn sample_feeds() -> Vec<Feed> {
    let mut d = common::sample_data();
    d.batches(&quantkit_data::BatchOptions {
        batch_size: 32,
        ..Default::default()
    })
    .unwrap()
    .map(|b| {
        let b = b.unwrap();
        vec![("input".to_string(), Tensor::from_f32(&b.shape, b.data))]
    })
    .collect()
}

#[test]
fn auto_is_not_worse_than_minmax_on_held_out_mobilenet_samples() {
    let path = repo().join("models/mobilenet.onnx");
    let g = quantkit_graph::load_model(&path).unwrap();
    let input = g.inputs[0].name.clone();
    let mut data = sample_feeds();
    for f in &mut data {
        f[0].0 = input.clone();
    }
    let (calib, held) = data.split_at(16); // 512 calibration, 488 held-out images
    let mm = Setup::new(g.clone(), &PtqConfig::default(), calib, &mut |_, _| {}).unwrap();
    let au = Setup::new(g, &auto_config(), calib, &mut |_, _| {}).unwrap();
    let report = au.auto.as_ref().unwrap();
    eprintln!("{report:#?}");
    assert!(
        report.choices.iter().any(|c| c.method != "minmax"),
        "auto moved no range: the comparison would be minmax against itself"
    );
    assert_ne!(mm.act, au.act);
    assert!(report.auto_error <= report.minmax_error);
    assert!(report.auto_check_error <= report.minmax_check_error);
    let float = &mm.float;
    let e_mm = output_error(float, &mm.quantized().unwrap(), held);
    let e_au = output_error(float, &au.quantized().unwrap(), held);
    eprintln!("held-out output error: minmax {e_mm:.4e}, auto {e_au:.4e}");
    assert!(
        e_au <= e_mm,
        "auto's held-out output error {e_au:.4e} is above minmax's {e_mm:.4e}"
    );
}

/// The incremental search's evaluation (`auto::Incremental`: each candidate run from the
/// first node it changes, on the cached values crossing that cut) equals a full run of the
/// candidate's QDQ graph bit for bit, on ResNet-8 (residual Adds: the cut carries the skip
/// branch too), with candidates accepted along the way (the base graph moves) and one
/// candidate that changes an earlier tensor than the cut (the cache starts over).
#[test]
fn incremental_evaluation_equals_a_full_rerun_bit_for_bit() {
    let path = repo().join("models/resnet8.onnx");
    let g = quantkit_graph::load_model(&path).unwrap();
    let input = g.inputs[0].name.clone();
    let mut data = sample_feeds();
    for f in &mut data {
        f[0].0 = input.clone();
    }
    let setup = Setup::new(g, &PtqConfig::default(), &data[..2], &mut |_, _| {}).unwrap();
    // Two small batches keep the debug build quick.
    let feeds: Vec<Feed> = (0..2)
        .map(|b| {
            let x = &data[4 + b][0].1;
            let per = x.len() / x.shape[0];
            let mut shape = x.shape.clone();
            shape[0] = 3;
            let v = x.as_f32().unwrap()[..3 * per].to_vec();
            vec![(input.clone(), Tensor::from_f32(&shape, v))]
        })
        .collect();
    let qdq = |act: &BTreeMap<String, (f32, i32)>| {
        insert_qdq(setup.float.clone(), &setup.plan, act, &setup.options).unwrap()
    };
    let mut act = setup.act.clone();
    let mut inc = Incremental::new(qdq(&act), &feeds);
    // Activations in the order their producers run.
    let pos: HashMap<&str, usize> = setup
        .float
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.outputs.iter().map(move |o| (o.as_str(), i + 1)))
        .collect();
    let mut order: Vec<String> = act.keys().cloned().collect();
    order.sort_by_key(|t| pos.get(t.as_str()).copied().unwrap_or(0));
    assert!(order.len() > 5, "{order:?}");
    let mut tried = 0;
    for (k, t) in order.iter().enumerate() {
        let (s, z) = act[t];
        for factor in [0.6f32, 1.3] {
            let mut a = act.clone();
            a.insert(t.clone(), (s * factor, z));
            let mut cand = qdq(&a);
            let full: Vec<Vec<(String, Tensor)>> = feeds
                .iter()
                .map(|f| execute(&cand, f.clone()).unwrap())
                .collect();
            let part = inc.run(&mut cand).unwrap();
            assert_eq!(full, part, "activation `{t}` scaled by {factor}");
            tried += 1;
            if k % 3 == 0 && factor > 1.0 {
                act = a;
                inc.accept(cand);
            }
        }
        if k == order.len() / 2 {
            // Back to the first activation: a change before the cut.
            let first = &order[0];
            let mut a = act.clone();
            a.insert(first.clone(), (act[first].0 * 0.9, act[first].1));
            let mut cand = qdq(&a);
            let full: Vec<Vec<(String, Tensor)>> = feeds
                .iter()
                .map(|f| execute(&cand, f.clone()).unwrap())
                .collect();
            assert_eq!(full, inc.run(&mut cand).unwrap(), "`{first}` after the cut");
        }
    }
    eprintln!(
        "{tried} candidates: {} of {} node evaluations ({:.0} %)",
        inc.nodes_run,
        inc.nodes_full,
        100.0 * inc.nodes_run as f64 / inc.nodes_full as f64
    );
    assert!(
        inc.nodes_run * 10 < inc.nodes_full * 8,
        "the incremental runs should save work: {} of {}",
        inc.nodes_run,
        inc.nodes_full
    );
}

/// The objective of a classifier (issue 18, branch `auto3`): two quantized versions of
/// one float logit row, A moving the runner-up past the winner by 0.3 (a small squared
/// error, a top-1 flip) and B moving a class that has no chance by 3 (a large squared
/// error, the decision intact). The squared error prefers A; the KL divergence of the
/// softmax, computed here from its definition, prefers B, and `OutputKind::Logits`
/// scores exactly that divergence (and `Values` exactly the squared error), so auto on a
/// classifier picks B. Probabilities (a Softmax output) are scored by the same divergence
/// on the probabilities, a zero probability floored rather than infinite.
#[test]
fn classifier_objective_is_the_softmax_kl_and_ranks_unlike_the_squared_error() {
    use quantkit_ptq::auto::{OutputKind, PROB_FLOOR};
    let float = [2.0f32, 1.9, -5.0];
    let a = [2.0f32, 2.2, -5.0];
    let b = [2.0f32, 1.9, -2.0];
    let softmax = |v: &[f32]| -> Vec<f64> {
        let e: Vec<f64> = v.iter().map(|&x| f64::from(x).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    };
    let kl = |p: &[f64], q: &[f64]| -> f64 { p.iter().zip(q).map(|(a, b)| a * (a / b).ln()).sum() };
    let sq = |q: &[f32]| -> f64 {
        float
            .iter()
            .zip(q)
            .map(|(x, y)| f64::from(x - y).powi(2))
            .sum()
    };
    let (kl_a, kl_b) = (
        kl(&softmax(&float), &softmax(&a)),
        kl(&softmax(&float), &softmax(&b)),
    );
    assert!(sq(&a) < sq(&b), "squared error prefers A");
    assert!(kl_b < kl_a, "KL prefers B: {kl_a} vs {kl_b}");
    let (la, lb) = (
        OutputKind::Logits.loss(&float, &a),
        OutputKind::Logits.loss(&float, &b),
    );
    assert!(
        (la - kl_a).abs() < 1e-12 && (lb - kl_b).abs() < 1e-12,
        "{la} {lb}"
    );
    assert!(lb < la);
    assert!((OutputKind::Values.loss(&float, &a) - sq(&a)).abs() < 1e-9);
    assert!(OutputKind::Values.loss(&float, &a) < OutputKind::Values.loss(&float, &b));
    assert_eq!(OutputKind::Logits.loss(&float, &float), 0.0);
    // Probabilities: the same divergence; a quantized 0 is floored at PROB_FLOOR.
    let p: Vec<f32> = softmax(&float).iter().map(|&x| x as f32).collect();
    let q = [0.5f32, 0.5, 0.0];
    let lp = OutputKind::Probabilities.loss(&p, &q);
    let pf: Vec<f64> = p.iter().map(|&x| f64::from(x).max(PROB_FLOOR)).collect();
    let qf: Vec<f64> = q.iter().map(|&x| f64::from(x).max(PROB_FLOOR)).collect();
    let (sp, sq_) = (pf.iter().sum::<f64>(), qf.iter().sum::<f64>());
    let pn: Vec<f64> = pf.iter().map(|x| x / sp).collect();
    let qn: Vec<f64> = qf.iter().map(|x| x / sq_).collect();
    assert!(lp.is_finite() && (lp - kl(&pn, &qn)).abs() < 1e-12, "{lp}");
}

/// Which objective each output gets: a Softmax output (through Identity, as PP-OCR's
/// classifier ends) is probabilities, a lone `[N, C]` output is a classifier's logits,
/// and the box regression beside a Softmax (MTCNN) is values, as is a lone output of
/// one column.
#[test]
fn output_kinds_follow_the_graph() {
    use quantkit_ptq::auto::{output_kinds, OutputKind};
    let out = |name: &str, shape: &[usize]| {
        let mut vi = ValueInfo::new(name, DType::F32, shape);
        vi.shape.as_mut().unwrap()[0] = Dim::Symbolic("N".into());
        vi
    };
    let mut g = Graph {
        name: "heads".into(),
        opset_imports: vec![(String::new(), 13)],
        ..Default::default()
    };
    g.inputs.push(out("x", &[1, 4]));
    g.nodes = vec![
        Node::new("sm", "Softmax", &["x"], &["p"]),
        Node::new("id", "Identity", &["p"], &["prob"]),
        Node::new("neg", "Neg", &["x"], &["box"]),
    ];
    g.outputs = vec![out("prob", &[1, 4])];
    assert_eq!(output_kinds(&g), vec![OutputKind::Probabilities]);
    g.outputs = vec![out("box", &[1, 4])];
    assert_eq!(output_kinds(&g), vec![OutputKind::Logits]);
    g.outputs = vec![out("box", &[1, 4]), out("prob", &[1, 4])];
    assert_eq!(
        output_kinds(&g),
        vec![OutputKind::Values, OutputKind::Probabilities]
    );
    g.outputs = vec![out("box", &[1, 1])];
    assert_eq!(output_kinds(&g), vec![OutputKind::Values]);
    let lenet = quantkit_graph::load_model(repo().join("models/lenet.onnx")).unwrap();
    assert_eq!(output_kinds(&lenet), vec![OutputKind::Logits]);
}

/// Observers as calibration fills them for auto, on `calib`.
fn auto_observers(setup: &Setup, calib: &[Feed]) -> HashMap<String, Box<dyn Observer>> {
    let mut observers: HashMap<String, Box<dyn Observer>> = HashMap::new();
    for f in calib {
        execute_with(&setup.float, f.clone(), |name, t| {
            if setup.plan.activations.iter().any(|a| a == name) {
                observers
                    .entry(name.to_string())
                    .or_insert_with(|| {
                        CalibrationMethod::Auto.observer(name, Granularity::PerTensor)
                    })
                    .observe(t.as_f32().unwrap(), &t.shape)
                    .unwrap();
            }
        })
        .unwrap();
    }
    observers
}

/// The screen (only the `AUTO_SCREEN` candidates with the least local error face minmax
/// in the model) only removes model runs: a screen that keeps every candidate is the
/// unscreened search exactly (same ranges, same scores in the same order, same runs), on
/// LeNet's 8 activations and the clipped model; on LeNet the default screen ends at the
/// same ranges as the full search, on the clipped model at a coarser clip (said below).
#[test]
fn screen_keeping_every_candidate_is_the_full_search() {
    use quantkit_ptq::auto::choose_with;
    let path = repo().join("models/lenet.onnx");
    let g = quantkit_graph::load_model(&path).unwrap();
    let input = g.inputs[0].name.clone();
    let mut data = sample_feeds();
    for f in &mut data {
        f[0].0 = input.clone();
    }
    let calib = &data[..9]; // 288 samples: 192 choose, 96 check
    let cases = [
        (
            Setup::new(g, &auto_config(), calib, &mut |_, _| {}).unwrap(),
            calib.to_vec(),
        ),
        {
            let c = feeds(6, 64, 100, true);
            (
                Setup::new(clipped(), &auto_config(), &c, &mut |_, _| {}).unwrap(),
                c,
            )
        },
    ];
    for (setup, calib) in &cases {
        let obs = auto_observers(setup, calib);
        let run = |screen| {
            choose_with(
                &setup.float,
                &setup.plan,
                &setup.options,
                &obs,
                calib,
                screen,
                &mut |_, _| {},
            )
            .unwrap()
        };
        let (full_act, full) = run(None);
        let (all_act, all) = run(Some(3));
        let (one_act, one) = run(Some(quantkit_ptq::auto::AUTO_SCREEN));
        assert_eq!(full_act, all_act, "{}", setup.float.name);
        assert_eq!(full.model_runs, all.model_runs);
        assert_eq!(all.screened_out, 0);
        for (a, b) in full.choices.iter().zip(&all.choices) {
            assert_eq!(
                (&a.tensor, a.method, &a.scores),
                (&b.tensor, b.method, &b.scores)
            );
        }
        assert!(
            one.screened_out > 0,
            "{}: the screen removed no run",
            setup.float.name
        );
        let tried = |r: &quantkit_ptq::AutoReport| -> usize {
            r.choices
                .iter()
                .map(|c| c.scores.len().saturating_sub(1))
                .sum()
        };
        assert_eq!(tried(&one) + one.screened_out, tried(&full));
        eprintln!(
            "{}: full {} runs, screened {} runs; choices {:?} / {:?}",
            setup.float.name,
            full.model_runs,
            one.model_runs,
            full.choices.iter().map(|c| c.method).collect::<Vec<_>>(),
            one.choices.iter().map(|c| c.method).collect::<Vec<_>>()
        );
        if setup.float.name == "clipped" {
            // Here the screen costs something: locally percentile is the worst of the
            // three (0.37 against entropy's 0.34), so the model never sees it, and the
            // screened search ends at entropy's [0, 2.0] where the full one picks
            // percentile's tighter range. Both clip the outlier.
            let x = |r: &quantkit_ptq::AutoReport| {
                r.choices.iter().find(|c| c.tensor == "x").unwrap().clone()
            };
            assert_eq!(x(&full).method, "percentile", "{:?}", x(&full));
            assert!(x(&full).range.1 < 2.0 && x(&one).range.1 <= 2.0);
        } else {
            assert_eq!(
                full_act, one_act,
                "{}: the screen changed the result",
                setup.float.name
            );
        }
    }
}
