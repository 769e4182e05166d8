//! Helpers shared by the fuzz targets: the limits every target installs, feeds for a
//! decoded model's inputs, and a scratch folder for readers that take a path.

use quantkit_core::limits::Limits;
use quantkit_graph::{DType, Dim, Graph, Tensor};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Largest model input fed, in elements.
pub const MAX_INPUT: usize = 1 << 14;

/// Installs the limits the targets run under: the defaults, with tensors capped at 2^22
/// elements (16 MiB of f32), compressed streams at 64 MiB and images at 2^20 pixels, so one
/// input's work is bounded well inside libFuzzer's `-timeout=10` and
/// `-malloc_limit_mb=1536` and a timeout or an oversized allocation is a bug, not a big
/// but legitimate input. Call it first in every target (later calls are no-ops).
pub fn install_limits() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let _ = Limits::install(Limits {
            tensor_elements: 1 << 22,
            inflated_bytes: 64 << 20,
            image_pixels: 1 << 20,
            npz_members: 64,
            ..Limits::DEFAULT
        });
    });
}

/// A folder of this process's own under the system temporary folder (removed at exit by
/// nobody: libFuzzer ends with `_exit`; it holds a few small files that each run
/// overwrites).
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("quantkit-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("creating the fuzz scratch folder");
        d
    })
}

/// The declared static shapes of `g`'s inputs, `None` when one is unknown, symbolic or
/// over [`MAX_INPUT`] elements.
pub fn static_inputs(g: &Graph) -> Option<Vec<(String, DType, Vec<usize>)>> {
    let mut out = Vec::new();
    for vi in &g.inputs {
        if g.initializers.contains_key(&vi.name) {
            continue;
        }
        let (dtype, shape) = (vi.dtype?, vi.shape.as_ref()?);
        let dims: Vec<usize> = shape
            .iter()
            .map(|d| match d {
                Dim::Known(n) => Some(*n),
                _ => None,
            })
            .collect::<Option<_>>()?;
        match dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) {
            Some(n) if n <= MAX_INPUT => {}
            _ => return None,
        }
        out.push((vi.name.clone(), dtype, dims));
    }
    Some(out)
}

/// Feeds for [`static_inputs`]: float inputs get a small deterministic ramp in [-2, 2)
/// (zeros would leave every quantized code at its zero point), other types zeros (valid
/// indices and counts).
pub fn feeds(inputs: &[(String, DType, Vec<usize>)]) -> Vec<(String, Tensor)> {
    inputs
        .iter()
        .map(|(name, dtype, dims)| {
            let t = if *dtype == DType::F32 {
                let n: usize = dims.iter().product();
                Tensor::from_f32(dims, (0..n).map(|i| (i % 17) as f32 / 4.0 - 2.0).collect())
            } else {
                Tensor::zeros(*dtype, dims)
            };
            (name.clone(), t)
        })
        .collect()
}
