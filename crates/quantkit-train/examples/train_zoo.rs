//! Trains one zoo model on Fashion-MNIST and reports test accuracy and wall time.
//!
//! `cargo run --release -p quantkit-train --example train_zoo -- ARCH [EPOCHS] [DATA_DIR]`
//!
//! Trains on the graph IR, as `quantkit train` does.

use std::path::PathBuf;
use std::time::Instant;

use quantkit_data::idx::Split;
use quantkit_train::trainer::{evaluate, train, ImageData, TrainConfig};
use quantkit_train::zoo;

/// User + system CPU seconds of this process (`getrusage(RUSAGE_SELF)`).
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arch = args.first().cloned().unwrap_or_else(|| "lenet".into());
    let mut cfg = TrainConfig::for_arch(&arch);
    if let Some(e) = args.get(1) {
        cfg.epochs = e.parse()?;
    }
    if let Ok(lr) = std::env::var("LR") {
        cfg.lr = lr.parse()?;
    }
    let dir = PathBuf::from(
        args.get(2)
            .cloned()
            .unwrap_or_else(|| "/usr/share/datasets/fashion-mnist".into()),
    );
    let train_data = ImageData::from_idx_dir(&dir, Split::Train)?;
    let test_data = ImageData::from_idx_dir(&dir, Split::Test)?;
    let mut model = zoo::build(&arch, cfg.seed)?;
    println!(
        "{arch}: {} params, {cfg:?}, threads {}",
        model.num_params(),
        rayon::current_num_threads()
    );
    let (t, c0) = (Instant::now(), cpu_seconds());
    let mut last_epoch = usize::MAX;
    train(&mut model, &train_data, &cfg, |p| {
        if p.step + 1 == p.steps_per_epoch && p.epoch != last_epoch {
            last_epoch = p.epoch;
            println!(
                "epoch {} loss {:.4} train-acc {:.4} {:.0} samples/s  (t = {:.1} s)",
                p.epoch + 1,
                p.loss,
                p.accuracy.unwrap_or(f32::NAN),
                p.samples_per_sec,
                t.elapsed().as_secs_f64()
            );
        }
    })?;
    let train_secs = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - c0;
    let ev = evaluate(&model, &test_data, 500)?;
    println!(
        "{arch}: test {} = {:.4} on {} samples; training took {:.1} s wall, {:.1} s CPU",
        ev.metric, ev.value, ev.samples, train_secs, cpu
    );
    Ok(())
}
