//! Post-training static quantization: prepare a float ONNX graph (constant folding,
//! BatchNormalization folding, Conv/Gemm/MatMul + Relu/Clip fusion bookkeeping), calibrate
//! activation ranges with the float executor, and rewrite the graph into the QDQ form
//! ONNX Runtime's quantizer emits (int8 per-channel weights + DequantizeLinear, int32
//! biases, QuantizeLinear/DequantizeLinear on activations). [`Format::QOperator`] then
//! rewrites that graph into QLinear operators ([`to_qoperator`]); [`quantize_dynamic`]
//! writes dynamic quantization (run-time activation ranges) without calibration data.
//! `docs/formats.md` compares the three layouts. [`analyze`] measures the error per layer and
//! ranks the layers to blame (`docs/analysis.md`).
//!
//! ```no_run
//! use quantkit_ptq::{quantize_static, PtqConfig};
//! let graph = quantkit_graph::load_model("model.onnx")?;
//! let mut data = quantkit_data::open_data("calib.npy", &Default::default())?;
//! let (qgraph, summary) = quantize_static(graph, &mut data, &PtqConfig::default(), &mut |_, _| {})?;
//! quantkit_graph::save_model(&qgraph, "model.int8.onnx").unwrap();
//! println!("{} nodes quantized", summary.quantized.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]
// The folding loops index weights, scales and biases with one channel counter, as the
// formulas do.
#![allow(clippy::needless_range_loop)]

pub mod analyze;
pub mod auto;
pub mod calibrate;
pub mod check;
pub mod dynamic;
pub mod error;
pub mod feed;
pub mod int4;
pub mod mixed;
pub mod prepare;
pub mod qdq;
pub mod qoperator;
pub mod reuse;

pub use auto::AutoReport;
pub use calibrate::{calibrate, CalibrateOptions, Calibration};
pub use dynamic::quantize_dynamic;
pub use error::{PtqError, Result};
pub use feed::{input_specs, open_data_for_graph, run_tensors, to_tensor};
pub use int4::store_weights_int4;
pub use prepare::{
    fold_batch_norms, fold_bias_adds, localize_constants, prepare, upgrade_opset_13,
    upgrade_opset_21, PrepareReport,
};
pub use qdq::{
    initializer_bytes, insert_qdq, insert_qdq_mixed, insert_qdq_wide, plan, plan_with, FloatNode,
    Plan, QdqOptions,
};
pub use qoperator::{to_qoperator, QopReport};

use quantkit_core::CalibrationMethod;
use quantkit_data::DataSource;
use quantkit_graph::Graph;
use std::collections::{BTreeMap, HashSet};

/// How the quantized model is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `QuantizeLinear`/`DequantizeLinear` around float operators (ONNX Runtime fuses them).
    #[default]
    Qdq,
    /// QLinearConv, QLinearMatMul, QGemm and ONNX Runtime's QLinear contrib operators
    /// ([`to_qoperator`]).
    QOperator,
}

impl std::str::FromStr for Format {
    type Err = PtqError;
    fn from_str(s: &str) -> Result<Format> {
        match s.to_ascii_lowercase().as_str() {
            "qdq" => Ok(Format::Qdq),
            "qoperator" | "qop" => Ok(Format::QOperator),
            other => Err(PtqError::InvalidOption(format!(
                "--format {other}: expected qdq or qoperator"
            ))),
        }
    }
}

impl Format {
    /// `qdq` or `qoperator`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Qdq => "qdq",
            Format::QOperator => "qoperator",
        }
    }
}

/// Everything `quantkit quantize` can set.
#[derive(Debug, Clone)]
pub struct PtqConfig {
    /// Output format (default QDQ).
    pub format: Format,
    /// Calibration observer (default min/max).
    pub method: CalibrationMethod,
    /// Weight and activation types.
    pub qdq: QdqOptions,
    /// Nodes kept in float.
    pub exclude: Vec<String>,
    /// Calibration samples (default: all).
    pub calib_samples: Option<usize>,
    /// Samples per executor call during calibration.
    pub batch_size: usize,
    /// Quantize the statistics of a normalisation written as primitive operators (the mean
    /// and variance of a LayerNorm, RMSNorm or L2 normalisation: values computed from a
    /// reduction that reach a divisor) like any other activation. Default `false`: they
    /// stay float ([`qdq::plan_with`]); `true` is quantkit's behaviour before, for
    /// comparisons (`quantkit quantize --quantize-statistics`).
    pub quantize_statistics: bool,
}

impl Default for PtqConfig {
    fn default() -> Self {
        PtqConfig {
            format: Format::Qdq,
            method: CalibrationMethod::MinMax,
            qdq: QdqOptions::default(),
            exclude: Vec::new(),
            calib_samples: None,
            batch_size: 32,
            quantize_statistics: false,
        }
    }
}

/// What [`quantize_static`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    /// Output format: `qdq` or `qoperator`.
    pub format: String,
    /// For QOperator output, which nodes became which QLinear op.
    pub qoperator: Option<QopReport>,
    /// Nodes of the prepared float graph.
    pub nodes: usize,
    /// Quantized nodes: `(name, op_type)`.
    pub quantized: Vec<(String, String)>,
    /// Nodes left in float, with the reason.
    pub left_float: Vec<FloatNode>,
    /// `(producer, activation)` fused pairs (one QDQ after the activation only).
    pub fused: Vec<(String, String)>,
    /// Preparation changes.
    pub prepare: PrepareReport,
    /// Activations quantized.
    pub activations_quantized: usize,
    /// Calibration samples (arrays for an `.npz` of batches) used.
    pub calibration_samples: usize,
    /// Wall time of calibration in seconds (for `--method auto` with the range search).
    pub calibration_seconds: f64,
    /// Bytes of initializers before (float, after preparation) and after quantization.
    pub weight_bytes_before: usize,
    /// See `weight_bytes_before`.
    pub weight_bytes_after: usize,
    /// Opset the model was upgraded from (per-axis QDQ needs opset 13), if it was.
    pub opset_upgraded_from: Option<i64>,
    /// Calibration method, e.g. `minmax`.
    pub method: String,
    /// What `--method auto` chose and measured (absent for the other methods).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<auto::AutoReport>,
    /// Activation type (`u8` or `i8`).
    pub activations: String,
    /// Weight scheme, e.g. `i8 symmetric per-channel`.
    pub weights: String,
}

/// What [`quantize_static_staged`] is doing when it reports progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtqStage {
    /// Running the calibration data (`done`/`total` samples, or arrays for an `.npz` of
    /// batches).
    Calibrating,
    /// `--method auto` searching the ranges (`done`/`total` activations).
    ChoosingRanges,
}

/// Prepares, calibrates on `data` and quantizes `graph` to QDQ form.
/// `progress(done, total)` reports calibration progress.
pub fn quantize_static(
    graph: Graph,
    data: &mut DataSource,
    config: &PtqConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(Graph, Summary)> {
    quantize_static_staged(graph, data, config, &mut |stage, done, total| {
        if stage == PtqStage::Calibrating {
            progress(done, total)
        }
    })
}

/// [`quantize_static`] reporting the progress of every stage: calibration, then for
/// `--method auto` the range search.
pub fn quantize_static_staged(
    mut graph: Graph,
    data: &mut DataSource,
    config: &PtqConfig,
    progress: &mut dyn FnMut(PtqStage, usize, usize),
) -> Result<(Graph, Summary)> {
    if !(2..=8).contains(&config.qdq.weight_bits) {
        return Err(PtqError::InvalidOption(format!(
            "--weight-bits {}: supported are 2 to 8 (stored as int8)",
            config.qdq.weight_bits
        )));
    }
    let prep = prepare(&mut graph)?;
    let exclude: HashSet<String> = config.exclude.iter().cloned().collect();
    let mut plan = qdq::plan_with(&graph, &exclude, config.quantize_statistics)?;
    let t0 = std::time::Instant::now();
    let wanted: HashSet<String> = plan.activations.iter().cloned().collect();
    let cal = calibrate(
        &graph,
        data,
        &wanted,
        &CalibrateOptions {
            method: config.method,
            limit: config.calib_samples,
            batch_size: config.batch_size,
        },
        &mut |done, total| progress(PtqStage::Calibrating, done, total),
    )?;
    let scheme = config.qdq.activation_scheme();
    let mut act = BTreeMap::new();
    // For auto these are placeholders until the search below (it needs the QDQ-ready graph).
    for t in &plan.activations {
        if let Some(obs) = cal.observers.get(t) {
            let p = obs.qparams(&scheme).map_err(error::core(format!(
                "choosing parameters of activation `{t}`"
            )))?;
            act.insert(t.clone(), (p.scales[0], p.zero_points[0]));
        }
    }
    plan.activations.retain(|t| act.contains_key(t));
    // A planned node without a weight whose tensors are all integer (token ids or bytes
    // going through Unsqueeze/Reshape/...) got no observer and so no Q/DQ: it stays as it
    // is, and the summary says so rather than counting it as quantized.
    let untouched: HashSet<String> = graph
        .nodes
        .iter()
        .filter(|n| {
            n.facts().weight.is_none()
                && plan.quantized.contains(&n.name)
                && !n
                    .inputs
                    .iter()
                    .chain(&n.outputs)
                    .any(|v| act.contains_key(v))
        })
        .map(|n| n.name.clone())
        .collect();
    if !untouched.is_empty() {
        plan.quantized.retain(|n| !untouched.contains(n));
        for n in graph.nodes.iter().filter(|n| untouched.contains(&n.name)) {
            plan.left_float.push(qdq::FloatNode {
                name: n.name.clone(),
                op_type: n.op_type.clone(),
                reason: "no float tensor to quantize (integer path)".into(),
            });
        }
    }
    let weight_bytes_before = initializer_bytes(&graph);
    let nodes = graph.nodes.len();
    let upgraded = upgrade_opset_13(&mut graph, &cal.ranks)?;
    graph.meta.ir_version = graph.meta.ir_version.max(7);
    let mut auto_report = None;
    if config.method == CalibrationMethod::Auto {
        let (a, r) = auto::choose(
            &graph,
            &plan,
            &config.qdq,
            &cal.observers,
            &cal.kept,
            &mut |done, total| progress(PtqStage::ChoosingRanges, done, total),
        )?;
        act = a;
        auto_report = Some(r);
    }
    let calibration_seconds = t0.elapsed().as_secs_f64();
    let types: std::collections::HashMap<String, String> = graph
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.op_type.clone()))
        .collect();
    let q = insert_qdq(graph, &plan, &act, &config.qdq)?;
    let (q, qoperator) = match config.format {
        Format::Qdq => (q, None),
        Format::QOperator => {
            let (q, r) = to_qoperator(q)?;
            (q, Some(r))
        }
    };
    let summary = Summary {
        format: config.format.name().into(),
        qoperator,
        nodes,
        quantized: plan
            .quantized
            .iter()
            .map(|n| (n.clone(), types.get(n).cloned().unwrap_or_default()))
            .collect(),
        left_float: plan.left_float.clone(),
        fused: plan.fused.clone(),
        prepare: prep,
        activations_quantized: act.len(),
        calibration_samples: cal.samples,
        calibration_seconds,
        weight_bytes_before,
        weight_bytes_after: initializer_bytes(&q),
        opset_upgraded_from: upgraded,
        method: method_name(config.method),
        auto: auto_report,
        activations: if config.qdq.signed_activations {
            "i8"
        } else {
            "u8"
        }
        .into(),
        weights: format!(
            "i{} symmetric {}",
            config.qdq.weight_bits,
            if config.qdq.per_channel {
                "per-channel"
            } else {
                "per-tensor"
            }
        ),
    };
    Ok((q, summary))
}

fn method_name(m: CalibrationMethod) -> String {
    format!("{m:?}").to_lowercase()
}
