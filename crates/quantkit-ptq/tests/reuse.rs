//! `quantkit_ptq::reuse`: graphs run from a cut of a kept run give the outputs of a full run
//! bit for bit — float fallback, int16 activations, 4-bit weights, mixtures, the
//! sensitivity graphs of `analyze` (one layer float, only one layer quantized, against the
//! float run) — with fewer nodes run; a budget too small for any cut runs everything in
//! full; early stopping gives the figures of a plain measurement.

mod common;
use common::rand_vec;

use quantkit_graph::{AttrValue, Graph, Node, Tensor};
use quantkit_ptq::analyze::{Feed, Setup};
use quantkit_ptq::mixed::{Evaluation, MixedConfig, Precision};
use quantkit_ptq::reuse::{parse_bytes, run_full, Keep, Reuse};
use quantkit_ptq::{PtqConfig, QdqOptions};

fn init(g: &mut Graph, name: &str, shape: &[usize], v: Vec<f32>) {
    g.initializers
        .insert(name.into(), Tensor::from_f32(shape, v));
}

fn feeds(batches: usize, n: usize, seed: u64) -> Vec<Feed> {
    (0..batches)
        .map(|b| {
            let v = rand_vec(n * 64, 1.0, seed + b as u64);
            vec![("x".to_string(), Tensor::from_f32(&[n, 1, 8, 8], v))]
        })
        .collect()
}

/// x[N,1,8,8] → conv1 → relu → conv2 → relu → conv3 (+ the conv2 output: a residual) →
/// relu → conv4 → relu → flatten → fc(→10): six quantized layers, a value live across a
/// cut (the residual).
fn model() -> Graph {
    let mut g = common::graph_io("chain", &[1, 1, 8, 8], "logits");
    init(&mut g, "w1", &[6, 1, 3, 3], rand_vec(54, 0.6, 1));
    init(&mut g, "b1", &[6], rand_vec(6, 0.05, 2));
    for (i, s) in [(2, 3u64), (3, 5), (4, 7)] {
        init(
            &mut g,
            &format!("w{i}"),
            &[6, 6, 3, 3],
            rand_vec(324, 0.25, s),
        );
        init(&mut g, &format!("b{i}"), &[6], rand_vec(6, 0.05, s + 1));
    }
    init(&mut g, "wf", &[384, 10], rand_vec(3840, 0.08, 9));
    init(&mut g, "bf", &[10], rand_vec(10, 0.1, 10));
    let pad = |n: Node| n.with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1]));
    g.nodes = vec![
        pad(Node::new("conv1", "Conv", &["x", "w1", "b1"], &["c1"])),
        Node::new("relu1", "Relu", &["c1"], &["r1"]),
        pad(Node::new("conv2", "Conv", &["r1", "w2", "b2"], &["c2"])),
        Node::new("relu2", "Relu", &["c2"], &["r2"]),
        pad(Node::new("conv3", "Conv", &["r2", "w3", "b3"], &["c3"])),
        Node::new("add", "Add", &["c3", "r2"], &["a3"]),
        Node::new("relu3", "Relu", &["a3"], &["r3"]),
        pad(Node::new("conv4", "Conv", &["r3", "w4", "b4"], &["c4"])),
        Node::new("relu4", "Relu", &["c4"], &["r4"]),
        Node::new("flat", "Flatten", &["r4"], &["f"]),
        Node::new("fc", "Gemm", &["f", "wf", "bf"], &["logits"]),
    ];
    g
}

fn setup(calib: &[Feed]) -> Setup {
    let cfg = PtqConfig {
        qdq: QdqOptions {
            weight_bits: 8,
            ..Default::default()
        },
        ..Default::default()
    };
    Setup::new(model(), &cfg, calib, &mut |_, _| {}).unwrap()
}

fn bits(outs: &[Vec<(String, Tensor)>]) -> Vec<Vec<u32>> {
    outs.iter()
        .flat_map(|o| o.iter())
        .map(|(_, t)| t.as_f32().unwrap().iter().map(|x| x.to_bits()).collect())
        .collect()
}

/// Configurations like the search's: float fallback, int16 on a prefix, 4-bit weights,
/// and mixtures, each of a late and of an early layer.
fn configs(layers: &[String]) -> Vec<(String, MixedConfig)> {
    let one = |l: &str, p: Precision| {
        let mut c = MixedConfig::default();
        c.set(l, p);
        (format!("{} {l}", p.name()), c)
    };
    let mut out = Vec::new();
    for l in layers {
        for p in [Precision::Float, Precision::Act16, Precision::Weight4] {
            out.push(one(l, p));
        }
    }
    let mut mix = MixedConfig::default();
    mix.set(&layers[2], Precision::Act16);
    mix.set(&layers[3], Precision::Float);
    mix.set(&layers[4], Precision::Weight4);
    out.push(("mixed".into(), mix.clone()));
    mix.set(&layers[3], Precision::Int8);
    out.push(("mixed, one back to int8".into(), mix));
    out
}

#[test]
fn runs_from_a_cut_equal_full_runs_bit_for_bit() {
    let calib = feeds(2, 8, 100);
    let data = feeds(3, 5, 200);
    let s = setup(&calib);
    let layers: Vec<String> = s.layer_names().into_iter().map(|(l, _)| l).collect();
    assert!(layers.len() >= 5, "{layers:?}");
    let int8 = s.mixed(&MixedConfig::default()).unwrap();
    // The search's int8 graph is the one `analyze` runs: the kept run serves both.
    assert!(s.quantized().unwrap() == int8);
    let mut reuse = Reuse::new(&data, 64 << 20, 3);
    // The int8 run, kept: it runs in full.
    let mut first = reuse.session(&int8, Keep::Pin);
    let got: Vec<_> = (0..data.len())
        .map(|bi| reuse.batch(&mut first, bi).unwrap())
        .collect();
    reuse.finish(first);
    assert_eq!(bits(&got), bits(&run_full(&int8, &data).unwrap()));
    // In full, and its first batch twice: it recorded the sizes of its values without
    // keeping them, then kept the values of the cuts they chose.
    assert_eq!(reuse.first_batch_reruns, 1);
    assert_eq!(
        reuse.nodes_run,
        reuse.nodes_full + reuse.nodes_full / data.len()
    );
    assert!(reuse.bytes() > 0, "the int8 run was not kept");
    // A budget whose share per run holds a quarter of one batch's values (scaled to the 3
    // batches): the first batch holds at most that share while it runs, never every value
    // it computes (which it held before: several times the budget on a large model), and
    // the run is still kept with the cuts that fit.
    let every_value: usize = {
        let mut total = 0;
        quantkit_graph::execute_with(&int8, data[0].clone(), |_, t| total += t.nbytes()).unwrap();
        total
    };
    let runs = 3;
    let budget = every_value * data.len() * runs / 4;
    let mut tight = Reuse::new(&data, budget, runs);
    let mut s0 = tight.session(&int8, Keep::Pin);
    let got: Vec<_> = (0..data.len())
        .map(|bi| tight.batch(&mut s0, bi).unwrap())
        .collect();
    tight.finish(s0);
    assert_eq!(bits(&got), bits(&run_full(&int8, &data).unwrap()));
    assert!(tight.bytes() > 0, "no cut fits a quarter");
    assert!(
        tight.bytes() <= budget / runs,
        "{} of {}",
        tight.bytes(),
        budget / runs
    );
    let held = tight.held_peak_bytes;
    assert!(
        held > 0 && held * data.len() <= budget / runs,
        "{held} of {every_value}"
    );
    // A second run of the same graph knows its sizes: its first batch runs once.
    let mut s1 = tight.session(&int8, Keep::Recent);
    for bi in 0..data.len() {
        tight.batch(&mut s1, bi).unwrap();
    }
    tight.finish(s1);
    assert_eq!(tight.first_batch_reruns, 1);
    assert!(tight.held_peak_bytes * data.len() <= budget / runs);
    let mut late_saved = false;
    for (what, c) in configs(&layers) {
        let g = s.mixed(&c).unwrap();
        let want = run_full(&g, &data).unwrap();
        let (r0, f0) = (reuse.nodes_run, reuse.nodes_full);
        // Kept among the recent runs too, so later configurations may start from them.
        let mut run = reuse.session(&g, Keep::Recent);
        let got: Vec<_> = (0..data.len())
            .map(|bi| reuse.batch(&mut run, bi).unwrap())
            .collect();
        reuse.finish(run);
        assert_eq!(
            bits(&got),
            bits(&want),
            "{what}: outputs differ from a full run"
        );
        let (run_n, full_n) = (reuse.nodes_run - r0, reuse.nodes_full - f0);
        // A first batch run twice (its values' sizes not predicted) costs one batch more.
        assert!(run_n <= full_n + full_n / data.len(), "{what}");
        eprintln!("{what}: {run_n} of {full_n} nodes");
        if what.ends_with(layers.last().unwrap()) {
            // The last layer changed: everything before it comes from a cut.
            assert!(run_n * 2 < full_n, "{what}: {run_n} of {full_n}");
            late_saved = true;
        }
    }
    assert!(late_saved);
    assert!(reuse.nodes_run < reuse.nodes_full);
    // A budget that holds no cut: everything in full, the same outputs.
    let mut none = Reuse::new(&data, 16, 3);
    let mut first = none.session(&int8, Keep::Pin);
    for bi in 0..data.len() {
        none.batch(&mut first, bi).unwrap();
    }
    none.finish(first);
    assert_eq!(none.bytes(), 0);
    let (what, c) = &configs(&layers)[layers.len() * 3 - 3];
    let g = s.mixed(c).unwrap();
    assert_eq!(
        bits(&none.run_all(&g).unwrap()),
        bits(&run_full(&g, &data).unwrap()),
        "{what}"
    );
    assert_eq!(none.nodes_run, none.nodes_full);
}

#[test]
fn sensitivity_and_early_stopping_match_full_runs() {
    let calib = feeds(2, 8, 300);
    let data = feeds(4, 5, 400);
    let s = setup(&calib);
    // analyze through a reuse cache against a plain analyze: the same figures exactly
    // (sensitivity graphs run from cuts of the int8 and of the float run).
    let opts = quantkit_ptq::analyze::AnalyzeOptions {
        top_k: None,
        budget: None,
        ..Default::default()
    };
    let mut reuse = Reuse::new(&data, 64 << 20, 3);
    let a = quantkit_ptq::analyze::analyze_with(&s, &data, &opts, &mut |_, _, _| {}, &mut reuse)
        .unwrap();
    assert!(reuse.nodes_run < reuse.nodes_full);
    let mut off = Reuse::new(&data, 0, 3);
    let b =
        quantkit_ptq::analyze::analyze_with(&s, &data, &opts, &mut |_, _, _| {}, &mut off).unwrap();
    assert_eq!(off.nodes_run, off.nodes_full);
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    // measure_until through the cache, stopped early or not: the figures of a plain one.
    let eval = Evaluation::new(&s, &data, None).unwrap();
    let layers: Vec<String> = s.layer_names().into_iter().map(|(l, _)| l).collect();
    for (what, c) in configs(&layers) {
        let g = s.mixed(&c).unwrap();
        for stop in [None, Some(0.999_999)] {
            let want = eval.measure_until(&g, stop).unwrap();
            let mut run = reuse.session(&g, Keep::Recent);
            let got = eval
                .measure_until_with(&mut |bi, _| Ok(reuse.batch(&mut run, bi).unwrap()), stop)
                .unwrap();
            reuse.finish(run);
            assert_eq!(
                format!("{:?}", got),
                format!("{:?}", want),
                "{what}, stop below {stop:?}"
            );
        }
    }
}

#[test]
fn budgets_parse() {
    assert_eq!(parse_bytes("0"), Some(0));
    assert_eq!(parse_bytes("1024"), Some(1024));
    assert_eq!(parse_bytes("512M"), Some(512 << 20));
    assert_eq!(parse_bytes("2g"), Some(2 << 30));
    assert_eq!(parse_bytes("1.5KiB"), Some(1536));
    assert_eq!(parse_bytes("lots"), None);
    assert_eq!(parse_bytes("-1"), None);
}
