//! Calibration does not depend on the order of the data (issue 20, item 5).
//!
//! - **Batch order:** the same batches in another order give bit-identical ranges for every
//!   method except the moving average (whose point is to weight recent batches): min/max
//!   merges exactly, and the histogram's state is a function of the multiset of values seen
//!   (power-of-two bins that only ever merge pairwise, `observer/histogram.rs`), so
//!   percentile, entropy and MSE choose from identical histograms.
//! - **Sample order** (the same samples cut into other batches of 8 or 5): bit-identical
//!   too, since the float executor computes each sample's activations independently of its
//!   batch neighbours.
//! - **One sample per call**: the executor's GEMM takes a matrix-vector path that sums in
//!   another order, so activations differ in their last bits (measured: 1.1e-7 of a range's
//!   width for lenet's min/max). Bound asserted: 1e-5 of the range width for min/max, one
//!   histogram bin (≤ 1/1024 of the width) for percentile, entropy and MSE.

use quantkit_core::CalibrationMethod;
use quantkit_data::source::ArrayDataset;
use quantkit_data::{open_data, BatchOptions, DataSource, OpenOptions};
use quantkit_graph::load_model;
use quantkit_ptq::{calibrate, prepare, qdq, CalibrateOptions, QdqOptions};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The first `n` samples of the committed Fashion-MNIST sample, one `Vec` per sample.
fn samples(n: usize) -> (Vec<Vec<f32>>, Vec<usize>) {
    let mut d = open_data(
        repo().join("data/fashion-mnist-sample"),
        &OpenOptions::default(),
    )
    .unwrap();
    let b = d
        .batches(&BatchOptions {
            batch_size: n,
            limit: Some(n),
            ..Default::default()
        })
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let per: usize = b.shape[1..].iter().product();
    (
        b.data.chunks(per).map(<[f32]>::to_vec).collect(),
        b.shape[1..].to_vec(),
    )
}

type Ranges = BTreeMap<String, Vec<(f32, f32)>>;

/// Calibrates `model` on `order` (indices into `xs`), `batch` samples per executor call.
fn ranges(
    model: &str,
    xs: &[Vec<f32>],
    shape: &[usize],
    order: &[usize],
    batch: usize,
    method: CalibrationMethod,
) -> Ranges {
    let mut g = load_model(repo().join(format!("models/{model}.onnx"))).unwrap();
    prepare(&mut g).unwrap();
    let plan = qdq::plan(&g, &HashSet::new()).unwrap();
    let wanted: HashSet<String> = plan.activations.iter().cloned().collect();
    assert!(wanted.len() > 3, "{model}: {} activations", wanted.len());
    let data: Vec<f32> = order.iter().flat_map(|&i| xs[i].iter().copied()).collect();
    let ds = ArrayDataset::new("calib", data, shape.to_vec(), None).unwrap();
    let mut source = DataSource::Samples(Box::new(ds));
    let cal = calibrate(
        &g,
        &mut source,
        &wanted,
        &CalibrateOptions {
            method,
            limit: None,
            batch_size: batch,
        },
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(cal.samples, order.len());
    let scheme = QdqOptions::default().activation_scheme();
    cal.observers
        .iter()
        .map(|(t, o)| (t.clone(), o.ranges(&scheme).unwrap()))
        .collect()
}

/// The largest move of a range end between two calibrations, relative to the range width.
fn largest_move(a: &Ranges, b: &Ranges) -> (f64, String) {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "observed tensors differ"
    );
    let mut worst = (0.0, String::new());
    for (t, ra) in a {
        for (&(lo, hi), &(lo2, hi2)) in ra.iter().zip(&b[t]) {
            let width = f64::from(hi - lo).max(f64::MIN_POSITIVE);
            let m = f64::from((lo - lo2).abs()).max(f64::from((hi - hi2).abs())) / width;
            if m > worst.0 {
                worst = (m, t.clone());
            }
        }
    }
    worst
}

#[test]
fn batch_and_sample_order_do_not_change_calibration() {
    const N: usize = 48;
    const BATCH: usize = 8;
    let (xs, shape) = samples(N);
    let forward: Vec<usize> = (0..N).collect();
    // The six batches in reverse order, each batch's samples unchanged.
    let batches_reversed: Vec<usize> = (0..N / BATCH)
        .rev()
        .flat_map(|b| b * BATCH..(b + 1) * BATCH)
        .collect();
    // A fixed permutation of the samples (7 is coprime to 48): other batch compositions.
    let shuffled: Vec<usize> = (0..N).map(|i| (i * 7 + 3) % N).collect();
    let mut check = shuffled.clone();
    check.sort_unstable();
    assert_eq!(check, forward);
    let methods = [
        CalibrationMethod::MinMax,
        CalibrationMethod::Percentile(99.9),
        CalibrationMethod::Entropy,
        CalibrationMethod::Mse,
    ];
    for model in ["lenet", "resnet8"] {
        for method in methods {
            let base = ranges(model, &xs, &shape, &forward, BATCH, method);
            let rev = ranges(model, &xs, &shape, &batches_reversed, BATCH, method);
            assert!(
                base == rev,
                "{model} {method:?}: reversed batch order moved a range by {:?} of its width",
                largest_move(&base, &rev)
            );
            // Other batch compositions, same batch size and another one that divides no
            // batch evenly: bit-identical.
            for batch in [BATCH, 5] {
                let other = ranges(model, &xs, &shape, &shuffled, batch, method);
                assert!(
                    base == other,
                    "{model} {method:?}: sample order (batch {batch}) moved a range by {:?} \
                     of its width",
                    largest_move(&base, &other)
                );
            }
            // One sample per call: the executor's GEMM takes its matrix-vector path, whose
            // summation order differs, so activations differ in the last bits. The bound:
            // 1e-5 of the range width for min/max (a few f32 ulps), one histogram bin (at
            // most 1/1024 of the width: 2048 power-of-two bins span at least half of it) for
            // the histogram methods.
            let single = ranges(model, &xs, &shape, &forward, 1, method);
            let (moved, tensor) = largest_move(&base, &single);
            let bound = match method {
                CalibrationMethod::MinMax => 1e-5,
                _ => 1.0 / 1024.0,
            };
            println!("{model} {method:?}: batch 1 moves a range by {moved:.3e} ({tensor})");
            assert!(
                moved <= bound,
                "{model} {method:?}: batch size 1 moved `{tensor}`'s range by {moved:.3e} of \
                 its width (bound {bound:.3e})"
            );
        }
    }
}
