//! `quantkit qat`: quantization-aware training of an ONNX float model at exactly the points
//! post-training quantization quantizes, then QDQ export (docs/qat.md).
//!
//! PTQ runs first (calibrated on `--calib`, default the training data); its QDQ graph gives
//! the placement, schemes and starting ranges. Each epoch trains on `--data` (the train
//! split of an IDX folder) and evaluates the float model, the fake-quant model and the
//! integer engine on the exported model (`--eval`, default the test split of `--data`).
//! The fake-quant evaluation runs in exact mode (the engine's integer Conv/Gemm/MatMul
//! arithmetic, `quantkit_train::exact`), so it agrees with the engine on every sample; the
//! f32 fake-quant model that training differentiates is evaluated beside it.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use quantkit_data::{open_data_for, BatchOptions, DataSource, OpenOptions, Split};
use quantkit_graph::{Graph, Tensor};
use quantkit_train::exact::ExactPlan;
use quantkit_train::losses::LossKind;
use quantkit_train::optim::{cosine_lr, Adam};
use quantkit_train::qat::{Qat, QatOptions};

/// Arguments of `quantkit qat`.
#[derive(clap::Args)]
pub struct Args {
    /// The float ONNX model (one float input).
    model: PathBuf,
    /// Training data (any source `quantkit eval` reads; an IDX folder's train split).
    #[arg(long)]
    data: PathBuf,
    /// Labels for the training data (`.npy` or IDX), when the source has none.
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Calibration data for the PTQ starting point (default: the training data).
    #[arg(long)]
    calib: Option<PathBuf>,
    /// Evaluation data (default: the test split of an IDX `--data`, else `--data`).
    #[arg(long)]
    eval: Option<PathBuf>,
    /// Labels for the evaluation data.
    #[arg(long)]
    eval_labels: Option<PathBuf>,
    /// Weight bits, 2–8 (symmetric, stored in int8).
    #[arg(long, default_value_t = 8)]
    weight_bits: u8,
    /// Activation bits, 2–8 (u8 affine, per tensor). Below 8 the codes are stored in u8
    /// with the narrow range made explicit by a Clip in front of each QuantizeLinear (runs
    /// in ONNX Runtime and on the engine); the PTQ figure is then PTQ's ranges re-quantized
    /// to the narrow codes.
    #[arg(long, default_value_t = 8)]
    activation_bits: u8,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    epochs: usize,
    /// Peak learning rate (Adam, cosine schedule with warm-up).
    #[arg(long, default_value_t = 1e-4)]
    lr: f32,
    /// Batch size.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Train against the float model's outputs instead of labels (KL on softmax).
    #[arg(long)]
    distill: bool,
    /// Distillation loss: kl (softmax, T = 1) or mse (raw outputs).
    #[arg(long, default_value = "kl")]
    distill_loss: String,
    /// Learn the quantization scales (LSQ).
    #[arg(long)]
    lsq: bool,
    /// Per-tensor weights instead of per output channel.
    #[arg(long)]
    per_tensor: bool,
    /// Training steps whose batches move the activation ranges (EMA) before they freeze.
    #[arg(long, default_value_t = 100)]
    observer_steps: usize,
    /// Train on at most this many samples per epoch.
    #[arg(long)]
    limit: Option<usize>,
    /// Evaluate on at most this many samples.
    #[arg(long)]
    eval_limit: Option<usize>,
    /// Evaluate (float, fake-quant, engine) only after the last epoch, not after each one;
    /// the CSV then leaves the evaluation columns of earlier epochs empty.
    #[arg(long)]
    eval_last: bool,
    /// Shuffling seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output QDQ ONNX model (written atomically, only after training succeeded).
    #[arg(short, long)]
    output: PathBuf,
    /// CSV of per-epoch loss and accuracies.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

struct EvalResult {
    float: f64,
    /// The fake-quant model in exact mode (the engine's integer layers).
    fake: f64,
    /// The fake-quant model as it trains (f32 accumulation, float bias).
    fake_f32: f64,
    engine: f64,
    /// Top-1 agreement of the engine with the exact-mode fake-quant model.
    agreement: f64,
    /// Top-1 agreement of the engine with the f32 fake-quant model.
    agreement_f32: f64,
    /// Largest |exact-mode logit − engine logit|.
    max_logit_diff: f64,
    samples: usize,
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |b, (i, &v)| if v > b.1 { (i, v) } else { b },
        )
        .0
}

fn top1(t: &Tensor) -> Vec<usize> {
    let k = t.shape.last().copied().unwrap_or(1).max(1);
    t.to_f32_vec().chunks(k).map(argmax).collect()
}

fn open(
    path: &std::path::Path,
    specs: &[quantkit_data::InputSpec],
    split: Split,
    labels: Option<PathBuf>,
) -> anyhow::Result<DataSource> {
    let d = open_data_for(
        path,
        specs,
        &OpenOptions {
            split,
            labels,
            ..OpenOptions::default()
        },
    )
    .with_context(|| format!("opening the data {}", path.display()))?;
    if matches!(d, DataSource::Named(_)) {
        bail!(
            "{}: qat trains models with one float input; named .npz feeds are not supported yet",
            path.display()
        );
    }
    Ok(d)
}

/// Top-1 accuracy (or, without labels, top-1 agreement with the float model) of the float,
/// fake-quant (exact mode, and as trained) and engine models, and the engine's top-1
/// agreement and largest logit difference with the exact-mode fake-quant model.
#[allow(clippy::too_many_arguments)]
fn evaluate(
    data: &mut DataSource,
    limit: Option<usize>,
    input: &str,
    float: &Graph,
    qat: &Qat,
    exact: &ExactPlan,
    engine: &quantkit_engine::Plan,
) -> anyhow::Result<EvalResult> {
    let (mut f, mut q, mut e, mut agree, mut n) = (0usize, 0usize, 0usize, 0usize, 0usize);
    let (mut q32, mut agree32, mut worst) = (0usize, 0usize, 0f64);
    for b in data.batches(&BatchOptions {
        batch_size: 500,
        limit,
        ..Default::default()
    })? {
        let b = b?;
        let x = Tensor::from_f32(&b.shape, b.data);
        let fy = top1(&quantkit_graph::execute(float, vec![(input.to_string(), x.clone())])?[0].1);
        let q32y = top1(&qat.predict(x.clone())?);
        let qt = qat.predict_exact(x.clone(), exact)?;
        let et = engine.run(vec![(input, x)])?.remove(0).1;
        for (a, b) in qt.to_f32_vec().iter().zip(et.to_f32_vec()) {
            worst = worst.max(f64::from((a - b).abs()));
        }
        let qy = top1(&qt);
        let ey = top1(&et);
        let truth: Vec<usize> = match &b.labels {
            Some(l) => l.iter().map(|&v| v as usize).collect(),
            None => fy.clone(),
        };
        for i in 0..truth.len() {
            f += usize::from(fy[i] == truth[i]);
            q += usize::from(qy[i] == truth[i]);
            e += usize::from(ey[i] == truth[i]);
            agree += usize::from(qy[i] == ey[i]);
            q32 += usize::from(q32y[i] == truth[i]);
            agree32 += usize::from(q32y[i] == ey[i]);
        }
        n += truth.len();
    }
    let r = |v: usize| v as f64 / n.max(1) as f64;
    Ok(EvalResult {
        float: r(f),
        fake: r(q),
        fake_f32: r(q32),
        engine: r(e),
        agreement: r(agree),
        agreement_f32: r(agree32),
        max_logit_diff: worst,
        samples: n,
    })
}

/// Top-1 accuracy of the engine alone (without labels: its top-1 agreement with the float
/// model) — the PTQ starting point's figure.
fn evaluate_engine(
    data: &mut DataSource,
    limit: Option<usize>,
    input: &str,
    float: &Graph,
    engine: &quantkit_engine::Plan,
) -> anyhow::Result<f64> {
    let (mut e, mut n) = (0usize, 0usize);
    for b in data.batches(&BatchOptions {
        batch_size: 500,
        limit,
        ..Default::default()
    })? {
        let b = b?;
        let x = Tensor::from_f32(&b.shape, b.data);
        let truth: Vec<usize> = match &b.labels {
            Some(l) => l.iter().map(|&v| v as usize).collect(),
            None => {
                top1(&quantkit_graph::execute(float, vec![(input.to_string(), x.clone())])?[0].1)
            }
        };
        let ey = top1(&engine.run(vec![(input, x)])?.remove(0).1);
        e += ey.iter().zip(&truth).filter(|(a, b)| a == b).count();
        n += truth.len();
    }
    Ok(e as f64 / n.max(1) as f64)
}

/// The exact-mode plan of `qat` for its export `g` compiled as `plan`; a layer the engine
/// runs on integers that exact mode cannot reproduce is named on stderr (the bar's line).
fn exact_plan(
    qat: &Qat,
    g: &Graph,
    plan: &quantkit_engine::Plan,
    opts: &quantkit_engine::EngineOptions,
    bar: Option<&ProgressBar>,
) -> anyhow::Result<ExactPlan> {
    let exact = qat
        .exact_plan(g, plan, opts.requant)
        .context("building the exact-mode evaluation")?;
    for (node, why) in &exact.not_reproduced {
        let msg = format!(
            "warning: exact mode evaluates `{node}` as the f32 fake-quant model ({why}); \
             its codes can differ from the engine's"
        );
        match bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }
    Ok(exact)
}

/// The scale of the DequantizeLinear writing the graph's first output (one output step),
/// when there is one.
fn output_step(g: &Graph) -> Option<f32> {
    let o = &g.outputs.first()?.name;
    let dq = g
        .nodes
        .iter()
        .find(|n| n.outputs.first() == Some(o) && n.is(quantkit_graph::OpKind::DequantizeLinear))?;
    Some(g.initializers.get(dq.inputs.get(1)?)?.to_f32_vec()[0])
}

/// Runs `quantkit qat`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let t0 = Instant::now();
    if !(2..=8).contains(&args.activation_bits) {
        bail!(
            "--activation-bits {}: expected 2 to 8",
            args.activation_bits
        );
    }
    anyhow::ensure!(
        args.lr.is_finite() && args.lr > 0.0,
        "--lr must be a positive number, got {}",
        args.lr
    );
    anyhow::ensure!(
        args.batch > 0 && args.epochs > 0,
        "--batch and --epochs must be positive"
    );
    let loss = if args.distill {
        match args.distill_loss.as_str() {
            "kl" => LossKind::DistillKl { temperature: 1.0 },
            "mse" => LossKind::DistillMse,
            o => bail!("--distill-loss {o}: expected kl or mse"),
        }
    } else {
        LossKind::CrossEntropy
    };
    if let Some(parent) = args.output.parent().filter(|p| !p.as_os_str().is_empty()) {
        anyhow::ensure!(
            parent.is_dir(),
            "output folder {} does not exist",
            parent.display()
        );
    }
    let mut float = quantkit_graph::load_model(&args.model)
        .with_context(|| format!("loading the model {}", args.model.display()))?;
    quantkit_ptq::prepare(&mut float)
        .with_context(|| format!("preparing {}", args.model.display()))?;
    let specs = quantkit_ptq::input_specs(&float)?;
    anyhow::ensure!(
        specs.len() == 1,
        "{}: qat trains models with one float input, this one has {}",
        args.model.display(),
        specs.len()
    );
    let input = specs[0].name.clone();

    // PTQ starting point.
    let calib_path = args.calib.clone().unwrap_or_else(|| args.data.clone());
    let mut calib = open(&calib_path, &specs, Split::Train, args.labels.clone())?;
    let mut cfg = quantkit_ptq::PtqConfig {
        calib_samples: Some(1000),
        ..Default::default()
    };
    cfg.qdq.weight_bits = args.weight_bits;
    cfg.qdq.per_channel = !args.per_tensor;
    let (ptq, _) = quantkit_ptq::quantize_static(float.clone(), &mut calib, &cfg, &mut |_, _| {})
        .context("post-training quantization (the QAT starting point)")?;
    drop(calib);
    let mut qat = Qat::from_ptq(
        &float,
        &ptq,
        &QatOptions {
            weight_bits: args.weight_bits,
            activation_bits: args.activation_bits,
            lsq: args.lsq,
            observer_steps: args.observer_steps,
            ..Default::default()
        },
    )?;

    let mut train = open(&args.data, &specs, Split::Train, args.labels.clone())?;
    if !args.distill && !train.has_labels() {
        bail!(
            "{}: no labels: give --labels, or --distill to train against the float model",
            args.data.display()
        );
    }
    let eval_path = args.eval.clone().unwrap_or_else(|| args.data.clone());
    let eval_labels = args.eval_labels.clone().or_else(|| {
        // The training labels only fit the same file (not the test split of an IDX folder).
        (args.eval.is_none() && !quantkit_data::idx::is_idx_dir(&args.data))
            .then(|| args.labels.clone())
            .flatten()
    });
    let mut eval_data = open(&eval_path, &specs, Split::Test, eval_labels)?;

    let engine_opts = quantkit_engine::EngineOptions::default();
    // Below 8 activation bits, the PTQ baseline is PTQ's placement and ranges with the
    // narrow codes: the QAT model before its first step, exported.
    let ptq = if args.activation_bits < 8 {
        qat.export()
            .context("exporting PTQ with narrow activation codes")?
    } else {
        ptq
    };
    let ptq_plan = quantkit_engine::compile(&ptq, &engine_opts)
        .context("compiling the PTQ model on the integer engine")?;
    let ptq_value = evaluate_engine(&mut eval_data, args.eval_limit, &input, &float, &ptq_plan)?;

    let n_train = args.limit.map_or(train.len(), |l| l.min(train.len()));
    let steps = n_train / args.batch;
    anyhow::ensure!(
        steps > 0,
        "fewer training samples ({n_train}) than one batch ({})",
        args.batch
    );
    let total = steps * args.epochs;
    let warmup = (total / 50).clamp(1, 100);
    let mut opt = Adam::new(0.0);
    let mut log = String::from(
        "epoch,loss,train_accuracy,samples_per_s,float,fake_quant,engine,engine_agreement,fake_quant_f32,engine_agreement_f32,max_logit_diff,seconds\n",
    );
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} (eta {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let mut global = 0;
    let mut last = None;
    let mut epochs_secs = Vec::new();
    for epoch in 0..args.epochs {
        let te = Instant::now();
        let (mut loss_sum, mut correct, mut seen) = (0f64, 0usize, 0usize);
        let batches = train.batches(&BatchOptions {
            batch_size: args.batch,
            shuffle_seed: Some(
                args.seed
                    .wrapping_mul(0x9E37_79B9)
                    .wrapping_add(epoch as u64),
            ),
            drop_last: true,
            limit: args.limit,
        })?;
        for (step, b) in batches.enumerate() {
            let b = b?;
            let x = Tensor::from_f32(&b.shape, b.data);
            let labels: Option<Vec<usize>> = b
                .labels
                .map(|l| l.into_iter().map(|v| v as usize).collect());
            let teacher = if args.distill {
                Some(
                    quantkit_graph::execute(&float, vec![(input.clone(), x.clone())])?[0]
                        .1
                        .to_f32_vec(),
                )
            } else {
                None
            };
            let lr = cosine_lr(args.lr, global, total, warmup);
            let (l, out) = qat
                .train_step(&mut opt, x, loss, labels.as_deref(), teacher.as_deref(), lr)
                .with_context(|| {
                    format!(
                        "epoch {}, step {step}: training stopped and nothing was written to {}",
                        epoch + 1,
                        args.output.display()
                    )
                })?;
            if !l.is_finite() {
                bar.abandon();
                bail!(
                    "the loss became {l} at epoch {}, step {step}: training stopped and \
                     nothing was written to {} (try a lower --lr)",
                    epoch + 1,
                    args.output.display()
                );
            }
            global += 1;
            let pred = top1(&out);
            let truth = labels.unwrap_or_default();
            correct += pred.iter().zip(&truth).filter(|(a, b)| a == b).count();
            seen += pred.len();
            loss_sum += l as f64 * pred.len() as f64;
            bar.set_prefix(format!("epoch {}/{}", epoch + 1, args.epochs));
            bar.set_message(format!(
                "loss {:.4}{} {:.0} samples/s",
                loss_sum / seen as f64,
                if truth.is_empty() {
                    String::new()
                } else {
                    format!(" acc {:.2}%", 100.0 * correct as f64 / seen as f64)
                },
                seen as f64 / te.elapsed().as_secs_f64().max(1e-9)
            ));
            bar.inc(1);
        }
        let train_secs = te.elapsed().as_secs_f64();
        epochs_secs.push(train_secs);
        let sps = seen as f64 / train_secs.max(1e-9);
        if args.eval_last && epoch + 1 < args.epochs {
            log.push_str(&format!(
                "{},{:.6},{:.6},{:.1},,,,,,,,{:.2}\n",
                epoch + 1,
                loss_sum / seen.max(1) as f64,
                correct as f64 / seen.max(1) as f64,
                sps,
                t0.elapsed().as_secs_f64()
            ));
            bar.println(format!(
                "epoch {}: loss {:.4}, {sps:.0} samples/s (evaluated after the last epoch)",
                epoch + 1,
                loss_sum / seen.max(1) as f64
            ));
            continue;
        }
        let exported = qat.export()?;
        let plan = quantkit_engine::compile(&exported, &engine_opts)
            .context("compiling the QAT model on the integer engine")?;
        let exact = exact_plan(&qat, &exported, &plan, &engine_opts, Some(&bar))?;
        let ev = evaluate(
            &mut eval_data,
            args.eval_limit,
            &input,
            &float,
            &qat,
            &exact,
            &plan,
        )?;
        log.push_str(&format!(
            "{},{:.6},{:.6},{:.1},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6e},{:.2}\n",
            epoch + 1,
            loss_sum / seen.max(1) as f64,
            correct as f64 / seen.max(1) as f64,
            sps,
            ev.float,
            ev.fake,
            ev.engine,
            ev.agreement,
            ev.fake_f32,
            ev.agreement_f32,
            ev.max_logit_diff,
            t0.elapsed().as_secs_f64()
        ));
        bar.println(format!(
            "epoch {}: loss {:.4}, {:.0} samples/s; eval on {}: float {:.2}%, fake-quant (exact mode) {:.2}%, engine {:.2}% (engine = fake-quant top-1 on {:.2}%, max logit difference {:.3e}; f32 fake-quant {:.2}%, = engine on {:.2}%)",
            epoch + 1,
            loss_sum / seen.max(1) as f64,
            sps,
            ev.samples,
            ev.float * 100.0,
            ev.fake * 100.0,
            ev.engine * 100.0,
            ev.agreement * 100.0,
            ev.max_logit_diff,
            ev.fake_f32 * 100.0,
            ev.agreement_f32 * 100.0
        ));
        last = Some((exported, ev));
    }
    bar.finish_and_clear();
    let (exported, ev) = last.expect("at least one epoch");
    quantkit_graph::save_model(&exported, &args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    if let Some(path) = &args.log {
        let mut f =
            std::fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
        f.write_all(log.as_bytes())?;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let metric = if args.distill {
        "agreement_with_float"
    } else {
        "accuracy"
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "metric": metric,
                "float_value": ev.float,
                "ptq_value": ptq_value,
                "qat_value": ev.fake,
                "engine_value": ev.engine,
                "engine_agreement": ev.agreement,
                "engine_max_logit_diff": ev.max_logit_diff,
                "output_step": output_step(&exported),
                "fake_quant_f32_value": ev.fake_f32,
                "engine_agreement_f32": ev.agreement_f32,
                "epochs": args.epochs,
                "epoch_seconds": epochs_secs,
                "seconds": seconds,
                "samples": ev.samples,
                "weight_bits": args.weight_bits,
                "activation_bits": args.activation_bits,
                "output": args.output.display().to_string(),
            })
        );
    } else {
        println!(
            "W{}A{} QAT, {} epochs in {:.1} s: {metric} float {:.2}%, PTQ (engine) {:.2}%, QAT fake-quant (exact mode) {:.2}%, QAT engine {:.2}%; engine = fake-quant top-1 on {:.2}% of {} images; wrote {}",
            args.weight_bits,
            args.activation_bits,
            args.epochs,
            seconds,
            ev.float * 100.0,
            ptq_value * 100.0,
            ev.fake * 100.0,
            ev.engine * 100.0,
            ev.agreement * 100.0,
            ev.samples,
            args.output.display()
        );
    }
    Ok(())
}
