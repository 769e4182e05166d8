//! Any bytes as an ONNX model: decoding and import (folding, shape inference, subgraphs)
//! return a graph or an error, and an imported graph exports again.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quantkit_fuzz::install_limits();
    let Ok(model) = quantkit_graph::onnx::decode_model(data, "fuzz") else {
        return;
    };
    if let Ok(g) = quantkit_graph::import_model(&model, "fuzz") {
        let _ = quantkit_graph::export_model(&g);
    }
});
