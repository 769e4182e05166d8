//! Training throughput of the zoo models: samples/s of full training steps (forward, loss,
//! backward, optimizer) at a given batch size on rayon's default pool (set
//! `RAYON_NUM_THREADS`).
//!
//! Each architecture is exported to a graph and trained on the graph IR (`graph`: the
//! registry's `eval` and `OpDef::backward`, BatchNormalization in training mode, as
//! `quantkit train` runs it); then the same graph trained with fake quantization at PTQ's
//! points (`qat`, W8A8 as `quantkit qat` runs it; PTQ calibrated on the committed
//! 1,000-image sample) and its cost against the float step per CPU-second, and the
//! fake-quant step alone on the largest weight (forward + backward, the block form against
//! the element-by-element reference). `QUANTKIT_PROFILE=1` adds per-operator forward and
//! backward milliseconds per step.
//!
//! `RAYON_NUM_THREADS=2 cargo run --release -p quantkit-train --example train_bench -- [steps] [batch] [arch...]`

use std::time::Instant;

use quantkit_graph::Tensor as GTensor;
use quantkit_train::losses::LossKind;
use quantkit_train::optim::{Adam, Sgd};
use quantkit_train::rng::Rng;
use quantkit_train::tensor::Tensor;
use quantkit_train::trainer::GraphModel;
use quantkit_train::zoo;

/// User + system CPU seconds of this process (Linux `/proc/self/stat`; `None` elsewhere).
/// On a machine shared with other work, samples per CPU-second is the figure that does not
/// depend on how much of the machine the benchmark happened to get.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Prints and resets the per-operator times recorded since the last call.
fn print_profile(steps: usize) {
    for (name, f, b, n) in quantkit_train::profile::take_profile() {
        println!(
            "    {name:28} fwd {:8.2} ms/step  bwd {:8.2} ms/step  ({} calls/step)",
            f * 1e3 / steps as f64,
            b * 1e3 / steps as f64,
            n / steps
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The allocator settings of the `quantkit` binary (see its `keep_freed_memory`), so this
    // benchmark measures what `quantkit train` runs: glibc keeps freed activation and
    // gradient buffers mapped instead of page-faulting fresh ones every step.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator tunables; no other thread exists yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let steps: usize = args.first().map(|s| s.parse()).transpose()?.unwrap_or(30);
    let batch: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(64);
    let archs: Vec<String> = if args.len() > 2 {
        args[2..].to_vec()
    } else {
        ["lenet", "resnet8", "mobilenet", "mlp", "autoencoder"]
            .map(String::from)
            .to_vec()
    };
    println!(
        "threads: {}, batch {batch}, {steps} timed steps after 3 warm-up steps",
        rayon::current_num_threads()
    );
    let mut rng = Rng::new(7);
    let x: Vec<f32> = (0..batch * 784).map(|_| rng.uniform()).collect();
    let labels: Vec<usize> = (0..batch).map(|_| rng.below(10)).collect();
    for arch in archs {
        let model = zoo::build(&arch, 1)?;
        let graph = quantkit_train::export::to_graph(&model);
        // The graph path as `quantkit train` runs it (BatchNormalization in training mode).
        let mut gm = GraphModel::new(&model)?;
        let mut sgd = Sgd::new(0.9, 5e-4);
        let mut adam = Adam::new(1e-4);
        let opt: &mut dyn quantkit_train::optim::Optimizer =
            if arch == "resnet8" || arch == "mobilenet" {
                &mut sgd
            } else {
                &mut adam
            };
        let mut step = |gm: &mut GraphModel| {
            gm.step(
                opt,
                Tensor::new(&[batch, 1, 28, 28], x.clone())?,
                &labels,
                1e-3,
            )
        };
        for _ in 0..3 {
            step(&mut gm)?;
        }
        let profile = std::env::var_os("QUANTKIT_PROFILE").is_some();
        quantkit_train::profile::set_profiling(profile);
        quantkit_train::profile::take_profile();
        let c0 = cpu_seconds();
        let t = Instant::now();
        for _ in 0..steps {
            step(&mut gm)?;
        }
        let s = t.elapsed().as_secs_f64();
        let cpu = c0.zip(cpu_seconds()).map(|(a, b)| b - a);
        let float_cpu = cpu.map_or(s, |c| c) / steps as f64;
        println!(
            "{arch:12} graph {:>8.0} samples/s wall  {:>8.0} samples/CPU-s  ({:.2} ms/step, {} params)",
            (steps * batch) as f64 / s,
            cpu.map_or(f64::NAN, |c| (steps * batch) as f64 / c),
            s * 1e3 / steps as f64,
            model.num_params()
        );
        if profile {
            print_profile(steps);
        }
        // QAT with cross-entropy: the classifiers (`quantkit qat --loss mse` trains the
        // autoencoder).
        if matches!(model.task, quantkit_train::model::Task::Classify { .. }) {
            qat_bench(&arch, &graph, steps, batch, &x, &labels, float_cpu)?;
        }
    }
    Ok(())
}

/// QAT steps (W8A8, per-channel weights) of `graph` on the graph IR: samples/s and the cost
/// of a step against the float one's (`float_cpu`, CPU seconds per step); then the fake-quant
/// forward + backward of the largest weight, block form against the reference.
fn qat_bench(
    arch: &str,
    graph: &quantkit_graph::Graph,
    steps: usize,
    batch: usize,
    x: &[f32],
    labels: &[usize],
    float_cpu: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    use quantkit_train::qat::{Qat, QatOptions};
    let mut float = graph.clone();
    quantkit_ptq::prepare(&mut float)?;
    let sample =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/fashion-mnist-sample");
    let mut calib = quantkit_data::open_data(&sample, &quantkit_data::OpenOptions::default())?;
    let cfg = quantkit_ptq::PtqConfig {
        calib_samples: Some(256),
        ..Default::default()
    };
    let (ptq, _) = quantkit_ptq::quantize_static(float.clone(), &mut calib, &cfg, &mut |_, _| {})?;
    let mut qat = Qat::from_ptq(&float, &ptq, &QatOptions::default())?;
    let mut adam = Adam::new(0.0);
    let mut step = |q: &mut Qat| {
        q.train_step(
            &mut adam,
            GTensor::from_f32(&[batch, 1, 28, 28], x.to_vec()),
            LossKind::CrossEntropy,
            Some(labels),
            None,
            1e-4,
        )
    };
    for _ in 0..3 {
        step(&mut qat)?;
    }
    quantkit_train::profile::take_profile();
    let c0 = cpu_seconds();
    let t = Instant::now();
    for _ in 0..steps {
        step(&mut qat)?;
    }
    let s = t.elapsed().as_secs_f64();
    let cpu = c0.zip(cpu_seconds()).map(|(a, b)| b - a);
    if std::env::var_os("QUANTKIT_PROFILE").is_some() {
        print_profile(steps);
    }
    let per = cpu.map_or(s, |c| c) / steps as f64;
    println!(
        "{arch:12} qat   {:>8.0} samples/s wall  {:>8.0} samples/CPU-s  ({:.2} ms/step, {:.2}x the float step's CPU time)",
        (steps * batch) as f64 / s,
        cpu.map_or(f64::NAN, |c| (steps * batch) as f64 / c),
        s * 1e3 / steps as f64,
        per / float_cpu
    );
    // The fake-quant step alone on the largest weight.
    let Some((_, f, xs, ss)) = qat
        .net
        .fake_quants()
        .filter(|(_, f, ..)| f.is_weight)
        .max_by_key(|(_, _, xs, _)| qat.net.stored(*xs).map_or(0, |t| t.len()))
    else {
        return Ok(());
    };
    let (w, sc) = (qat.net.stored(xs).unwrap(), qat.net.stored(ss).unwrap());
    let (wv, sv) = (w.to_f32_vec(), sc.to_f32_vec());
    let g: Vec<f32> = wv.iter().map(|v| v * 0.5).collect();
    let reps = 50;
    let time = |block: bool| {
        let t = Instant::now();
        for _ in 0..reps {
            if block {
                std::hint::black_box(f.forward(&wv, &w.shape, &sv));
                std::hint::black_box(f.backward(&wv, &w.shape, &sv, &g));
            } else {
                std::hint::black_box(f.forward_reference(&wv, &w.shape, &sv));
                std::hint::black_box(f.backward_reference(&wv, &w.shape, &sv, &g));
            }
        }
        t.elapsed().as_secs_f64() * 1e3 / reps as f64
    };
    let (r, b) = (time(false), time(true));
    println!(
        "{arch:12} fake-quant of `{}` ({} values, fwd+bwd): reference {r:.3} ms, block form {b:.3} ms ({:.1}x)",
        f.tensor,
        wv.len(),
        r / b
    );
    Ok(())
}
