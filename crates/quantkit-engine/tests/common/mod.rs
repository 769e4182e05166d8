//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use quantkit_graph::Tensor;
use std::path::PathBuf;

pub fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub fn shared() -> PathBuf {
    std::env::var_os("QUANTKIT_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared")))
}

/// Deterministic pseudo-random generator (LCG), so the tests need no rand crate.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    /// Uniform in `lo..=hi`.
    pub fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next_u32() % (hi - lo + 1) as u32) as i32
    }
    /// Uniform in `[a, b)`.
    pub fn float(&mut self, a: f32, b: f32) -> f32 {
        a + (b - a) * (self.next_u32() as f32 / (1u64 << 31) as f32)
    }
}

pub fn argmax_rows(t: &Tensor) -> Vec<usize> {
    let v = t.to_f32_vec();
    let c = *t.shape.last().unwrap();
    v.chunks(c)
        .map(|r| {
            r.iter()
                .enumerate()
                .fold((0, f32::MIN), |m, (i, &x)| if x > m.1 { (i, x) } else { m })
                .0
        })
        .collect()
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += f64::from(x) * f64::from(y);
        aa += f64::from(x) * f64::from(x);
        bb += f64::from(y) * f64::from(y);
    }
    ab / (aa.sqrt() * bb.sqrt())
}
