//! The cost of a QAT epoch of LeNet against a float training epoch, both on the graph IR
//! (`GraphNet`: the registry's `eval` forward and `OpDef::backward`), measured side by side
//! in one process on the same images, batches and thread pool.
//!
//! - float: `quantkit train --arch lenet`'s step ([`GraphModel::step`]: AdamW, cross-entropy)
//!   on the zoo's LeNet;
//! - QAT: `quantkit qat models/lenet.onnx --weight-bits 8 --activation-bits 8`'s step
//!   ([`Qat::train_step`]: fake-quant at PTQ's points, per-channel weights, u8 activations,
//!   observers for the first 100 steps, Adam), PTQ calibrated on the committed 1,000-image
//!   sample as the CLI does.
//!
//! An epoch is the training steps over `limit` images (batches drawn in a seeded shuffled
//! order and built from the u8 pixels each step, as both commands do); evaluation is not
//! part of it. The two kinds alternate (`float, qat, float, qat, ...`) so that load changes
//! on a shared machine hit both; each epoch reports wall time and the CPU time of the
//! process (`getrusage(RUSAGE_SELF)`, user + system), and the ratio QAT / float is given
//! for both. The load average is printed before and after.
//!
//! ```sh
//! cargo build --release -p quantkit-train --example qat_epoch_bench
//! RAYON_NUM_THREADS=2 target/release/examples/qat_epoch_bench [limit=20000] [batch=64] [rounds=2]
//! ```

use std::path::Path;
use std::time::Instant;

use quantkit_data::idx::{find_fashion_mnist, Split};
use quantkit_graph::Tensor as GTensor;
use quantkit_train::losses::LossKind;
use quantkit_train::optim::{Adam, Optimizer};
use quantkit_train::qat::{Qat, QatOptions};
use quantkit_train::rng::Rng;
use quantkit_train::trainer::{GraphModel, ImageData};
use quantkit_train::zoo;

/// User + system CPU seconds of this process so far (`getrusage(RUSAGE_SELF)`).
fn cpu_seconds() -> f64 {
    // SAFETY: `getrusage` only writes the `rusage` struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return f64::NAN;
        }
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Wall and CPU seconds of `f`.
fn timed(
    f: impl FnOnce() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let (c0, t0) = (cpu_seconds(), Instant::now());
    f()?;
    Ok((t0.elapsed().as_secs_f64(), cpu_seconds() - c0))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The allocator settings of the `quantkit` binary (see its `keep_freed_memory`).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator tunables; no other thread exists yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: usize| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(args.get(i).map(|s| s.parse()).transpose()?.unwrap_or(d))
    };
    let (limit, batch, rounds) = (arg(0, 20_000)?, arg(1, 64)?, arg(2, 2)?);
    if batch == 0 || rounds == 0 {
        return Err("batch and rounds must be ≥ 1".into());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = find_fashion_mnist(None)?;
    let mut data = ImageData::from_idx_dir(&dir, Split::Train)?;
    data.truncate(limit);
    let steps = data.len() / batch;
    if steps == 0 {
        return Err(format!("{} images are less than one batch of {batch}", data.len()).into());
    }

    // Float: the zoo's LeNet as `quantkit train` trains it.
    let model = zoo::build("lenet", 0)?;
    let mut float = GraphModel::new(&model)?;
    let mut float_opt = Adam::new(1e-4);

    // QAT: the committed LeNet, PTQ W8A8 per channel, as `quantkit qat` starts.
    let mut fg = quantkit_graph::load_model(root.join("models/lenet.onnx"))?;
    quantkit_ptq::prepare(&mut fg)?;
    let mut calib = quantkit_data::open_data(
        root.join("data/fashion-mnist-sample"),
        &quantkit_data::OpenOptions::default(),
    )?;
    let cfg = quantkit_ptq::PtqConfig {
        calib_samples: Some(1000),
        ..Default::default()
    };
    let (ptq, _) = quantkit_ptq::quantize_static(fg.clone(), &mut calib, &cfg, &mut |_, _| {})?;
    let mut qat = Qat::from_ptq(&fg, &ptq, &QatOptions::default())?;
    let mut qat_opt = Adam::new(0.0);

    println!(
        "lenet, {} images per epoch, batch {batch}, {steps} steps, {} threads; load average {}",
        steps * batch,
        rayon::current_num_threads(),
        loadavg()
    );
    let order = |round: usize| {
        let mut o: Vec<usize> = (0..data.len()).collect();
        Rng::new(round as u64).shuffle(&mut o);
        o
    };
    let (mut fw, mut fc, mut qw, mut qc) = (0.0, 0.0, 0.0, 0.0);
    for round in 0..rounds {
        let o = order(round);
        let (w, c) = timed(|| {
            for s in 0..steps {
                let (x, labels) = data.batch(&o[s * batch..(s + 1) * batch]);
                float.step(&mut float_opt as &mut dyn Optimizer, x, &labels, 1e-4)?;
            }
            Ok(())
        })?;
        println!(
            "round {round}: float epoch {w:7.2} s wall {c:7.2} s CPU ({:.0} samples/s wall, {:.0} per CPU-s)",
            (steps * batch) as f64 / w,
            (steps * batch) as f64 / c
        );
        (fw, fc) = (fw + w, fc + c);
        let (w2, c2) = timed(|| {
            for s in 0..steps {
                let (x, labels) = data.batch(&o[s * batch..(s + 1) * batch]);
                let shape = x.shape().to_vec();
                let x = GTensor::from_f32(&shape, x.into_data());
                qat.train_step(
                    &mut qat_opt,
                    x,
                    LossKind::CrossEntropy,
                    Some(&labels),
                    None,
                    1e-4,
                )?;
            }
            Ok(())
        })?;
        println!(
            "round {round}: QAT   epoch {w2:7.2} s wall {c2:7.2} s CPU ({:.0} samples/s wall, {:.0} per CPU-s); QAT/float {:.2}x wall, {:.2}x CPU",
            (steps * batch) as f64 / w2,
            (steps * batch) as f64 / c2,
            w2 / w,
            c2 / c
        );
        (qw, qc) = (qw + w2, qc + c2);
    }
    println!(
        "all rounds: QAT epoch / float epoch = {:.2}x wall, {:.2}x CPU (float {:.0} samples/s wall); load average {}",
        qw / fw,
        qc / fc,
        (rounds * steps * batch) as f64 / fw,
        loadavg()
    );
    Ok(())
}
