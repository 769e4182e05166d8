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

use std::path::PathBuf;
use std::time::Instant;

use super::progress::{Mode, Progress};
use anyhow::{bail, Context};
use indicatif::ProgressBar;
use quantkit_data::{open_data_for, BatchOptions, DataSource, OpenOptions, Split};
use quantkit_graph::{Graph, Tensor};
use quantkit_train::exact::ExactPlan;
use quantkit_train::losses::LossKind;
use quantkit_train::optim::{cosine_lr, Adam, Optimizer, Sgd};
use quantkit_train::qat::{LabelTerm, OutputLoss, OutputTerm, Qat, QatInit, QatOptions};

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
    /// Weight bits, 2–8 (symmetric). 2–4-bit codes are written as ONNX int4 initializers
    /// (opset 21), wider ones as int8.
    #[arg(long, default_value_t = 8)]
    weight_bits: u8,
    /// Keep 2–4-bit weight codes in int8 initializers (opset 13) instead of int4.
    #[arg(long)]
    int8_weights: bool,
    /// Keep the first weighted layer and the last one before each output (their weights
    /// and input activations) at 8 bits, as LSQ and most low-bit papers do for the first
    /// and last layer (mixed precision; the PTQ figure is then the same mixed model before
    /// training). Off by default.
    #[arg(long)]
    first_last_8bit: bool,
    /// Activation bits, 2–8 (u8 affine, per tensor). Below 8 the codes are stored in u8
    /// with the narrow range made explicit by a Clip in front of each QuantizeLinear (runs
    /// in ONNX Runtime and on the engine); the PTQ figure is then the starting point of
    /// `--init` at the narrow widths.
    #[arg(long, default_value_t = 8)]
    activation_bits: u8,
    /// Where the scales of tensors below 8 bits start. `mse` (default): each narrow
    /// activation's range minimises the quantization error of its calibration histogram at
    /// the activation width, each narrow weight's per-channel scale the weight's error at the
    /// weight width (a clip search), and the EMA observers leave those activations alone.
    /// `minmax`: PTQ's 8-bit min/max ranges re-quantized to the narrow codes, weight scales
    /// max|w|/q_max. 8-bit tensors start from PTQ's min/max ranges either way. The PTQ
    /// figure is this starting point, exported.
    #[arg(long, default_value = "mse", value_parser = ["mse", "minmax"])]
    init: String,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    epochs: usize,
    /// Peak learning rate (cosine schedule with warm-up).
    #[arg(long, default_value_t = 1e-4)]
    lr: f32,
    /// Optimizer: `adam` (default) or `sgd` (momentum 0.9). Adam moves every parameter by
    /// about the learning rate per step whatever its gradient; SGD moves each in proportion
    /// to its gradient and needs a learning rate of its own scale (MTCNN O-Net W4A8
    /// distillation: SGD at `1e-4` as good as Adam at `3e-5`; docs/qat.md, "The schedule").
    #[arg(long, default_value = "adam", value_parser = ["adam", "sgd"])]
    optimizer: String,
    /// With `adam`: no step moves a conv/linear weight tensor by more than this fraction of
    /// its RMS (its update is scaled by `min(1, R·rms(W)/lr)`; 0 = no limit). Adam moves
    /// every weight by about the learning rate whatever its size, which rewrites layers
    /// whose weights are far below it in a few steps (PP-OCRv4 det's head, weights of
    /// RMS 3·10⁻⁵ after BN folding, collapsed at `--lr 1e-5` without it). Binds only where
    /// `rms(W) < lr/R`; the tensors it binds on are listed at the start. The default 0.03
    /// binds on none of the zoo's weights at `--lr 1e-3`; 0.01 did better on that head
    /// (docs/qat.md)
    #[arg(long, default_value_t = 0.03)]
    max_weight_step: f32,
    /// Weight decay of the conv/linear weights (AdamW's decoupled decay with `adam`, L2 in
    /// the gradient with `sgd`); biases, scales and BatchNormalization are never decayed.
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f32,
    /// Batch size.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Train against the float model's outputs instead of labels: every output, with the
    /// loss `Σ wᵢ·Lᵢ` (`--distill-loss`, `--distill-weights`). No labels needed.
    #[arg(long)]
    distill: bool,
    /// Distillation loss per output, one for all or a comma-separated list: `kl` (KL
    /// divergence: on the probabilities when the output is a Softmax's, else on the softmax
    /// of the raw logits at T = 1), `mse` (mean squared error to the float output divided by
    /// the variance of the float output over the training data) or `auto`: `kl` for a
    /// Softmax output and for the only output of a one-output model, `mse` otherwise.
    #[arg(long, default_value = "auto")]
    distill_loss: String,
    /// Distillation temperature of the KL terms (Hinton et al. 2015; the loss is scaled by
    /// T²). On a Softmax output the probabilities are softened as softmax(ln p / T).
    #[arg(long, default_value_t = 1.0)]
    distill_temperature: f32,
    /// Weight of each output's loss (comma-separated, one per output or one for all;
    /// 0 leaves an output out). Default 1 for every output.
    #[arg(long)]
    distill_weights: Option<String>,
    /// With --distill: add the cross-entropy with the training labels, times this weight,
    /// to the distillation loss (`L = Σ wᵢ·Lᵢ + W·CE` on the scored output): distillation
    /// together with the labels, the usual recipe for low-bit QAT. Needs labels.
    #[arg(long)]
    ce_weight: Option<f32>,
    /// Training loss without `--distill`: `ce` (softmax cross-entropy with the labels) or
    /// `mse` (mean squared error of output 0 to a target, which `--target-input` makes the
    /// model's own input, as an autoencoder reconstructs it). With `mse`, every evaluation
    /// reports the mean squared error of `--eval-output` to the input and its PSNR
    /// (`10·log10(1/MSE)`, data in [0, 1]) instead of top-1 accuracy.
    #[arg(long, default_value = "ce", value_parser = ["ce", "mse"])]
    loss: String,
    /// With `--loss mse`: the target is the model's input (an autoencoder).
    #[arg(long)]
    target_input: bool,
    /// The output whose argmax is scored (accuracy with labels, agreement without).
    /// Default: the first output that is a Softmax's probabilities, else output 0.
    #[arg(long)]
    eval_output: Option<usize>,
    /// Learn the quantization scales (LSQ).
    #[arg(long)]
    lsq: bool,
    /// LSQ+: learn the scales (as --lsq) and the zero point of every affine activation
    /// (rounded to an integer code after each step, so the export stays integer).
    #[arg(long)]
    lsq_plus: bool,
    /// Train the first E epochs with batch statistics: a BatchNormalization that PTQ's
    /// preparation folded into a Conv runs after it on each batch's mean and variance
    /// (running statistics updated); at the start of epoch E+1 its running statistics are
    /// folded into the Conv exactly as deployed and frozen. 0 (default): folded and frozen
    /// from the start. The evaluation of an epoch before the freeze (and the output, if
    /// E >= --epochs) is the model with the running statistics folded.
    #[arg(long, default_value_t = 0)]
    freeze_bn_epoch: usize,
    /// Weight averaging: keep an exponential moving average of the trained parameters
    /// (weights, biases and, with --lsq, the learned scales), `a ← d·a + (1 − d)·p` after
    /// every step, and evaluate, keep (--keep-best) and write the averaged model instead of
    /// the last step's (Polyak averaging, as TensorFlow's ExponentialMovingAverage and
    /// timm's ModelEmaV2). Off by default. The average restarts while the observers move
    /// activation ranges and at the BatchNormalization freeze (docs/qat.md, "Weight
    /// averaging").
    #[arg(long, value_name = "DECAY")]
    ema: Option<f32>,
    /// With --ema: warm the decay up as min(DECAY, (1 + t)/(10 + t)) at update t, so the
    /// starting point's weight in the average vanishes (without it, it is DECAY^steps).
    #[arg(long)]
    ema_warmup: bool,
    /// Per-tensor weights instead of per output channel.
    #[arg(long)]
    per_tensor: bool,
    /// Training steps whose batches move the activation ranges (EMA of the batch min/max)
    /// before they freeze: the ranges that start from PTQ's min/max (8-bit activations, and
    /// narrow ones with `--init minmax`); `--init mse` ranges are not moved.
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
    /// Shuffling seed (also seeds `--augment`; the `--validation` split has its own).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Augment every training batch before the student and the teacher see it (labels
    /// are kept): comma-separated `flip[=AXIS]`, `shift=PX`, `scale=F`, `brightness=F`,
    /// `contrast=F`, `noise=F`, `p=F`, `layout=nchw|nhwc`, or `default` (`flip,shift=2,
    /// scale=0.1,brightness=0.1,contrast=0.1,noise=0.02`). A fresh seeded transform each
    /// time a sample is drawn; brightness and noise are in standard deviations of the
    /// sample; `flip` mirrors the width axis, `flip=AXIS` that tensor axis (MTCNN's
    /// `[N, W, H, C]` inputs: `flip=1`). Calibration and evaluation data are never
    /// augmented (docs/qat.md).
    #[arg(long)]
    augment: Option<String>,
    /// Hold out this many training samples (a random subset drawn with
    /// `--validation-seed`) as a validation split: never trained on nor calibrated on; the
    /// integer engine's accuracy on it (without labels: top-1 agreement with the float
    /// model) is printed per epoch.
    #[arg(long)]
    validation: Option<usize>,
    /// Seed of the `--validation` split, apart from `--seed` so that runs with other
    /// shuffling hold out the same samples: `quantkit train --validation N
    /// --validation-seed S` holds out the same N images.
    #[arg(long, default_value_t = 0)]
    validation_seed: u64,
    /// Write the epoch with the best validation figure instead of the last one (ties go to
    /// the later epoch); the QAT start (PTQ) is a candidate too, as epoch 0, so the written
    /// model never scores below the start on the validation split. Needs `--validation`.
    /// The test set is never used to choose.
    #[arg(long)]
    keep_best: bool,
    /// Output QDQ ONNX model (written atomically, only after training succeeded).
    #[arg(short, long)]
    output: PathBuf,
    /// CSV of per-epoch loss and accuracies; an SVG plot of them (loss, and float /
    /// fake-quant / engine values per epoch) is written beside it with the extension `.svg`.
    /// Both are written atomically after the model.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// No progress on stderr: neither the progress bar (a terminal) nor the plain lines
    /// written when stderr is not a terminal or with --json (`qat: H:MM:SS ...`: each
    /// epoch's figures, and within an epoch a line at most every 30 s). Warnings and errors
    /// are still printed.
    #[arg(short, long)]
    quiet: bool,
}

/// Agreement of one output with the float model's over the evaluation set: the cosine of
/// the two flattened outputs (all samples, all values) and the largest |difference|.
#[derive(Clone, Copy, Debug, Default)]
struct Closeness {
    dot: f64,
    aa: f64,
    bb: f64,
    max_abs: f64,
}

impl Closeness {
    fn add(&mut self, float: &[f32], other: &[f32]) {
        for (&a, &b) in float.iter().zip(other) {
            let (a, b) = (f64::from(a), f64::from(b));
            self.dot += a * b;
            self.aa += a * a;
            self.bb += b * b;
            self.max_abs = self.max_abs.max((a - b).abs());
        }
    }

    /// Cosine similarity; 1 when both are all zero, 0 when only one is.
    fn cosine(&self) -> f64 {
        if self.aa == 0.0 && self.bb == 0.0 {
            1.0
        } else if self.aa == 0.0 || self.bb == 0.0 {
            0.0
        } else {
            self.dot / (self.aa.sqrt() * self.bb.sqrt())
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({"cosine": self.cosine(), "max_abs_diff": self.max_abs})
    }
}

struct EvalResult {
    /// Per graph output: the exact-mode fake-quant model and the engine against float.
    fake_close: Vec<Closeness>,
    engine_close: Vec<Closeness>,
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

/// The reconstruction scores of one batch (output `po` against the input `x`): the summed
/// squared errors of the float, exact-mode fake-quant, f32 fake-quant and engine outputs,
/// and per sample the largest |exact-mode − engine| difference.
fn recon_batch(
    x: &[f32],
    outs: [&Tensor; 4],
    samples: usize,
) -> anyhow::Result<([f64; 4], Vec<f32>)> {
    let mut sq = [0f64; 4];
    let vals: Vec<Vec<f32>> = outs.iter().map(|t| t.to_f32_vec()).collect();
    for (s, v) in sq.iter_mut().zip(&vals) {
        anyhow::ensure!(
            v.len() == x.len(),
            "--target-input: the scored output has {} values per batch, the input {}",
            v.len(),
            x.len()
        );
        *s = v
            .iter()
            .zip(x)
            .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
            .sum();
    }
    let per = (x.len() / samples.max(1)).max(1);
    let diffs = vals[1]
        .chunks(per)
        .zip(vals[3].chunks(per))
        .map(|(q, e)| q.iter().zip(e).fold(0f32, |m, (a, b)| m.max((a - b).abs())))
        .collect();
    Ok((sq, diffs))
}

/// PSNR in dB of a mean squared error on data in [0, 1].
fn psnr(mse: f64) -> f64 {
    10.0 * (1.0 / mse.max(1e-30)).log10()
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

/// Every output of the float model, in graph order.
fn float_outputs(float: &Graph, input: &str, x: &Tensor) -> anyhow::Result<Vec<Tensor>> {
    Ok(
        quantkit_graph::execute(float, vec![(input.to_string(), x.clone())])?
            .into_iter()
            .map(|(_, t)| t)
            .collect(),
    )
}

/// Every output of the engine, in the float graph's output order.
fn engine_outputs(
    engine: &quantkit_engine::Plan,
    float: &Graph,
    input: &str,
    x: Tensor,
) -> anyhow::Result<Vec<Tensor>> {
    let mut outs = engine.run(vec![(input, x)])?;
    float
        .outputs
        .iter()
        .map(|o| {
            let i = outs
                .iter()
                .position(|(n, _)| n == &o.name)
                .with_context(|| format!("the engine has no output `{}`", o.name))?;
            Ok(std::mem::replace(
                &mut outs[i].1,
                Tensor::from_f32(&[0], vec![]),
            ))
        })
        .collect()
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
    po: usize,
    recon_step: Option<f32>,
) -> anyhow::Result<EvalResult> {
    let (mut f, mut q, mut e, mut agree, mut n) = (0usize, 0usize, 0usize, 0usize, 0usize);
    let (mut q32, mut agree32, mut worst) = (0usize, 0usize, 0f64);
    // Reconstruction (`recon_step`: one output quantization step): squared errors and
    // values, and the samples whose exact-mode output is within one step of the engine's.
    let (mut sq, mut values) = ([0f64; 4], 0usize);
    let nout = float.outputs.len();
    let (mut fake_close, mut engine_close) = (
        vec![Closeness::default(); nout],
        vec![Closeness::default(); nout],
    );
    for b in data.batches(&BatchOptions {
        batch_size: 500,
        limit,
        ..Default::default()
    })? {
        let b = b?;
        let x = Tensor::from_f32(&b.shape, b.data);
        let ft = float_outputs(float, input, &x)?;
        let q32t = qat.predict_outputs(x.clone())?;
        let q32y = top1(&q32t[po]);
        let qt = qat.predict_exact_outputs(x.clone(), exact)?;
        let xv = recon_step.map(|_| x.to_f32_vec());
        let et = engine_outputs(engine, float, input, x)?;
        if let (Some(step), Some(xv)) = (recon_step, &xv) {
            let samples = b.shape.first().copied().unwrap_or(1);
            let (s, diffs) = recon_batch(xv, [&ft[po], &qt[po], &q32t[po], &et[po]], samples)?;
            sq.iter_mut().zip(s).for_each(|(a, b)| *a += b);
            values += xv.len();
            for d in diffs {
                agree += usize::from(d <= step);
                worst = worst.max(f64::from(d));
            }
            for i in 0..nout {
                fake_close[i].add(&ft[i].to_f32_vec(), &qt[i].to_f32_vec());
                engine_close[i].add(&ft[i].to_f32_vec(), &et[i].to_f32_vec());
            }
            n += samples;
            continue;
        }
        for i in 0..nout {
            let (fv, qv, ev) = (ft[i].to_f32_vec(), qt[i].to_f32_vec(), et[i].to_f32_vec());
            for (a, b) in qv.iter().zip(&ev) {
                worst = worst.max(f64::from((a - b).abs()));
            }
            fake_close[i].add(&fv, &qv);
            engine_close[i].add(&fv, &ev);
        }
        let fy = top1(&ft[po]);
        let qy = top1(&qt[po]);
        let ey = top1(&et[po]);
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
    if recon_step.is_some() {
        let m = |i: usize| sq[i] / values.max(1) as f64;
        return Ok(EvalResult {
            fake_close,
            engine_close,
            float: m(0),
            fake: m(1),
            fake_f32: m(2),
            engine: m(3),
            agreement: r(agree),
            agreement_f32: f64::NAN,
            max_logit_diff: worst,
            samples: n,
        });
    }
    Ok(EvalResult {
        fake_close,
        engine_close,
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
    po: usize,
    recon: bool,
) -> anyhow::Result<(f64, Vec<Closeness>)> {
    let (mut e, mut n) = (0usize, 0usize);
    let (mut sq, mut values) = (0f64, 0usize);
    let mut close = vec![Closeness::default(); float.outputs.len()];
    for b in data.batches(&BatchOptions {
        batch_size: 500,
        limit,
        ..Default::default()
    })? {
        let b = b?;
        let x = Tensor::from_f32(&b.shape, b.data);
        let ft = float_outputs(float, input, &x)?;
        let xv = recon.then(|| x.to_f32_vec());
        let et = engine_outputs(engine, float, input, x)?;
        for (c, (a, b)) in close.iter_mut().zip(ft.iter().zip(&et)) {
            c.add(&a.to_f32_vec(), &b.to_f32_vec());
        }
        if let Some(xv) = xv {
            let samples = b.shape.first().copied().unwrap_or(1);
            let (s, _) = recon_batch(&xv, [&et[po], &et[po], &et[po], &et[po]], samples)?;
            sq += s[3];
            values += xv.len();
            continue;
        }
        let truth: Vec<usize> = match &b.labels {
            Some(l) => l.iter().map(|&v| v as usize).collect(),
            None => top1(&ft[po]),
        };
        let ey = top1(&et[po]);
        e += ey.iter().zip(&truth).filter(|(a, b)| a == b).count();
        n += truth.len();
    }
    if recon {
        return Ok((sq / values.max(1) as f64, close));
    }
    Ok((e as f64 / n.max(1) as f64, close))
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
        // A warning is printed even when the bar is hidden (--json, not a terminal).
        match bar {
            Some(b) if !b.is_hidden() => b.println(msg),
            _ => eprintln!("{msg}"),
        }
    }
    Ok(exact)
}

/// The scale of the DequantizeLinear writing the graph's output `po` (one output step),
/// when there is one.
fn output_step(g: &Graph, po: usize) -> Option<f32> {
    let o = &g.outputs.get(po)?.name;
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
        args.weight_decay.is_finite() && args.weight_decay >= 0.0,
        "--weight-decay must be a non-negative number, got {}",
        args.weight_decay
    );
    anyhow::ensure!(
        args.max_weight_step.is_finite() && args.max_weight_step >= 0.0,
        "--max-weight-step must be a non-negative number, got {}",
        args.max_weight_step
    );
    anyhow::ensure!(
        args.batch > 0 && args.epochs > 0,
        "--batch and --epochs must be positive"
    );
    if let Some(d) = args.ema {
        anyhow::ensure!(
            d.is_finite() && (0.0..1.0).contains(&d),
            "--ema {d}: the decay must be a number in [0, 1) (0.999 averages over about the last 1,000 steps)"
        );
    }
    anyhow::ensure!(
        args.ema.is_some() || !args.ema_warmup,
        "--ema-warmup warms up the decay of --ema: give --ema DECAY"
    );
    let recon = args.loss == "mse";
    if recon {
        anyhow::ensure!(
            args.target_input,
            "--loss mse needs a target: --target-input (the input itself, for an \
             autoencoder); float target files are not supported yet"
        );
        anyhow::ensure!(
            !args.distill,
            "--loss mse trains against a target, --distill against the float model: give one"
        );
    } else {
        anyhow::ensure!(!args.target_input, "--target-input needs --loss mse");
    }
    let loss_names: Vec<String> = args
        .distill_loss
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    if let Some(o) = loss_names
        .iter()
        .find(|o| !matches!(o.as_str(), "kl" | "mse" | "auto"))
    {
        bail!("--distill-loss {o}: expected kl, mse or auto");
    }
    anyhow::ensure!(
        args.distill_temperature.is_finite() && args.distill_temperature > 0.0,
        "--distill-temperature must be a positive number, got {}",
        args.distill_temperature
    );
    let weights: Vec<f32> = match &args.distill_weights {
        None => vec![1.0],
        Some(w) => w
            .split(',')
            .map(|v| {
                v.trim()
                    .parse::<f32>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .with_context(|| format!("--distill-weights: `{v}` is not a number >= 0"))
            })
            .collect::<anyhow::Result<_>>()?,
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
    let prepared = quantkit_ptq::prepare(&mut float)
        .with_context(|| format!("preparing {}", args.model.display()))?;
    // Conv layers whose BatchNormalization was folded: trained with batch statistics
    // for the first --freeze-bn-epoch epochs.
    let bn_batch_stats: Vec<String> = if args.freeze_bn_epoch > 0 {
        prepared
            .batch_norms_folded
            .iter()
            .map(|(_, p)| p.clone())
            .filter(|p| {
                float
                    .nodes
                    .iter()
                    .any(|n| &n.name == p && n.is(quantkit_graph::OpKind::Conv))
            })
            .collect()
    } else {
        Vec::new()
    };
    if args.freeze_bn_epoch > 0 && bn_batch_stats.is_empty() {
        eprintln!(
            "warning: --freeze-bn-epoch {}: {} has no BatchNormalization folded into a Conv; \
             nothing trains with batch statistics",
            args.freeze_bn_epoch,
            args.model.display()
        );
    }
    let specs = quantkit_ptq::input_specs(&float)?;
    anyhow::ensure!(
        specs.len() == 1,
        "{}: qat trains models with one float input, this one has {}",
        args.model.display(),
        specs.len()
    );
    let input = specs[0].name.clone();
    anyhow::ensure!(
        !args.keep_best || args.validation.is_some(),
        "--keep-best chooses the epoch on a validation split: give --validation N"
    );
    let augment = args
        .augment
        .as_deref()
        .map(quantkit_train::augment::Augment::parse)
        .transpose()?;
    // The validation split: a seeded subset of the training data, kept out of training
    // and out of the default calibration.
    let split = match args.validation {
        Some(nv) => {
            let n = open(&args.data, &specs, Split::Train, args.labels.clone())?.len();
            Some(
                quantkit_data::validation_split(n, nv, args.validation_seed)
                    .with_context(|| format!("--validation {nv} of {}", args.data.display()))?,
            )
        }
        None => None,
    };

    // PTQ starting point.
    let calib_path = args.calib.clone().unwrap_or_else(|| args.data.clone());
    let mut calib = open(&calib_path, &specs, Split::Train, args.labels.clone())?;
    if let (None, Some((tr, _))) = (&args.calib, &split) {
        calib = calib.subset(tr.clone())?;
    }
    let mut cfg = quantkit_ptq::PtqConfig {
        calib_samples: Some(1000),
        ..Default::default()
    };
    cfg.qdq.weight_bits = args.weight_bits;
    cfg.qdq.per_channel = !args.per_tensor;
    let (ptq, _) = quantkit_ptq::quantize_static(float.clone(), &mut calib, &cfg, &mut |_, _| {})
        .context("post-training quantization (the QAT starting point)")?;
    let init = match args.init.as_str() {
        // The same calibration samples, observed again with histograms at the narrow width.
        "mse" if args.activation_bits < 8 => QatInit::Mse {
            activation_ranges: quantkit_train::qat_init::activation_ranges(
                &float,
                &mut calib,
                args.activation_bits,
                cfg.qdq.signed_activations,
                cfg.calib_samples.unwrap_or(usize::MAX),
            )
            .context("choosing the activation ranges at the narrow width (--init mse)")?,
        },
        "mse" => QatInit::Mse {
            activation_ranges: Default::default(),
        },
        _ => QatInit::MinMax,
    };
    let narrow_start = init != QatInit::MinMax && args.weight_bits < 8;
    drop(calib);
    let mut qat = Qat::from_ptq(
        &float,
        &ptq,
        &QatOptions {
            weight_bits: args.weight_bits,
            activation_bits: args.activation_bits,
            lsq: args.lsq || args.lsq_plus,
            lsq_plus: args.lsq_plus,
            observer_steps: args.observer_steps,
            int4_weights: !args.int8_weights,
            first_last_8bit: args.first_last_8bit,
            bn_batch_stats,
            init,
            ..Default::default()
        },
    )?;
    if let Some(d) = args.ema {
        qat.enable_ema(d, args.ema_warmup)?;
    }
    let nout = float.outputs.len();
    let po = match args.eval_output {
        Some(i) if i < nout => i,
        Some(i) => bail!(
            "--eval-output {i}: {} has {nout} outputs",
            args.model.display()
        ),
        None => (0..nout)
            .find(|&i| qat.softmax_probs_of(i).is_some())
            .unwrap_or(0),
    };
    let per_output = |v: &[String], what: &str| -> anyhow::Result<Vec<String>> {
        match v.len() {
            1 => Ok(vec![v[0].clone(); nout]),
            n if n == nout => Ok(v.to_vec()),
            n => {
                bail!("{what}: {n} values for {nout} outputs (give one for all or one per output)")
            }
        }
    };
    let loss_names = per_output(&loss_names, "--distill-loss")?;
    let weights: Vec<f32> = per_output(
        &weights.iter().map(f32::to_string).collect::<Vec<_>>(),
        "--distill-weights",
    )?
    .iter()
    .map(|w| w.parse().expect("formatted above"))
    .collect();

    let mut train = open(&args.data, &specs, Split::Train, args.labels.clone())?;
    if let Some(w) = args.ce_weight {
        anyhow::ensure!(
            args.distill,
            "--ce-weight adds a label term to the distillation loss: it needs --distill"
        );
        anyhow::ensure!(
            w.is_finite() && w >= 0.0,
            "--ce-weight must be a number >= 0, got {w}"
        );
        anyhow::ensure!(
            train.has_labels(),
            "{}: --ce-weight needs training labels (give --labels)",
            args.data.display()
        );
    }
    let mut val_data = None;
    if let Some((tr, va)) = split {
        val_data = Some(open(&args.data, &specs, Split::Train, args.labels.clone())?.subset(va)?);
        train = train.subset(tr)?;
    }
    anyhow::ensure!(
        !(recon && args.validation.is_some()),
        "--validation scores top-1 on held-out training samples; it does not apply to --loss mse"
    );
    if !args.distill && !recon && !train.has_labels() {
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

    // Distillation terms. An MSE term is divided by the variance of the float output over
    // (at most 1,000 of) the training samples, so every term is dimensionless and a
    // weight of 1 means the same for a box regressor as for a classifier.
    let mut terms = Vec::new();
    if args.distill {
        let mut var = vec![(0f64, 0f64, 0usize); nout];
        if loss_names.iter().any(|l| l != "kl") {
            for b in train.batches(&BatchOptions {
                batch_size: 100,
                limit: Some(args.limit.unwrap_or(usize::MAX).min(1000)),
                ..Default::default()
            })? {
                let b = b?;
                let x = Tensor::from_f32(&b.shape, b.data);
                for (v, t) in var.iter_mut().zip(float_outputs(&float, &input, &x)?) {
                    for y in t.to_f32_vec() {
                        v.0 += f64::from(y);
                        v.1 += f64::from(y) * f64::from(y);
                        v.2 += 1;
                    }
                }
            }
        }
        for (i, (name, &w)) in loss_names.iter().zip(&weights).enumerate() {
            let probs = qat.softmax_probs_of(i).is_some();
            let sigmoid = qat.sigmoid_probs_of(i).is_some();
            let kind = match name.as_str() {
                "auto" if probs || (nout == 1 && !sigmoid) => "kl",
                "auto" => "mse",
                n => n,
            };
            if kind == "kl" && sigmoid && w != 0.0 {
                bail!(
                    "--distill-loss kl on output {i} `{}`: it is a Sigmoid's per-element probabilities \
                     (a KL over its last axis would be meaningless); use mse or auto",
                    float.outputs[i].name
                );
            }
            let loss = if w == 0.0 {
                OutputLoss::Ignore
            } else if kind == "kl" && probs {
                OutputLoss::KlProbs {
                    temperature: args.distill_temperature,
                }
            } else if kind == "kl" {
                OutputLoss::KlLogits {
                    temperature: args.distill_temperature,
                }
            } else {
                let (s, ss, n) = var[i];
                let n = n.max(1) as f64;
                let v = (ss / n - (s / n).powi(2)).max(0.0);
                // A constant output: fall back to the mean square, then to 1.
                let norm = if v > 1e-12 { v } else { (ss / n).max(1.0) };
                OutputLoss::Mse { norm: norm as f32 }
            };
            terms.push(OutputTerm { loss, weight: w });
        }
        if !args.json {
            for (o, t) in float.outputs.iter().zip(&terms) {
                eprintln!(
                    "distilling output `{}`: {:?}, weight {}",
                    o.name, t.loss, t.weight
                );
            }
        }
        anyhow::ensure!(
            terms.iter().any(|t| t.loss != OutputLoss::Ignore),
            "--distill-weights: every output has weight 0"
        );
    }

    let engine_opts = quantkit_engine::EngineOptions::default();
    // Below 8 activation bits, with 8-bit first/last layers or narrow weights starting from
    // `--init mse`, the PTQ baseline is PTQ's placement with the starting ranges at the
    // trained widths: the QAT model before its first step, exported.
    let ptq = if args.activation_bits < 8 || args.first_last_8bit || narrow_start {
        qat.export()
            .context("exporting PTQ with narrow activation codes")?
    } else {
        ptq
    };
    let ptq_plan = quantkit_engine::compile(&ptq, &engine_opts)
        .context("compiling the PTQ model on the integer engine")?;
    let (ptq_value, ptq_close) = evaluate_engine(
        &mut eval_data,
        args.eval_limit,
        &input,
        &float,
        &ptq_plan,
        po,
        recon,
    )?;

    let val_ptq = match &mut val_data {
        Some(v) => Some(evaluate_engine(v, None, &input, &float, &ptq_plan, po, recon)?.0),
        None => None,
    };
    let mut val_scores: Vec<f64> = Vec::new();
    // The candidate --keep-best holds: (epochs trained, 0 for the start; the state; its
    // export; its per-output training losses; its validation figure).
    type Kept = (usize, Box<Qat>, Graph, Vec<f64>, f64);
    let mut best: Option<Kept> = None;
    let mut val_start = None;
    // A model's figure on the validation split, run on the integer engine as exported.
    let validation_score = |q: &Qat, v: &mut DataSource, what: &str| -> anyhow::Result<_> {
        let exported = q
            .export()
            .with_context(|| format!("{what}: exporting for the validation split"))?;
        let plan = quantkit_engine::compile(&exported, &engine_opts)
            .with_context(|| format!("{what}: compiling the QAT model on the integer engine"))?;
        let (score, _) = evaluate_engine(v, None, &input, &float, &plan, po, recon)?;
        Ok((exported, score))
    };
    // The start is a candidate too: fine-tuning that scores below it on the validation
    // split is not kept, so a kept model is never worse there than where QAT began.
    if let (true, Some(v)) = (args.keep_best, &mut val_data) {
        let start = qat.deployed()?.into_owned();
        let (exported, score) = validation_score(&start, v, "the QAT start")?;
        val_start = Some(score);
        best = Some((0, Box::new(start), exported, vec![f64::NAN; nout], score));
    }

    let n_train = args.limit.map_or(train.len(), |l| l.min(train.len()));
    let steps = n_train / args.batch;
    anyhow::ensure!(
        steps > 0,
        "fewer training samples ({n_train}) than one batch ({})",
        args.batch
    );
    let total = steps * args.epochs;
    let warmup = (total / 50).clamp(1, 100);
    let mut opt: Box<dyn Optimizer> = if args.optimizer == "sgd" {
        Box::new(Sgd::new(0.9, args.weight_decay))
    } else {
        let mut adam = Adam::new(args.weight_decay);
        adam.max_step_ratio = args.max_weight_step;
        if args.max_weight_step > 0.0 && !args.json {
            let bound = args.lr / args.max_weight_step;
            let small: Vec<String> = qat
                .net
                .params
                .iter()
                .filter(|p| p.trainable && p.decay)
                .filter_map(|p| {
                    let d = p.value.data();
                    let rms = (d.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>()
                        / d.len().max(1) as f64)
                        .sqrt();
                    (rms < f64::from(bound)).then(|| format!("{} ({rms:.1e})", p.name))
                })
                .collect();
            if !small.is_empty() {
                eprintln!(
                    "--max-weight-step {}: steps limited on {} weight tensors with RMS below lr/R = {bound:.1e}: {}",
                    args.max_weight_step,
                    small.len(),
                    small.join(", ")
                );
            }
        }
        Box::new(adam)
    };
    // Per output (appended columns): its distillation loss and the engine's cosine with
    // the float output on the evaluation data.
    let mut log = String::from(
        "epoch,loss,train_accuracy,samples_per_s,float,fake_quant,engine,engine_agreement,fake_quant_f32,engine_agreement_f32,max_logit_diff,seconds",
    );
    for i in 0..nout {
        log.push_str(&format!(",loss_output{i},engine_cosine_output{i}"));
    }
    if val_data.is_some() {
        log.push_str(",validation");
    }
    log.push('\n');
    let mut points: Vec<super::qat_plot::EpochPoint> = Vec::new();
    let progress = Progress::new("qat", Mode::of(args.json, args.quiet));
    let bar = progress.training_bar(total as u64);
    progress.line(format_args!(
        "training: {} epochs of {steps} steps (batch {}); PTQ start {}",
        args.epochs,
        args.batch,
        if recon {
            format!("reconstruction MSE {ptq_value:.6}")
        } else {
            format!("{:.2}%", ptq_value * 100.0)
        }
    ));
    let mut global = 0;
    let mut last = None;
    let mut epochs_secs = Vec::new();
    for epoch in 0..args.epochs {
        if epoch == args.freeze_bn_epoch && qat.bn_batch_active() {
            qat.freeze_bn()
                .context("folding the batch-statistics BatchNormalizations")?;
            progress.say(
                &bar,
                format!(
                "epoch {}: BatchNormalization statistics frozen and folded into the Conv layers",
                epoch + 1
            ),
            );
        }
        let te = Instant::now();
        let (mut loss_sum, mut correct, mut seen) = (0f64, 0usize, 0usize);
        // Inputs trained on, for samples/s: `seen` counts prediction rows (the frames of a
        // text line for an [N, T, C] output), which weigh the loss and the accuracy.
        let mut inputs = 0usize;
        let mut part_sums = vec![0f64; nout];
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
            inputs += b.shape.first().copied().unwrap_or(0);
            let x = Tensor::from_f32(&b.shape, b.data);
            // Augmented before the teacher and the student see it; labels stay.
            let x = match &augment {
                Some(a) => a
                    .apply_tensor(
                        &x,
                        quantkit_train::augment::batch_seed(args.seed, epoch, step),
                    )
                    .context("--augment")?,
                None => x,
            };
            let labels: Option<Vec<usize>> = b
                .labels
                .filter(|_| !recon)
                .map(|l| l.into_iter().map(|v| v as usize).collect());
            let lr = cosine_lr(args.lr, global, total, warmup);
            let stopped = || {
                format!(
                    "epoch {}, step {step}: training stopped and nothing was written to {}",
                    epoch + 1,
                    args.output.display()
                )
            };
            let (l, out) = if args.distill {
                let teachers: Vec<Vec<f32>> = float_outputs(&float, &input, &x)?
                    .iter()
                    .map(Tensor::to_f32_vec)
                    .collect();
                let ce = args
                    .ce_weight
                    .zip(labels.as_deref())
                    .map(|(weight, labels)| LabelTerm {
                        output: po,
                        labels,
                        weight,
                    });
                let (l, parts, mut outs) = qat
                    .train_step_outputs_labels(&mut *opt, x, &teachers, &terms, ce, lr)
                    .with_context(stopped)?;
                let nb = outs[po].shape.first().copied().unwrap_or(1) as f64;
                for (s, p) in part_sums.iter_mut().zip(parts) {
                    *s += f64::from(p) * nb;
                }
                (l, outs.swap_remove(po))
            } else if recon {
                let target = x.to_f32_vec();
                let (l, out) = qat
                    .train_step(&mut *opt, x, LossKind::Mse, None, Some(&target), lr)
                    .with_context(stopped)?;
                anyhow::ensure!(
                    out.len() == target.len(),
                    "--target-input: output 0 has shape {:?}, the input {} values per batch",
                    out.shape,
                    target.len()
                );
                (l, out)
            } else {
                qat.train_step(
                    &mut *opt,
                    x,
                    LossKind::CrossEntropy,
                    labels.as_deref(),
                    None,
                    lr,
                )
                .with_context(stopped)?
            };
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
            let pred = if recon {
                vec![0; out.shape.first().copied().unwrap_or(0)]
            } else {
                top1(&out)
            };
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
                inputs as f64 / te.elapsed().as_secs_f64().max(1e-9)
            ));
            bar.inc(1);
            if progress.due() {
                progress.line(format_args!(
                    "epoch {}/{}: step {}/{steps}, loss {:.4}, {:.0} samples/s",
                    epoch + 1,
                    args.epochs,
                    step + 1,
                    loss_sum / seen.max(1) as f64,
                    inputs as f64 / te.elapsed().as_secs_f64().max(1e-9)
                ));
            }
        }
        let train_secs = te.elapsed().as_secs_f64();
        epochs_secs.push(train_secs);
        let sps = inputs as f64 / train_secs.max(1e-9);
        let part_means: Vec<f64> = part_sums.iter().map(|p| p / seen.max(1) as f64).collect();
        let mut val_note = String::new();
        // What deploys now: the averaged parameters with --ema, with the running statistics
        // folded while BatchNormalization runs on batch statistics.
        let deployed = qat.deployed()?;
        if let Some(v) = &mut val_data {
            let (exported, score) =
                validation_score(&deployed, v, &format!("epoch {}", epoch + 1))?;
            val_scores.push(score);
            val_note = format!(",{score:.6}");
            progress.say(
                &bar,
                format!(
                "epoch {}: validation ({} held-out training samples, engine) {:.2}% (PTQ {:.2}%)",
                epoch + 1,
                v.len(),
                score * 100.0,
                val_ptq.unwrap_or(f64::NAN) * 100.0
            ),
            );
            // Ties go to the later epoch: further down the cosine schedule.
            if args.keep_best && best.as_ref().is_none_or(|b| score >= b.4) {
                // Kept as exported: the deployed model.
                let kept = deployed.clone().into_owned();
                best = Some((
                    epoch + 1,
                    Box::new(kept),
                    exported,
                    part_means.clone(),
                    score,
                ));
            }
        }
        if args.eval_last && epoch + 1 < args.epochs {
            log.push_str(&format!(
                "{},{:.6},{:.6},{:.1},,,,,,,,{:.2}",
                epoch + 1,
                loss_sum / seen.max(1) as f64,
                correct as f64 / seen.max(1) as f64,
                sps,
                t0.elapsed().as_secs_f64()
            ));
            for p in &part_sums {
                log.push_str(&format!(",{:.6},", p / seen.max(1) as f64));
            }
            log.push_str(&val_note);
            log.push('\n');
            points.push(super::qat_plot::EpochPoint {
                epoch: epoch + 1,
                loss: loss_sum / seen.max(1) as f64,
                float: None,
                fake: None,
                engine: None,
            });
            progress.say(
                &bar,
                format!(
                    "epoch {}: loss {:.4}, {sps:.0} samples/s (evaluated after the last epoch)",
                    epoch + 1,
                    loss_sum / seen.max(1) as f64
                ),
            );
            continue;
        }
        // Parameters are checked finite after every step, but quantities derived from
        // them can still overflow (a bias scale s_in·s_w of two huge finite scales).
        let exported = deployed.export().with_context(|| {
            format!(
                "epoch {}: the trained parameters no longer make a valid quantized model \
                 (a scale overflowed or became non-finite; try a lower --lr): training \
                 stopped and nothing was written to {}",
                epoch + 1,
                args.output.display()
            )
        })?;
        let plan = quantkit_engine::compile(&exported, &engine_opts)
            .context("compiling the QAT model on the integer engine")?;
        // The model `export` wrote: averaged, and before the BatchNormalization freeze
        // with its running statistics folded.
        let evq: &Qat = &deployed;
        let exact = exact_plan(evq, &exported, &plan, &engine_opts, Some(&bar))?;
        let ev = evaluate(
            &mut eval_data,
            args.eval_limit,
            &input,
            &float,
            evq,
            &exact,
            &plan,
            po,
            // Exact mode agrees within one output step (the engine's rounding is the same).
            recon.then(|| output_step(&exported, po).unwrap_or(0.0)),
        )?;
        log.push_str(&format!(
            "{},{:.6},{:.6},{:.1},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6e},{:.2}",
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
        for (p, c) in part_sums.iter().zip(&ev.engine_close) {
            log.push_str(&format!(",{:.6},{:.6}", p / seen.max(1) as f64, c.cosine()));
        }
        log.push_str(&val_note);
        log.push('\n');
        points.push(super::qat_plot::EpochPoint {
            epoch: epoch + 1,
            loss: loss_sum / seen.max(1) as f64,
            float: Some(ev.float),
            fake: Some(ev.fake),
            engine: Some(ev.engine),
        });
        if args.distill {
            let parts: Vec<String> = float
                .outputs
                .iter()
                .zip(&part_sums)
                .zip(&ev.engine_close)
                .map(|((o, p), c)| {
                    format!(
                        "`{}` loss {:.4} cosine {:.5}",
                        o.name,
                        p / seen.max(1) as f64,
                        c.cosine()
                    )
                })
                .collect();
            progress.say(
                &bar,
                format!("  per output (engine vs float): {}", parts.join(", ")),
            );
        }
        if recon {
            progress.say(&bar, format!(
                "epoch {}: loss {:.6}, {:.0} samples/s; eval on {}: reconstruction MSE float {:.6}, fake-quant (exact mode) {:.6}, engine {:.6} (PSNR {:.2} / {:.2} / {:.2} dB; engine within one output step of fake-quant on {:.2}% of samples, max difference {:.3e}; f32 fake-quant MSE {:.6})",
                epoch + 1,
                loss_sum / seen.max(1) as f64,
                sps,
                ev.samples,
                ev.float,
                ev.fake,
                ev.engine,
                psnr(ev.float),
                psnr(ev.fake),
                psnr(ev.engine),
                ev.agreement * 100.0,
                ev.max_logit_diff,
                ev.fake_f32
            ));
        } else {
            progress.say(&bar, format!(
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
        }
        last = Some((exported, ev, part_means, epoch));
    }
    bar.finish_and_clear();
    let (mut exported, mut ev, mut last_parts, last_epoch) = last.expect("at least one epoch");
    let mut kept_epoch = args.epochs;
    if let Some((kept, qat_best, exported_best, parts, score)) = best {
        kept_epoch = kept;
        if kept != last_epoch + 1 {
            // The test figures of the kept epoch (evaluated once, after the choice).
            let plan = quantkit_engine::compile(&exported_best, &engine_opts)
                .context("compiling the kept epoch's model on the integer engine")?;
            let exact = exact_plan(&qat_best, &exported_best, &plan, &engine_opts, None)?;
            ev = evaluate(
                &mut eval_data,
                args.eval_limit,
                &input,
                &float,
                &qat_best,
                &exact,
                &plan,
                po,
                recon.then(|| output_step(&exported_best, po).unwrap_or(0.0)),
            )?;
            exported = exported_best;
            last_parts = parts;
        }
        if !args.json {
            if kept == 0 {
                eprintln!(
                    "keeping the start (validation {:.2}%): no epoch scored as well on the validation split",
                    score * 100.0
                );
            } else {
                eprintln!(
                    "keeping epoch {kept_epoch} (best validation figure {:.2}%)",
                    score * 100.0
                );
            }
        }
    }
    quantkit_graph::save_model(&exported, &args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    // How much of the average is still the state it started from (the PTQ start, the end
    // of the observer phase or the BatchNormalization freeze): with a constant decay d it
    // is d^steps, so a decay too slow for the run leaves the written model near its start.
    let ema_summary = qat.ema().map(|e| {
        (
            e.updates(),
            e.start_weight(),
            serde_json::json!({
                "decay": e.decay(),
                "warmup": e.warmup(),
                "updates": e.updates(),
                "start_weight": e.start_weight(),
            }),
        )
    });
    if let (Some((n, w, _)), false) = (&ema_summary, args.json) {
        eprintln!(
            "--ema {}: the written model is the average over the last {n} steps; the state it \
             started from weighs {:.1}% in it",
            args.ema.unwrap_or_default(),
            w * 100.0
        );
    }
    if let Some(path) = &args.log {
        quantkit_core::atomic::write_bytes(path, log.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        let (name, percent) = if recon {
            ("reconstruction MSE", false)
        } else if eval_data.has_labels() {
            ("accuracy", true)
        } else {
            ("top-1 agreement with float", true)
        };
        let svg = super::qat_plot::render(&points, name, percent)?;
        let plot = super::qat_plot::plot_path(path);
        quantkit_core::atomic::write_bytes(&plot, svg.as_bytes())
            .with_context(|| format!("writing {}", plot.display()))?;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let metric = if recon {
        "mse"
    } else if eval_data.has_labels() {
        "accuracy"
    } else {
        "agreement_with_float"
    };
    let outputs: Vec<serde_json::Value> = float
        .outputs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            serde_json::json!({
                "name": o.name,
                "loss": terms.get(i).map(|t| format!("{:?}", t.loss)),
                "weight": terms.get(i).map(|t| t.weight),
                "final_train_loss": args.distill.then(|| last_parts[i]),
                "ptq": ptq_close[i].json(),
                "qat": ev.fake_close[i].json(),
                "engine": ev.engine_close[i].json(),
            })
        })
        .collect();
    // QAT that ends worse than where it started on the evaluation data (too few training
    // samples for the learning rate, as PP-OCRv4's recogniser on 64 lines): said plainly,
    // since the summary's columns are easy to misread. Not acted on (choosing by the
    // evaluation data would make it a training set): `--validation N --keep-best` chooses
    // by a split of the training data.
    let below_ptq = if recon {
        ev.engine > ptq_value
    } else {
        ev.engine < ptq_value
    };
    if below_ptq && !args.json {
        eprintln!(
            "note: the QAT model ends below its PTQ start on the evaluation data ({} {} against {}): \
             the training data may be too few for --lr/--epochs; `--validation N --keep-best` keeps \
             the best epoch by a split of the training data, or keep the PTQ model",
            if recon { "reconstruction MSE" } else { "top-1" },
            if recon { format!("{:.6}", ev.engine) } else { format!("{:.2}%", ev.engine * 100.0) },
            if recon { format!("{ptq_value:.6}") } else { format!("{:.2}%", ptq_value * 100.0) },
        );
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "metric": metric,
                "float_value": ev.float,
                "ptq_value": ptq_value,
                "qat_value": ev.fake,
                "engine_value": ev.engine,
                "below_ptq": below_ptq,
                "engine_agreement": ev.agreement,
                "engine_max_logit_diff": ev.max_logit_diff,
                "output_step": output_step(&exported, po),
                "eval_output": po,
                "outputs": outputs,
                "fake_quant_f32_value": ev.fake_f32,
                "engine_agreement_f32": ev.agreement_f32,
                "psnr_db": recon.then(|| serde_json::json!({
                    "float": psnr(ev.float),
                    "ptq": psnr(ptq_value),
                    "qat": psnr(ev.fake),
                    "engine": psnr(ev.engine),
                })),
                "epochs": args.epochs,
                "epoch_seconds": epochs_secs,
                "seconds": seconds,
                "samples": ev.samples,
                "weight_bits": args.weight_bits,
                "activation_bits": args.activation_bits,
                "init": args.init,
                "optimizer": args.optimizer,
                "max_weight_step": args.max_weight_step,
                "weight_decay": args.weight_decay,
                "first_last_8bit": args.first_last_8bit,
                "freeze_bn_epoch": args.freeze_bn_epoch,
                "lsq_plus": args.lsq_plus,
                "ce_weight": args.ce_weight,
                "augment": args.augment,
                "validation_samples": args.validation,
                "validation_ptq": val_ptq,
                "validation_start": val_start,
                "validation": val_scores,
                "kept_epoch": kept_epoch,
                "ema": ema_summary.map(|e| e.2),
                "output": args.output.display().to_string(),
            })
        );
    } else if recon {
        println!(
            "W{}A{} QAT, {} epochs in {:.1} s: reconstruction MSE float {:.6} ({:.2} dB), PTQ (engine) {:.6} ({:.2} dB), QAT fake-quant (exact mode) {:.6} ({:.2} dB), QAT engine {:.6} ({:.2} dB); engine within one output step of fake-quant on {:.2}% of {} samples (max difference {:.3e}); wrote {}",
            args.weight_bits,
            args.activation_bits,
            args.epochs,
            seconds,
            ev.float,
            psnr(ev.float),
            ptq_value,
            psnr(ptq_value),
            ev.fake,
            psnr(ev.fake),
            ev.engine,
            psnr(ev.engine),
            ev.agreement * 100.0,
            ev.samples,
            ev.max_logit_diff,
            args.output.display()
        );
    } else {
        println!(
            "W{}A{} QAT ({} start), {} epochs in {:.1} s: {metric} float {:.2}%, PTQ (engine) {:.2}%, QAT fake-quant (exact mode) {:.2}%, QAT engine {:.2}%; engine = fake-quant top-1 on {:.2}% of {} argmax rows (samples, or frames of an [N, T, C] output); wrote {}",
            args.weight_bits,
            args.activation_bits,
            args.init,
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
        if nout > 1 || args.distill {
            for (i, o) in float.outputs.iter().enumerate() {
                println!(
                    "  output {i} `{}`: cosine with float PTQ {:.5}, QAT engine {:.5} (max |diff| {:.4})",
                    o.name,
                    ptq_close[i].cosine(),
                    ev.engine_close[i].cosine(),
                    ev.engine_close[i].max_abs
                );
            }
        }
    }
    Ok(())
}
