//! Any bytes as an ONNX model (seeded with QDQ and QOperator models), compiled into an
//! integer-engine plan and run once on small inputs of its declared static shapes: pattern
//! matching, constant folding, slot allocation and every integer step must give outputs or
//! an error for whatever scales, zero points, weights and shapes the mutation gives them.
//! Both requantization modes are compiled.
#![no_main]
use libfuzzer_sys::fuzz_target;
use quantkit_engine::{compile, EngineOptions, RequantMode};

fuzz_target!(|data: &[u8]| {
    quantkit_fuzz::install_limits();
    let Ok(model) = quantkit_graph::onnx::decode_model(data, "fuzz") else {
        return;
    };
    let Ok(g) = quantkit_graph::import_model(&model, "fuzz") else {
        return;
    };
    let requant = if data.len() % 2 == 0 {
        RequantMode::Float
    } else {
        RequantMode::FixedPoint
    };
    let opts = EngineOptions {
        requant,
        ..EngineOptions::default()
    };
    let Ok(plan) = compile(&g, &opts) else {
        return;
    };
    let Some(inputs) = quantkit_fuzz::static_inputs(&g) else {
        return;
    };
    let _ = plan.run(quantkit_fuzz::feeds(&inputs));
});
