//! The integer engine's outputs do not depend on the number of threads (issue 20, item 5):
//! every zoo model in QDQ, QOperator and dynamic form, run in rayon pools of 1, 2 and 4
//! threads, gives bit-identical outputs under both requantization modes. The kernels split
//! work by output rows, channels or tiles, never the reduction, so no sum is reassociated;
//! this test pins that. (Equality across instruction sets is `isa_equality.rs`; this test
//! runs under the process's ISA, which CI also runs with `QUANTKIT_ISA=scalar` through
//! that test's children.)
//!
//! At batch 1 the split is inside each kernel call (issue 19: output rows, Winograd bands
//! or column panels, GEMM blocks), decided by the work estimate against
//! `par::MIN_TASK_NS`; `batch_one_splits_inside_the_kernels_and_stays_bit_identical`
//! checks that those splits happen (`par::split_calls`) and change nothing.

mod common;

use common::repo;
use quantkit_data::{open_data, BatchOptions, OpenOptions};
use quantkit_engine::{compile, EngineOptions, RequantMode};
use quantkit_graph::{load_model, Graph, Tensor};
use quantkit_kernels::par::{self, SplitKind};
use std::sync::Mutex;

/// The split threshold and counters are process-wide: the tests of this file run one at
/// a time.
static SERIAL: Mutex<()> = Mutex::new(());
use quantkit_ptq::{quantize_dynamic, quantize_static, to_qoperator, PtqConfig};

/// The first `n` samples of the committed Fashion-MNIST sample as one batch.
fn sample(n: usize) -> Tensor {
    first(&repo().join("data/fashion-mnist-sample"), n)
}

/// The first `n` samples of a data source as one batch.
fn first(path: &std::path::Path, n: usize) -> Tensor {
    let mut d = open_data(path, &OpenOptions::default()).unwrap();
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
    Tensor::from_f32(&b.shape, b.data)
}

fn quantized(m: &str) -> Vec<(String, Graph)> {
    let float = load_model(repo().join(format!("models/{m}.onnx"))).unwrap();
    let mut d = open_data(
        repo().join("data/fashion-mnist-sample"),
        &OpenOptions::default(),
    )
    .unwrap();
    let config = PtqConfig {
        calib_samples: Some(32),
        ..Default::default()
    };
    let (q, _) = quantize_static(float.clone(), &mut d, &config, &mut |_, _| {}).unwrap();
    let (qop, _) = to_qoperator(q.clone()).unwrap();
    let (dynamic, _) = quantize_dynamic(float, &PtqConfig::default()).unwrap();
    vec![
        (format!("{m}.qdq"), q),
        (format!("{m}.qoperator"), qop),
        (format!("{m}.dynamic"), dynamic),
    ]
}

/// Bit patterns of every output (the zoo models' outputs are f32).
fn bits(outputs: &[(String, Tensor)]) -> Vec<(String, Vec<u32>)> {
    outputs
        .iter()
        .map(|(n, t)| {
            (
                n.clone(),
                t.to_f32_vec().iter().map(|x| x.to_bits()).collect(),
            )
        })
        .collect()
}

#[test]
fn thread_count_does_not_change_engine_outputs() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Nine images: an odd batch, so row/tile tails land on different threads.
    let x = sample(9);
    let mut compared = 0;
    for m in ["lenet", "resnet8", "mobilenet", "mlp", "autoencoder"] {
        for (name, g) in quantized(m) {
            for mode in [RequantMode::Float, RequantMode::FixedPoint] {
                let opts = EngineOptions {
                    requant: mode,
                    ..Default::default()
                };
                let plan = compile(&g, &opts).unwrap();
                assert!(
                    plan.report().iter().any(|n| n.is_integer()),
                    "{name}: no integer step, nothing to compare"
                );
                let input = g.inputs[0].name.clone();
                let run = |threads: usize| {
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap()
                        .install(|| {
                            assert_eq!(rayon::current_num_threads(), threads);
                            plan.run(vec![(input.clone(), x.clone())]).unwrap()
                        })
                };
                let one = bits(&run(1));
                assert!(one.iter().all(|(_, v)| !v.is_empty()), "{name}: no output");
                for threads in [2, 4] {
                    assert_eq!(
                        bits(&run(threads)),
                        one,
                        "{name} ({mode:?}): {threads} threads differ from 1"
                    );
                }
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 5 * 3 * 2);
}

/// Split counters of every kind.
fn splits() -> Vec<usize> {
    SplitKind::ALL
        .iter()
        .map(|&k| par::split_calls(k))
        .collect()
}

/// Runs `g` on `x` in pools of 1, 2 and 4 threads under both requantization modes: every
/// output equal to the 1-thread one, no split counter raised on 1 thread; returns how
/// many calls of each kind split in the multi-thread runs.
fn split_runs(name: &str, g: &Graph, x: &Tensor) -> Vec<usize> {
    let mut total = vec![0; SplitKind::ALL.len()];
    for mode in [RequantMode::Float, RequantMode::FixedPoint] {
        let opts = EngineOptions {
            requant: mode,
            ..Default::default()
        };
        let plan = compile(g, &opts).unwrap();
        let input = g.inputs[0].name.clone();
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| plan.run(vec![(input.clone(), x.clone())]).unwrap())
        };
        let before = splits();
        let one = bits(&run(1));
        assert_eq!(splits(), before, "{name} ({mode:?}): 1 thread split a call");
        for threads in [2, 4] {
            let before = splits();
            assert_eq!(
                bits(&run(threads)),
                one,
                "{name} ({mode:?}): {threads} threads differ from 1 at batch 1"
            );
            for (t, (a, b)) in total.iter_mut().zip(splits().iter().zip(&before)) {
                *t += a - b;
            }
        }
    }
    total
}

#[test]
fn batch_one_splits_inside_the_kernels_and_stays_bit_identical() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let kind = |k: SplitKind| k as usize;
    // The zoo's 28×28 layers are below the default threshold: split every call with more
    // than one unit of work, so every path of these models runs split.
    par::set_min_task_ns(Some(0.0));
    let x = sample(1);
    let mut zoo = vec![0; SplitKind::ALL.len()];
    for m in ["lenet", "resnet8", "mobilenet"] {
        let (name, g) = quantized(m).swap_remove(0);
        let got = split_runs(&name, &g, &x);
        assert!(got.iter().sum::<usize>() > 0, "{name}: nothing split");
        for (z, g) in zoo.iter_mut().zip(&got) {
            *z += g;
        }
    }
    par::set_min_task_ns(None);
    let which = |v: &[usize]| -> Vec<(SplitKind, usize)> {
        SplitKind::ALL.iter().map(|&k| (k, v[kind(k)])).collect()
    };
    eprintln!("zoo at batch 1, threshold 0: splits {:?}", which(&zoo));
    // Element-wise steps (resnet8's residual Add on codes, tables) split their output too.
    for k in [SplitKind::Gemm, SplitKind::Depthwise, SplitKind::Eltwise] {
        assert!(
            zoo[kind(k)] > 0,
            "no {k:?} split in the zoo: {:?}",
            which(&zoo)
        );
    }
    assert!(
        zoo[kind(SplitKind::Winograd)] + zoo[kind(SplitKind::Direct)] > 0,
        "no 3x3 conv split in the zoo: {:?}",
        which(&zoo)
    );
    assert!(
        zoo[kind(SplitKind::PooledRows)] + zoo[kind(SplitKind::Direct)] > 0,
        "lenet's fused first conv + pool did not split: {:?}",
        which(&zoo)
    );

    // A real model at batch 1 under the default threshold: its large layers split.
    let d = common::shared().join("models/ppocr-cls");
    let (model, input) = (
        d.join("ch_ppocr_mobile_v2.0_cls_infer.onnx"),
        d.join("cls_input.npy"),
    );
    if !model.is_file() || !input.is_file() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but {} is missing",
            model.display()
        );
        eprintln!(
            "skipping the default-threshold half: {} not found",
            model.display()
        );
        return;
    }
    if par::min_task_ns() > par::MIN_TASK_NS {
        eprintln!("skipping the default-threshold half: QUANTKIT_MIN_TASK_NS is above the default");
        return;
    }
    let float = load_model(&model).unwrap();
    let mut data = open_data(&input, &OpenOptions::default()).unwrap();
    let config = PtqConfig {
        calib_samples: Some(8),
        ..Default::default()
    };
    let (q, _) = quantize_static(float, &mut data, &config, &mut |_, _| {}).unwrap();
    let x1 = first(&input, 1);
    let got = split_runs("ppocr-cls", &q, &x1);
    eprintln!(
        "ppocr-cls at batch 1, default threshold: splits {:?}",
        which(&got)
    );
    assert!(
        got.iter().sum::<usize>() > 0,
        "ppocr-cls at batch 1: no call split under the default threshold"
    );
}
