//! Any bytes as an ONNX model, imported and then run on zero-filled inputs of its
//! declared static shapes (small ones only): every operator must return outputs or an
//! error for whatever attributes and shapes the mutation gives it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use quantkit_graph::{Dim, Tensor};

/// Largest input fed, in elements.
const MAX_INPUT: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    quantkit_fuzz::install_limits();
    let Ok(model) = quantkit_graph::onnx::decode_model(data, "fuzz") else {
        return;
    };
    let Ok(g) = quantkit_graph::import_model(&model, "fuzz") else {
        return;
    };
    let mut feeds = Vec::new();
    for vi in &g.inputs {
        let (Some(dtype), Some(shape)) = (vi.dtype, vi.shape.as_ref()) else {
            return;
        };
        let dims: Option<Vec<usize>> = shape
            .iter()
            .map(|d| match d {
                Dim::Known(n) => Some(*n),
                _ => None,
            })
            .collect();
        let Some(dims) = dims else { return };
        match dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) {
            Some(n) if n <= MAX_INPUT => {}
            _ => return,
        }
        feeds.push((vi.name.clone(), Tensor::zeros(dtype, &dims)));
    }
    let _ = quantkit_graph::execute(&g, feeds);
});
