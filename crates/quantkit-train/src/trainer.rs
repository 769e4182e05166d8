//! The training loop and evaluation on in-memory 28×28 image data.

use std::path::Path;
use std::time::Instant;

use quantkit_data::idx::{IdxDataset, Split};
use quantkit_data::Dataset;

use crate::error::{shape_err, Result, TrainError};
use crate::model::{Model, Task};
use crate::ops::{MseLoss, SoftmaxCrossEntropy};
use crate::optim::{cosine_lr, Adam, Optimizer, Sgd};
use crate::rng::Rng;
use crate::tape::Tape;
use crate::tensor::Tensor;

/// Labelled images held as u8 (a Fashion-MNIST split is 47 MB) and turned into
/// `pixel / 255` f32 batches on demand.
#[derive(Clone, Debug)]
pub struct ImageData {
    pixels: Vec<u8>,
    labels: Vec<u8>,
    sample_shape: [usize; 3],
}

impl ImageData {
    /// Builds a data set from raw pixels (`n · C·H·W` bytes) and `n` labels.
    pub fn new(pixels: Vec<u8>, labels: Vec<u8>, sample_shape: [usize; 3]) -> Result<Self> {
        let size: usize = sample_shape.iter().product();
        if size == 0 || pixels.len() != labels.len() * size {
            return Err(shape_err(
                "ImageData",
                format!("{} labels × {size} pixels", labels.len()),
                &[pixels.len()],
            ));
        }
        Ok(Self {
            pixels,
            labels,
            sample_shape,
        })
    }

    /// Loads a split of an MNIST-style IDX folder (gzip or not) through `quantkit-data`.
    pub fn from_idx_dir(dir: &Path, split: Split) -> Result<Self> {
        let ds = IdxDataset::open_dir(dir, split)?;
        let shape = ds.sample_shape().to_vec();
        let [c, h, w] = shape[..] else {
            return Err(shape_err("ImageData", "images of shape [1, H, W]", &shape));
        };
        if !ds.has_labels() {
            return Err(TrainError::MissingLabels {
                path: ds.source().to_path_buf(),
            });
        }
        let n = ds.len();
        let mut pixels = Vec::with_capacity(n * c * h * w);
        let mut labels = Vec::with_capacity(n);
        for i in 0..n {
            pixels.extend_from_slice(ds.raw_sample(i).expect("index < len"));
            let l = ds.label(i).expect("labels checked");
            let l = u8::try_from(l).map_err(|_| TrainError::BadLabel {
                path: ds.source().to_path_buf(),
                index: i,
                label: l,
            })?;
            labels.push(l);
        }
        Self::new(pixels, labels, [c, h, w])
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The first `n` samples only.
    pub fn truncate(&mut self, n: usize) {
        let size: usize = self.sample_shape.iter().product();
        self.labels.truncate(n);
        self.pixels.truncate(self.labels.len() * size);
    }

    /// Samples `idx` as a `[B, C, H, W]` tensor of `pixel / 255` and their labels.
    pub fn batch(&self, idx: &[usize]) -> (Tensor, Vec<usize>) {
        let size: usize = self.sample_shape.iter().product();
        let mut data = Vec::with_capacity(idx.len() * size);
        for &i in idx {
            data.extend(
                self.pixels[i * size..(i + 1) * size]
                    .iter()
                    .map(|&p| p as f32 / 255.0),
            );
        }
        let [c, h, w] = self.sample_shape;
        let x = Tensor::new(&[idx.len(), c, h, w], data).expect("sizes agree");
        (x, idx.iter().map(|&i| self.labels[i] as usize).collect())
    }
}

/// Which optimizer to train with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerKind {
    /// SGD with this momentum.
    Sgd {
        /// Momentum μ.
        momentum: f32,
    },
    /// AdamW.
    Adam,
}

/// Training hyper-parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    /// Passes over the training set.
    pub epochs: usize,
    /// Samples per step.
    pub batch_size: usize,
    /// Peak learning rate (cosine schedule with warm-up).
    pub lr: f32,
    /// Seed for shuffling (weights are seeded when the model is built).
    pub seed: u64,
    /// Optimizer.
    pub optimizer: OptimizerKind,
    /// Weight decay on conv/linear weights.
    pub weight_decay: f32,
    /// Stop each epoch after this many steps (for smoke tests and benchmarks).
    pub max_steps_per_epoch: Option<usize>,
}

impl TrainConfig {
    /// Defaults that reach the zoo's accuracy targets for `arch` in a few epochs.
    pub fn for_arch(arch: &str) -> Self {
        let (lr, optimizer) = match arch {
            "resnet8" | "mobilenet" => (0.1, OptimizerKind::Sgd { momentum: 0.9 }),
            _ => (2e-3, OptimizerKind::Adam),
        };
        Self {
            epochs: 8,
            batch_size: 64,
            lr,
            seed: 0,
            optimizer,
            weight_decay: if matches!(optimizer, OptimizerKind::Adam) {
                1e-4
            } else {
                5e-4
            },
            max_steps_per_epoch: None,
        }
    }
}

/// Progress after one training step.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Epoch (0-based).
    pub epoch: usize,
    /// Step within the epoch (0-based).
    pub step: usize,
    /// Steps per epoch.
    pub steps_per_epoch: usize,
    /// Mean loss over the epoch so far.
    pub loss: f32,
    /// Training accuracy over the epoch so far (classification only).
    pub accuracy: Option<f32>,
    /// Training throughput over the epoch so far.
    pub samples_per_sec: f32,
    /// Learning rate of this step.
    pub lr: f32,
}

/// Loss and correct predictions of one step.
#[derive(Clone, Copy, Debug)]
pub struct StepStats {
    /// Mean loss of the batch.
    pub loss: f32,
    /// Correctly classified samples (0 for reconstruction).
    pub correct: usize,
}

/// One optimisation step on a batch: forward, loss, backward, optimizer update, running
/// statistics update.
pub fn train_step(
    model: &mut Model,
    opt: &mut dyn Optimizer,
    x: Tensor,
    labels: &[usize],
    lr: f32,
) -> Result<StepStats> {
    let mut tape = Tape::new();
    let target = matches!(model.task, Task::Reconstruct).then(|| x.clone());
    let xv = tape.constant(x);
    let fwd = model.forward(&mut tape, xv, true)?;
    let (loss, correct) = match model.task {
        Task::Classify { .. } => {
            let correct = count_correct(tape.value(fwd.output), labels);
            (
                tape.apply(SoftmaxCrossEntropy::new(labels.to_vec()), &[fwd.output])?,
                correct,
            )
        }
        Task::Reconstruct => {
            let t = tape.constant(target.expect("set for reconstruction"));
            (tape.apply(MseLoss, &[fwd.output, t])?, 0)
        }
    };
    let loss_value = tape.value(loss).data()[0];
    let grads = tape.backward(loss)?;
    model.params.zero_grad();
    for (id, g) in grads.params() {
        model.params.get_mut(id).grad.add_assign(g);
    }
    drop(grads);
    model.update_running_stats(&tape, &fwd);
    opt.step(&mut model.params, lr);
    Ok(StepStats {
        loss: loss_value,
        correct,
    })
}

fn count_correct(logits: &Tensor, labels: &[usize]) -> usize {
    let k = logits.shape().get(1).copied().unwrap_or(1);
    logits
        .data()
        .chunks(k)
        .zip(labels)
        .filter(|(row, &l)| {
            let best = row
                .iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (i, &v)| if v > b.1 { (i, v) } else { b },
                );
            best.0 == l
        })
        .count()
}

/// Trains `model` on `data` for `cfg.epochs` epochs, calling `progress` after every step.
/// Batches are drawn in an order shuffled by `cfg.seed` and the epoch; an incomplete last
/// batch is dropped. Deterministic for a fixed seed on one thread (and, because every
/// reduction runs in a fixed order, on any fixed thread count).
pub fn train(
    model: &mut Model,
    data: &ImageData,
    cfg: &TrainConfig,
    mut progress: impl FnMut(&Progress),
) -> Result<()> {
    if cfg.batch_size == 0 || data.len() < cfg.batch_size {
        return Err(shape_err(
            "train",
            format!("at least one batch of {} samples", cfg.batch_size),
            &[data.len()],
        ));
    }
    let mut opt: Box<dyn Optimizer> = match cfg.optimizer {
        OptimizerKind::Sgd { momentum } => Box::new(Sgd::new(momentum, cfg.weight_decay)),
        OptimizerKind::Adam => Box::new(Adam::new(cfg.weight_decay)),
    };
    let mut steps = data.len() / cfg.batch_size;
    if let Some(m) = cfg.max_steps_per_epoch {
        steps = steps.min(m);
    }
    let total = steps * cfg.epochs;
    let warmup = (total / 50).clamp(1, 500);
    let mut global = 0;
    for epoch in 0..cfg.epochs {
        let mut order: Vec<usize> = (0..data.len()).collect();
        Rng::new(
            cfg.seed
                .wrapping_mul(0x9E37_79B9)
                .wrapping_add(epoch as u64),
        )
        .shuffle(&mut order);
        let start = Instant::now();
        let (mut loss_sum, mut correct, mut seen) = (0.0f64, 0usize, 0usize);
        for step in 0..steps {
            let idx = &order[step * cfg.batch_size..(step + 1) * cfg.batch_size];
            let (x, labels) = data.batch(idx);
            let lr = cosine_lr(cfg.lr, global, total, warmup);
            let s = train_step(model, opt.as_mut(), x, &labels, lr)?;
            if !s.loss.is_finite() {
                return Err(TrainError::NonFiniteLoss {
                    value: s.loss,
                    epoch,
                    step,
                });
            }
            global += 1;
            loss_sum += s.loss as f64 * idx.len() as f64;
            correct += s.correct;
            seen += idx.len();
            progress(&Progress {
                epoch,
                step,
                steps_per_epoch: steps,
                loss: (loss_sum / seen as f64) as f32,
                accuracy: matches!(model.task, Task::Classify { .. })
                    .then(|| correct as f32 / seen as f32),
                samples_per_sec: seen as f32 / start.elapsed().as_secs_f32().max(1e-9),
                lr,
            });
        }
    }
    Ok(())
}

/// Result of [`evaluate`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    /// `"accuracy"` (top-1) or `"mse"` (reconstruction).
    pub metric: &'static str,
    /// Its value.
    pub value: f64,
    /// Samples evaluated.
    pub samples: usize,
}

/// Top-1 accuracy (classifiers) or mean squared reconstruction error (autoencoder) over all
/// of `data`, in inference mode.
pub fn evaluate(model: &Model, data: &ImageData, batch_size: usize) -> Result<Evaluation> {
    let batch_size = batch_size.max(1);
    let (mut correct, mut sq, mut count) = (0usize, 0f64, 0usize);
    let idx: Vec<usize> = (0..data.len()).collect();
    for chunk in idx.chunks(batch_size) {
        let (x, labels) = data.batch(chunk);
        let target = x.clone();
        let y = model.infer(x)?;
        match model.task {
            Task::Classify { .. } => correct += count_correct(&y, &labels),
            Task::Reconstruct => {
                sq += y
                    .data()
                    .iter()
                    .zip(target.data())
                    .map(|(a, b)| ((a - b) as f64).powi(2))
                    .sum::<f64>();
                count += y.len();
            }
        }
    }
    Ok(match model.task {
        Task::Classify { .. } => Evaluation {
            metric: "accuracy",
            value: correct as f64 / data.len().max(1) as f64,
            samples: data.len(),
        },
        Task::Reconstruct => Evaluation {
            metric: "mse",
            value: sq / count.max(1) as f64,
            samples: data.len(),
        },
    })
}
