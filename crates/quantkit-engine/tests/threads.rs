//! The integer engine's outputs do not depend on the number of threads (issue 20, item 5):
//! every zoo model in QDQ, QOperator and dynamic form, run in rayon pools of 1, 2 and 4
//! threads, gives bit-identical outputs under both requantization modes. The kernels split
//! work by output rows, channels or tiles, never the reduction, so no sum is reassociated;
//! this test pins that. (Equality across instruction sets is `isa_equality.rs`; this test
//! runs under the process's ISA, which CI also runs with `QUANTKIT_ISA=scalar` through
//! that test's children.)

mod common;

use common::repo;
use quantkit_data::{open_data, BatchOptions, OpenOptions};
use quantkit_engine::{compile, EngineOptions, RequantMode};
use quantkit_graph::{load_model, Graph, Tensor};
use quantkit_ptq::{quantize_dynamic, quantize_static, to_qoperator, PtqConfig};

/// The first `n` samples of the committed Fashion-MNIST sample as one batch.
fn sample(n: usize) -> Tensor {
    let path = repo().join("data/fashion-mnist-sample");
    let mut d = open_data(&path, &OpenOptions::default()).unwrap();
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
