//! `quantkit_ptq::analyze::{details, weight_picture}` (the HTML report's figures): the
//! histogram, clipping and 8-bit activation error agree with a direct count over the float
//! model's values, the 8-bit weight point is the analysis' own quantized model, and the
//! error picture holds the float and dequantized weights.

use quantkit_graph::{execute_with, Graph, Node, Tensor};
use quantkit_ptq::analyze::{analyze, details, weight_picture, AnalyzeOptions, Feed, Setup};
use quantkit_ptq::PtqConfig;

mod common;
use common::rand_vec;

/// x[N,1,8,8] → conv1(1→4, 3×3) → relu1 → conv2(4→3, 3×3) → flatten → fc(→5).
fn small() -> Graph {
    let mut g = common::graph_io("small", &[1, 1, 8, 8], "logits");
    for (name, shape, a, seed) in [
        ("w1", vec![4, 1, 3, 3], 0.6, 1),
        ("b1", vec![4], 0.1, 2),
        ("w2", vec![3, 4, 3, 3], 0.3, 3),
        ("b2", vec![3], 0.1, 4),
        ("wf", vec![48, 5], 0.2, 5),
        ("bf", vec![5], 0.1, 6),
    ] {
        let n = shape.iter().product();
        g.initializers
            .insert(name.into(), Tensor::from_f32(&shape, rand_vec(n, a, seed)));
    }
    g.nodes = vec![
        Node::new("conv1", "Conv", &["x", "w1", "b1"], &["c1"]),
        Node::new("relu1", "Relu", &["c1"], &["r1"]),
        Node::new("conv2", "Conv", &["r1", "w2", "b2"], &["c2"]),
        Node::new("flat", "Flatten", &["c2"], &["f"]),
        Node::new("fc", "Gemm", &["f", "wf", "bf"], &["logits"]),
    ];
    g
}

/// Batches of |uniform(−a, a)| images.
fn feeds(batches: usize, n: usize, a: f32, seed: u64) -> Vec<Feed> {
    (0..batches)
        .map(|b| {
            let v: Vec<f32> = rand_vec(n * 64, a, seed + b as u64)
                .iter()
                .map(|x| x.abs())
                .collect();
            vec![("x".to_string(), Tensor::from_f32(&[n, 1, 8, 8], v))]
        })
        .collect()
}

#[test]
fn histograms_clipping_and_bit_sweeps_match_a_direct_count() {
    let calib = feeds(3, 8, 1.0, 100);
    // Evaluation inputs up to 1.5 where calibration saw up to 1: the input is clipped.
    let eval = feeds(2, 6, 1.5, 200);
    let setup = Setup::new(small(), &PtqConfig::default(), &calib, &mut |_, _| {}).unwrap();
    let d = details(&setup, &eval, 32, 1000, &mut |_, _| {}).unwrap();
    assert_eq!(d.sweep_samples, 12);
    assert_eq!(d.activations.len(), setup.plan.activations.len());

    // Every value of every activation, from the float model.
    let mut values: std::collections::HashMap<String, Vec<f32>> = Default::default();
    for feed in &eval {
        execute_with(&setup.float, feed.clone(), |name, t| {
            if let Some(x) = t.as_f32() {
                values
                    .entry(name.to_string())
                    .or_default()
                    .extend_from_slice(x);
            }
        })
        .unwrap();
    }
    for a in &d.activations {
        let x = &values[&a.tensor];
        let (s, z) = (f64::from(a.scale), f64::from(a.zero_point));
        assert_eq!(setup.act[&a.tensor], (a.scale, a.zero_point));
        assert_eq!(a.clip, (s * (0.0 - z), s * (255.0 - z)), "{}", a.tensor);
        let below = x
            .iter()
            .filter(|&&v| f64::from(v) < a.clip.0 - s / 2.0)
            .count() as u64;
        let above = x
            .iter()
            .filter(|&&v| f64::from(v) > a.clip.1 + s / 2.0)
            .count() as u64;
        assert_eq!(
            (a.clipped_below, a.clipped_above, a.elements),
            (below, above, x.len() as u64),
            "{}",
            a.tensor
        );
        assert_eq!(a.bins.len(), 32);
        assert_eq!(a.bins.iter().sum::<u64>(), x.len() as u64);
        let (lo, hi) = x.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |m, &v| {
            (m.0.min(f64::from(v)), m.1.max(f64::from(v)))
        });
        assert_eq!(a.observed, (lo, hi));
        assert!(a.hist_range.0 <= lo.min(a.clip.0) && a.hist_range.1 >= hi.max(a.clip.1));
        // The 8-bit point of the sweep is this tensor through its own Q/DQ, in f64.
        let (mut sig, mut noise) = (0.0, 0.0);
        for &v in x {
            let v = f64::from(v);
            let q = ((v / s).round_ties_even() + z).clamp(0.0, 255.0);
            let e = v - (q - z) * s;
            sig += v * v;
            noise += e * e;
        }
        let direct = 10.0 * (sig / noise).log10();
        let (bits, swept) = a.sqnr_by_bits[6];
        assert_eq!(bits, 8);
        assert!(
            (swept - direct).abs() < 1e-3,
            "{}: {swept} vs {direct}",
            a.tensor
        );
        // Rounding error falls ~6 dB per bit; where values are clipped the curve flattens at
        // the top (7 → 8 bits gains far less than 6 dB).
        if a.clipped_fraction == 0.0 {
            assert!(
                a.sqnr_by_bits[0].1 < swept - 20.0,
                "{}: {:?}",
                a.tensor,
                a.sqnr_by_bits
            );
        } else {
            assert!(
                swept - a.sqnr_by_bits[5].1 < 3.0,
                "{}: {:?}",
                a.tensor,
                a.sqnr_by_bits
            );
        }
    }
    let x = d.activations.iter().find(|a| a.tensor == "x").unwrap();
    assert!(x.clipped_above > 0 && x.clipped_below == 0);
    assert!((x.clipped_fraction - x.clipped_above as f64 / x.elements as f64).abs() < 1e-15);

    // The 8-bit weight point is the analysis' quantized model on the same data.
    let report = analyze(
        &setup,
        &eval,
        &AnalyzeOptions {
            top_k: Some(0),
            budget: None,
            ..Default::default()
        },
        &mut |_, _, _| {},
    )
    .unwrap();
    let eight = d.weight_bits.last().unwrap();
    assert_eq!(eight.bits, 8);
    assert_eq!(eight.output.sqnr_db, report.output.sqnr_db);
    for (layer, db) in &eight.layers {
        let l = report.layers.iter().find(|l| &l.name == layer).unwrap();
        let worst = l
            .weights
            .iter()
            .map(|w| w.total.sqnr_db)
            .fold(f64::INFINITY, f64::min);
        assert_eq!(*db, worst, "{layer}");
    }
    assert!(d.weight_bits[0].output.sqnr_db < eight.output.sqnr_db);

    // The picture: the float weight and DequantizeLinear of the QDQ graph's codes.
    let p = weight_picture(&setup, "conv2", 50).unwrap().unwrap();
    assert_eq!(p.shape, vec![3, 4, 3, 3]);
    assert_eq!(p.original.len(), 50);
    let w2 = setup.float.initializers["w2"].to_f32_vec();
    assert_eq!(p.original, w2[..50].to_vec());
    let q = setup.quantized().unwrap();
    let scales = q.initializers["conv2.w_scale"].to_f32_vec();
    let codes = q.initializers["conv2.w_q"].to_f64_vec();
    for (i, &v) in p.dequantized.iter().enumerate() {
        assert_eq!(v, codes[i] as f32 * scales[i / 36], "element {i}");
    }
    assert!(weight_picture(&setup, "flat", 50).unwrap().is_none());
}

#[test]
fn the_weight_sweep_runs_on_the_first_feeds_only() {
    let calib = feeds(2, 8, 1.0, 100);
    let eval = feeds(3, 4, 1.0, 300);
    let setup = Setup::new(small(), &PtqConfig::default(), &calib, &mut |_, _| {}).unwrap();
    // 5 samples: the first two feeds of 4.
    let d = details(&setup, &eval, 16, 5, &mut |_, _| {}).unwrap();
    assert_eq!(d.sweep_samples, 8);
    let report = analyze(
        &setup,
        &eval[..2],
        &AnalyzeOptions {
            top_k: Some(0),
            budget: None,
            ..Default::default()
        },
        &mut |_, _, _| {},
    )
    .unwrap();
    assert_eq!(d.weight_bits[6].output.sqnr_db, report.output.sqnr_db);
    // The histograms still count every evaluation value.
    let x = d.activations.iter().find(|a| a.tensor == "x").unwrap();
    assert_eq!(x.elements, 3 * 4 * 64);
}
