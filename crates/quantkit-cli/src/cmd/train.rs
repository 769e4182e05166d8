//! `quantkit train`: trains a zoo architecture on an IDX data set (Fashion-MNIST by default),
//! evaluates it on the test split and writes it as ONNX.

use std::path::PathBuf;
use std::time::Instant;

use super::progress::{Mode, Progress};
use anyhow::Context;
use quantkit_data::idx::{find_fashion_mnist, Split};
use quantkit_train::trainer::{evaluate, train, ImageData, OptimizerKind, TrainConfig};
use quantkit_train::{export, zoo};

/// Arguments of `quantkit train`.
#[derive(clap::Args)]
pub struct Args {
    /// Architecture: lenet, resnet8, mobilenet, mlp or autoencoder.
    #[arg(long)]
    arch: String,
    /// IDX folder with train-* and t10k-* files (default: $QUANTKIT_FASHION_MNIST or
    /// /usr/share/datasets/fashion-mnist).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Epochs (default: the architecture's).
    #[arg(long)]
    epochs: Option<usize>,
    /// Batch size.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Peak learning rate of the cosine schedule (default: the architecture's).
    #[arg(long)]
    lr: Option<f32>,
    /// Optimizer: adam (AdamW) or sgd (momentum 0.9) (default: the architecture's).
    #[arg(long)]
    optimizer: Option<String>,
    /// Seed for weight initialisation and shuffling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Worker threads (default: all cores). Results are identical for any thread count.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Train on only the first N training images (quick runs).
    #[arg(long)]
    limit: Option<usize>,
    /// Hold out N training images as a validation split (a random subset drawn with
    /// `--validation-seed`): never trained on, scored after training. `quantkit qat
    /// --validation N --validation-seed S` with the same N and S holds out the same images,
    /// so its `--keep-best` chooses on images neither model saw (docs/qat.md).
    #[arg(long, value_name = "N")]
    validation: Option<usize>,
    /// Seed of the `--validation` split (apart from `--seed`, which seeds the weights and
    /// the shuffling).
    #[arg(long, default_value_t = 0)]
    validation_seed: u64,
    /// Output ONNX file.
    #[arg(short, long)]
    output: PathBuf,
    /// Print the final summary as JSON.
    #[arg(long)]
    json: bool,
    /// No progress on stderr: neither the progress bar (a terminal) nor the plain lines
    /// written when stderr is not a terminal or with --json (`train: H:MM:SS ...`: each
    /// epoch's loss, and within an epoch a line at most every 30 s).
    #[arg(short, long)]
    quiet: bool,
}

/// Runs `quantkit train`.
pub fn run(args: Args) -> anyhow::Result<()> {
    // `--threads` sized the global pool (main.rs `start_thread_pool`).
    let mut model = zoo::build(&args.arch, args.seed)?;
    let mut cfg = TrainConfig::for_arch(&args.arch);
    cfg.seed = args.seed;
    cfg.batch_size = args.batch;
    if let Some(e) = args.epochs {
        cfg.epochs = e;
    }
    if let Some(lr) = args.lr {
        anyhow::ensure!(
            lr.is_finite() && lr > 0.0,
            "--lr must be a positive number, got {lr}"
        );
        cfg.lr = lr;
    }
    if let Some(o) = &args.optimizer {
        cfg.optimizer = match o.as_str() {
            "adam" => OptimizerKind::Adam,
            "sgd" => OptimizerKind::Sgd { momentum: 0.9 },
            other => anyhow::bail!("unknown --optimizer `{other}` (adam or sgd)"),
        };
    }
    let dir = find_fashion_mnist(args.data.as_deref())?;
    let mut train_data = ImageData::from_idx_dir(&dir, Split::Train)
        .with_context(|| format!("loading the training split from {}", dir.display()))?;
    anyhow::ensure!(
        args.limit.is_none() || args.validation.is_none(),
        "--limit and --validation both choose the training images: give one"
    );
    if let Some(n) = args.limit {
        train_data.truncate(n);
    }
    let validation = match args.validation {
        Some(nv) => {
            let (tr, ho) =
                quantkit_data::validation_split(train_data.len(), nv, args.validation_seed)
                    .with_context(|| format!("--validation {nv} of {}", dir.display()))?;
            let held = train_data.select(&ho)?;
            train_data = train_data.select(&tr)?;
            Some(held)
        }
        None => None,
    };
    let test_data = ImageData::from_idx_dir(&dir, Split::Test)
        .with_context(|| format!("loading the test split from {}", dir.display()))?;
    if let Some(parent) = args.output.parent().filter(|p| !p.as_os_str().is_empty()) {
        anyhow::ensure!(
            parent.is_dir(),
            "output folder {} does not exist",
            parent.display()
        );
    }

    let steps = train_data.len() / cfg.batch_size.max(1);
    let progress = Progress::new("train", Mode::of(args.json, args.quiet));
    progress.line(format_args!(
        "{}: {} epochs of {steps} steps (batch {}, {} training images)",
        args.arch,
        cfg.epochs,
        cfg.batch_size,
        train_data.len()
    ));
    let bar = progress.training_bar((steps * cfg.epochs) as u64);
    let start = Instant::now();
    train(&mut model, &train_data, &cfg, |p| {
        bar.set_prefix(format!("epoch {}/{}", p.epoch + 1, cfg.epochs));
        let acc = p
            .accuracy
            .map(|a| format!(" acc {:.2}%", a * 100.0))
            .unwrap_or_default();
        bar.set_message(format!(
            "loss {:.4}{acc} {:.0} samples/s",
            p.loss, p.samples_per_sec
        ));
        bar.inc(1);
        if p.step + 1 == p.steps_per_epoch || progress.due() {
            progress.line(format_args!(
                "epoch {}/{}: step {}/{}, loss {:.4}{acc}, {:.0} samples/s",
                p.epoch + 1,
                cfg.epochs,
                p.step + 1,
                p.steps_per_epoch,
                p.loss,
                p.samples_per_sec
            ));
        }
    })?;
    bar.finish();
    let train_secs = start.elapsed().as_secs_f64();
    let ev = evaluate(&model, &test_data, 500)?;
    let val = validation
        .as_ref()
        .map(|v| evaluate(&model, v, 500))
        .transpose()?;
    export::save_onnx(&model, &args.output)?;
    if args.json {
        let v = serde_json::json!({
            "arch": args.arch,
            "params": model.num_params(),
            "epochs": cfg.epochs,
            "train_seconds": train_secs,
            "metric": ev.metric,
            "value": ev.value,
            "samples": ev.samples,
            "train_samples": train_data.len(),
            "validation_value": val.map(|v| v.value),
            "validation_samples": val.map(|v| v.samples),
            "output": args.output.display().to_string(),
        });
        println!("{v}");
    } else {
        let show = |v: f64| {
            if ev.metric == "accuracy" {
                format!("{:.2}%", v * 100.0)
            } else {
                format!("{v:.5}")
            }
        };
        let val_note = val
            .map(|v| {
                format!(
                    "; validation {} on {} held-out images",
                    show(v.value),
                    v.samples
                )
            })
            .unwrap_or_default();
        println!(
            "{}: {} parameters, {} epochs of {} images in {:.1} s; test {} {} on {} images{val_note}; wrote {}",
            args.arch,
            model.num_params(),
            cfg.epochs,
            train_data.len(),
            train_secs,
            ev.metric,
            show(ev.value),
            ev.samples,
            args.output.display()
        );
    }
    Ok(())
}
