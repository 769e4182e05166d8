//! The static quantization pipeline on a small model: prepare, calibrate on two batches,
//! choose parameters, insert Q/DQ (or QOperator), export, and compile and run the result
//! in the integer engine. Every step must give a model or an error.
//!
//! Input layout (fixed-size header, so mutating the model never shifts the header):
//! - byte 0: options — bits 0–2 the calibration method (0, 5, 6 minmax; 1 entropy; 2
//!   percentile 99.9; 3, 7 mse; 4 ema), bit 3 signed activations, bit 4 per-tensor weights, bit 5 QOperator
//!   output, bits 6–7 weight bits (8, 7, 4, 2);
//! - bytes 1..65: sixteen little-endian f32 calibration values (NaN, infinities, denormals
//!   and constants included), cycled to fill the model input; the second batch is the
//!   first reversed and scaled by −3;
//! - the rest: the ONNX model, which must have one float input of a static shape of at most
//!   [`quantkit_fuzz::MAX_INPUT`] elements.
#![no_main]
use libfuzzer_sys::fuzz_target;
use quantkit_core::CalibrationMethod;
use quantkit_data::source::ArrayDataset;
use quantkit_data::DataSource;
use quantkit_graph::DType;
use quantkit_ptq::{quantize_static, Format, PtqConfig, QdqOptions};

const HEADER: usize = 1 + 16 * 4;

fuzz_target!(|data: &[u8]| {
    quantkit_fuzz::install_limits();
    if data.len() < HEADER {
        return;
    }
    let (head, model) = data.split_at(HEADER);
    let flags = head[0];
    let values: Vec<f32> = head[1..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let Ok(m) = quantkit_graph::onnx::decode_model(model, "fuzz") else {
        return;
    };
    let Ok(g) = quantkit_graph::import_model(&m, "fuzz") else {
        return;
    };
    let Some(inputs) = quantkit_fuzz::static_inputs(&g) else {
        return;
    };
    let [(_, DType::F32, dims)] = inputs.as_slice() else {
        return;
    };
    if dims.is_empty() {
        return;
    }
    // Two batches of the model's own batch size.
    let sample_shape = dims[1..].to_vec();
    let batch = dims[0].max(1);
    let n: usize = dims.iter().product::<usize>().max(1);
    let mut calib: Vec<f32> = (0..n).map(|i| values[i % 16]).collect();
    calib.extend((0..n).map(|i| values[15 - i % 16] * -3.0));
    let Ok(ds) = ArrayDataset::new("fuzz-calib", calib, sample_shape, None) else {
        return;
    };
    let mut source = DataSource::Samples(Box::new(ds));
    let method = match flags & 7 {
        // Entropy (KL) calibration tries every threshold (quadratic in the 2048 bins, about
        // a second per model here), so it gets one pick in eight to keep runs fast.
        0 | 5 | 6 => CalibrationMethod::MinMax,
        1 => CalibrationMethod::Entropy,
        2 => CalibrationMethod::Percentile(99.9),
        3 | 7 => CalibrationMethod::Mse,
        _ => CalibrationMethod::MovingAverage { momentum: 0.5 },
    };
    let config = PtqConfig {
        format: if flags & 32 != 0 {
            Format::QOperator
        } else {
            Format::Qdq
        },
        method,
        qdq: QdqOptions {
            per_channel: flags & 16 == 0,
            weight_bits: [8, 7, 4, 2][usize::from(flags >> 6)],
            signed_activations: flags & 8 != 0,
        },
        batch_size: batch,
        ..PtqConfig::default()
    };
    let Ok((q, _summary)) = quantize_static(g, &mut source, &config, &mut |_, _| {}) else {
        return;
    };
    let proto = quantkit_graph::export_model(&q);
    let Ok(back) = quantkit_graph::import_model(&proto, "fuzz-quantized") else {
        // What quantkit writes, quantkit must read.
        panic!("the quantized model does not import again");
    };
    if let Ok(plan) = quantkit_engine::compile(&back, &Default::default()) {
        let _ = plan.run(quantkit_fuzz::feeds(&inputs));
    }
});
