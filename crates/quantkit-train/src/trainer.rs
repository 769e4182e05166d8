//! The training loop and evaluation on in-memory 28×28 image data.

use std::path::Path;
use std::time::Instant;

use quantkit_data::idx::{IdxDataset, Split};
use quantkit_data::Dataset;

use crate::error::{shape_err, Result, TrainError};
use crate::graph::GraphNet;
use crate::model::{Model, Task};
use crate::optim::{cosine_lr, Adam, Optimizer, Sgd};
use crate::rng::Rng;
use crate::tensor::Tensor;
use quantkit_graph::ir::AttrValue;
use quantkit_graph::ops::OpKind;
use quantkit_graph::Tensor as GTensor;
use std::collections::HashMap;

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

    /// The samples `idx`, in that order, as a new data set (a validation split).
    pub fn select(&self, idx: &[usize]) -> Result<Self> {
        let size: usize = self.sample_shape.iter().product();
        let mut pixels = Vec::with_capacity(idx.len() * size);
        let mut labels = Vec::with_capacity(idx.len());
        for &i in idx {
            if i >= self.len() {
                return Err(shape_err(
                    "ImageData::select",
                    format!("indices below {}", self.len()),
                    &[i],
                ));
            }
            pixels.extend_from_slice(&self.pixels[i * size..(i + 1) * size]);
            labels.push(self.labels[i]);
        }
        Self::new(pixels, labels, self.sample_shape)
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

/// A zoo model prepared for training on the graph IR ([`GraphNet`]): the exported graph
/// (the same nodes `quantkit-graph`'s float executor and QAT run), with every
/// BatchNormalization switched to training mode (batch statistics; the running statistics
/// it returns are written back after each step).
pub struct GraphModel {
    /// The network being trained (its parameters are copies of the model's).
    pub net: GraphNet,
    /// Per BatchNormalization: slots of the running mean and variance (constants) and of
    /// the updated values the node returns.
    bn: Vec<[usize; 4]>,
    task: Task,
}

impl GraphModel {
    /// Exports `model` and prepares it for training. Fails, naming the node, when an
    /// operator on a parameter's path has no gradient on the graph yet.
    pub fn new(model: &Model) -> Result<Self> {
        let mut g = crate::export::to_graph(model);
        let mut names = Vec::new();
        for n in &mut g.nodes {
            if n.is(OpKind::BatchNormalization) && n.inputs.len() == 5 {
                let (m, v) = (
                    format!("{}.running_mean.next", n.name),
                    format!("{}.running_var.next", n.name),
                );
                *n = n.clone().with_attr("training_mode", AttrValue::Int(1));
                n.outputs.push(m.clone());
                n.outputs.push(v.clone());
                names.push([n.inputs[3].clone(), n.inputs[4].clone(), m, v]);
            }
        }
        let net = GraphNet::build(&g, &HashMap::new(), &HashMap::new())?;
        if let Some((node, op_type)) = net.missing_backward() {
            return Err(TrainError::NoBackward {
                node: node.to_string(),
                op_type: op_type.to_string(),
            });
        }
        let bn = names
            .iter()
            .map(|ns| {
                let mut slots = [0usize; 4];
                for (s, n) in slots.iter_mut().zip(ns) {
                    *s = net.slot_of(n).ok_or_else(|| {
                        TrainError::Graph(format!("value `{n}` is not in the training graph"))
                    })?;
                }
                Ok(slots)
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            net,
            bn,
            task: model.task,
        })
    }

    /// One optimisation step on a batch: forward, loss (cross-entropy or, for a
    /// reconstruction, MSE against the input), backward, optimizer update, running
    /// statistics. A non-finite loss is returned before any parameter changes.
    pub fn step(
        &mut self,
        opt: &mut dyn Optimizer,
        x: Tensor,
        labels: &[usize],
        lr: f32,
    ) -> Result<StepStats> {
        let target = matches!(self.task, Task::Reconstruct).then(|| x.data().to_vec());
        let shape = x.shape().to_vec();
        let x = GTensor::from_f32(&shape, x.into_data());
        let v = self.net.forward(vec![x])?;
        let out = self
            .net
            .outputs(&v)
            .first()
            .copied()
            .ok_or_else(|| TrainError::Graph("the graph has no output".into()))?;
        let y = out
            .as_f32()
            .ok_or_else(|| TrainError::Graph(format!("output of type {} is not f32", out.dtype)))?;
        let (loss, g, correct) = match self.task {
            Task::Classify { classes } => {
                let (l, g) = crate::losses::cross_entropy(y, classes.max(1), labels);
                let logits = Tensor::new(&out.shape, y.to_vec())?;
                (l, g, count_correct(&logits, labels))
            }
            Task::Reconstruct => {
                let t = target.as_deref().unwrap_or_default();
                let (l, g) = crate::losses::mse(y, t);
                (l, g, 0)
            }
        };
        if !loss.is_finite() {
            return Ok(StepStats { loss, correct });
        }
        let stats: Vec<(usize, Vec<f32>)> = self
            .bn
            .iter()
            .flat_map(|&[m, var, nm, nv]| [(m, nm), (var, nv)])
            .filter_map(|(dst, src)| v.slot(src).map(|t| (dst, t.to_f32_vec())))
            .collect();
        self.net.params.zero_grad();
        let mut seeds = vec![None; self.net.outputs(&v).len()];
        seeds[0] = Some(g);
        self.net.backward(&v, seeds)?;
        drop(v);
        opt.step(&mut self.net.params, lr);
        for (dst, val) in stats {
            self.net.set_stored(dst, &val);
        }
        Ok(StepStats { loss, correct })
    }

    /// Copies the trained parameters and running statistics back into `model`.
    pub fn write_back(&self, model: &mut Model) {
        let mut by_name: HashMap<&str, &[f32]> = self
            .net
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.value.data()))
            .collect();
        let running: Vec<(String, Vec<f32>)> = self
            .bn
            .iter()
            .flat_map(|&[m, var, ..]| [m, var])
            .filter_map(|s| {
                let t = self.net.stored(s)?;
                Some((self.net.name_of(s).to_string(), t.to_f32_vec()))
            })
            .collect();
        for (n, v) in &running {
            by_name.insert(n.as_str(), v.as_slice());
        }
        for p in model.params.iter_mut() {
            if let Some(v) = by_name.get(p.name.as_str()) {
                if v.len() == p.value.len() {
                    p.value.data_mut().copy_from_slice(v);
                }
            }
        }
    }
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
    let mut graph = GraphModel::new(model)?;
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
            let s = graph.step(opt.as_mut(), x, &labels, lr)?;
            if !s.loss.is_finite() {
                graph.write_back(model);
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
        graph.write_back(model);
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
/// of `data`, in inference mode, on `quantkit-graph`'s float executor running the exported
/// graph (the operators' own `eval`, as training on the graph IR and every other command).
pub fn evaluate(model: &Model, data: &ImageData, batch_size: usize) -> Result<Evaluation> {
    let batch_size = batch_size.max(1);
    let graph = crate::export::to_graph(model);
    let (mut correct, mut sq, mut count) = (0usize, 0f64, 0usize);
    let idx: Vec<usize> = (0..data.len()).collect();
    for chunk in idx.chunks(batch_size) {
        let (x, labels) = data.batch(chunk);
        let target = x.clone();
        let shape = x.shape().to_vec();
        let out = quantkit_graph::execute(
            &graph,
            vec![("input".into(), GTensor::from_f32(&shape, x.into_data()))],
        )
        .map_err(|e| TrainError::Graph(format!("evaluating the exported graph: {e}")))?;
        let y = out
            .into_iter()
            .next()
            .ok_or_else(|| TrainError::Graph("the exported graph has no output".into()))?
            .1;
        let y = Tensor::new(&y.shape, y.to_f32_vec())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize, seed: u64) -> (Tensor, Vec<usize>) {
        let mut rng = Rng::new(seed);
        let x: Vec<f32> = (0..n * 784).map(|_| rng.uniform()).collect();
        let labels = (0..n).map(|_| rng.below(10)).collect();
        (Tensor::new(&[n, 1, 28, 28], x).unwrap(), labels)
    }

    /// Every reduction of the graph path runs in a fixed order, so LeNet's parameters after
    /// two steps are the same bits on one thread and on three.
    #[test]
    fn graph_training_does_not_depend_on_thread_count() {
        let (x, labels) = batch(9, 3);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut model = crate::zoo::build("lenet", 1).unwrap();
                let mut gm = GraphModel::new(&model).unwrap();
                let mut opt = Adam::new(1e-4);
                for _ in 0..2 {
                    gm.step(&mut opt, x.clone(), &labels, 1e-3).unwrap();
                }
                gm.write_back(&mut model);
                model
                    .params
                    .iter()
                    .map(|p| p.value.data().to_vec())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(run(1), run(3));
    }

    /// The graph path trains: the loss of a fixed batch falls, BatchNormalization's running
    /// statistics move towards the batch's and come back into the model.
    #[test]
    fn graph_training_fits_a_batch_and_writes_back_running_statistics() {
        let (x, labels) = batch(16, 5);
        let mut model = crate::zoo::build("resnet8", 2).unwrap();
        let before: Vec<Vec<f32>> = model
            .params
            .iter()
            .map(|p| p.value.data().to_vec())
            .collect();
        let mut gm = GraphModel::new(&model).unwrap();
        let mut opt = Sgd::new(0.9, 0.0);
        let first = gm.step(&mut opt, x.clone(), &labels, 0.05).unwrap().loss;
        let mut last = first;
        for _ in 0..8 {
            last = gm.step(&mut opt, x.clone(), &labels, 0.05).unwrap().loss;
        }
        assert!(last < first * 0.7, "loss {first} -> {last}");
        gm.write_back(&mut model);
        let mut changed = (0, 0);
        for (p, b) in model.params.iter().zip(&before) {
            if p.value.data() != b.as_slice() {
                if p.trainable {
                    changed.0 += 1;
                } else {
                    changed.1 += 1;
                }
            }
        }
        let stats = model.params.iter().filter(|p| !p.trainable).count();
        assert!(stats > 0);
        assert_eq!(changed.1, stats, "every running statistic moved");
        assert_eq!(
            changed.0,
            model.params.iter().filter(|p| p.trainable).count()
        );
    }

    /// The autoencoder trains on the graph IR (ConvTranspose's gradient is the operator's
    /// own): the reconstruction loss of a fixed batch falls and both transposed
    /// convolutions' weights and biases move.
    #[test]
    fn autoencoder_trains_on_the_graph() {
        let (x, labels) = batch(16, 7);
        let mut model = crate::zoo::build("autoencoder", 4).unwrap();
        let before: Vec<(String, Vec<f32>)> = model
            .params
            .iter()
            .map(|p| (p.name.clone(), p.value.data().to_vec()))
            .collect();
        let mut gm = GraphModel::new(&model).unwrap();
        let mut opt = Adam::new(1e-4);
        let first = gm.step(&mut opt, x.clone(), &labels, 5e-3).unwrap().loss;
        let mut last = first;
        for _ in 0..15 {
            last = gm.step(&mut opt, x.clone(), &labels, 5e-3).unwrap().loss;
        }
        assert!(last < first * 0.8, "loss {first} -> {last}");
        gm.write_back(&mut model);
        let mut moved = 0;
        for (p, (name, b)) in model.params.iter().zip(&before) {
            if name.starts_with("dec") {
                assert_ne!(p.value.data(), b.as_slice(), "{name} did not move");
                moved += 1;
            }
        }
        assert_eq!(moved, 4, "two ConvTranspose weights and biases");
    }
}
