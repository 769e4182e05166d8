//! Helpers shared by the QAT tests: the repository root, a small deterministic generator,
//! a perturbed student quantized by PTQ at W4A8 and the committed Fashion-MNIST sample.

#![allow(dead_code)]

use std::path::PathBuf;

use quantkit_graph::{Graph, Tensor as GTensor};
use quantkit_train::qat::{Qat, QatOptions};

/// The repository root (the committed zoo models are found from it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A linear congruential generator: uniform values in [-1, 1), the same on every platform.
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

/// The teacher with its weights perturbed, PTQ-quantized at W4A8 on `x`, as a QAT model.
pub fn student(teacher: &Graph, x: &[f32], shape: &[usize], weights: &[&str]) -> Qat {
    let mut float = teacher.clone();
    let mut rng = Lcg(7);
    for name in weights {
        let t = float.initializers.get_mut(*name).unwrap();
        let v: Vec<f32> = t
            .to_f32_vec()
            .iter()
            .map(|w| w + 0.5 * rng.next() * w.abs().max(0.05))
            .collect();
        *t = GTensor::from_f32(&t.shape.clone(), v);
    }
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("quantkit-student-{}-{k}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.npy");
    let arr = quantkit_data::npy::NpyArray::new(
        shape.to_vec(),
        quantkit_data::npy::NpyData::F32(x.to_vec()),
    )
    .unwrap();
    quantkit_data::npy::write_npy(&path, &arr).unwrap();
    let mut calib =
        quantkit_data::open_data(&path, &quantkit_data::OpenOptions::default()).unwrap();
    let mut cfg = quantkit_ptq::PtqConfig::default();
    cfg.qdq.weight_bits = 4;
    let (qdq, _) =
        quantkit_ptq::quantize_static(float.clone(), &mut calib, &cfg, &mut |_, _| {}).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Qat::from_ptq(
        &float,
        &qdq,
        &QatOptions {
            weight_bits: 4,
            observer_steps: 0,
            ..Default::default()
        },
    )
    .unwrap()
}

/// The committed Fashion-MNIST sample (`data/fashion-mnist-sample`): every image,
/// flattened, and its label.
pub fn sample() -> (Vec<f32>, Vec<usize>) {
    let dir = root().join("data/fashion-mnist-sample");
    let mut src = quantkit_data::open_data(&dir, &quantkit_data::OpenOptions::default())
        .expect("the committed sample data/fashion-mnist-sample");
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for b in src
        .batches(&quantkit_data::BatchOptions {
            batch_size: 250,
            ..Default::default()
        })
        .unwrap()
    {
        let b = b.unwrap();
        x.extend(b.data);
        y.extend(b.labels.unwrap().into_iter().map(|l| l as usize));
    }
    (x, y)
}
