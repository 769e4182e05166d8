//! Where QAT's narrow quantization ranges start ([`QatInit`], `docs/qat.md`, "The starting
//! point").
//!
//! PTQ calibrates 8-bit codes with min/max. Below 8 bits, QAT can start from those ranges
//! re-quantized to the narrow codes ([`QatInit::MinMax`]), or from ranges chosen for the
//! width actually trained ([`QatInit::Mse`]): each narrow activation's range by
//! quantkit-core's histogram MSE search *at the activation width* on the calibration data
//! ([`activation_ranges`]), each narrow weight's per-channel scale by quantkit-core's clip
//! search at the weight width ([`weight_scales`]). Tensors kept at 8 bits keep PTQ's ranges
//! either way.

use std::collections::{HashMap, HashSet};

use quantkit_core::{CalibrationMethod, Granularity, QParams, QuantScheme};
use quantkit_data::DataSource;
use quantkit_graph::Graph;

use crate::error::{Result, TrainError};

/// The starting point of the narrow (below 8 bits) scales and zero points.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum QatInit {
    /// PTQ's 8-bit min/max activation ranges `[DQ(0), DQ(255)]` re-quantized to the narrow
    /// codes; weight scales PTQ's per-channel `max|w| / q_max`.
    #[default]
    MinMax,
    /// Chosen at the trained width: each narrow activation starts from its range in
    /// `activation_ranges` (float tensor name → `(lo, hi)`, from [`activation_ranges`] at
    /// the activation width), each narrow weight from [`weight_scales`]. The EMA observers
    /// leave these activations alone (an EMA of the batch min/max would pull them back
    /// towards min/max); LSQ learns from them.
    Mse {
        /// Float tensor name → the real range of its narrow codes.
        activation_ranges: HashMap<String, (f32, f32)>,
    },
}

impl QatInit {
    /// `minmax` or `mse`.
    pub fn name(&self) -> &'static str {
        match self {
            QatInit::MinMax => "minmax",
            QatInit::Mse { .. } => "mse",
        }
    }
}

fn err(msg: String) -> TrainError {
    TrainError::Graph(msg)
}

/// The MSE-optimal range at `bits`-bit affine codes (unsigned `[0, 2^b − 1]`, or signed
/// with `signed`) of every activation PTQ quantizes in the prepared float graph `float`
/// (`quantkit_ptq::plan`, no exclusions, as `quantkit qat` runs PTQ), calibrated on the
/// first `samples` samples of `data` (the samples PTQ calibrates on) with quantkit-core's
/// histogram observers ([`quantkit_core::HistogramMethod::Mse`]): the clip range that
/// minimises the quantization error of the calibration histogram *at that width*.
pub fn activation_ranges(
    float: &Graph,
    data: &mut DataSource,
    bits: u8,
    signed: bool,
    samples: usize,
) -> Result<HashMap<String, (f32, f32)>> {
    let scheme =
        QuantScheme::new(bits, signed).map_err(|e| err(format!("activation bits: {e}")))?;
    let plan = quantkit_ptq::plan(float, &HashSet::new())
        .map_err(|e| err(format!("planning the quantized activations: {e}")))?;
    let wanted: HashSet<String> = plan.activations.iter().cloned().collect();
    let cal = quantkit_ptq::calibrate(
        float,
        data,
        &wanted,
        &quantkit_ptq::CalibrateOptions {
            method: CalibrationMethod::Mse,
            limit: Some(samples),
            batch_size: 32,
        },
        &mut |_, _| {},
    )
    .map_err(|e| err(format!("calibrating the {bits}-bit activation ranges: {e}")))?;
    cal.observers
        .iter()
        .map(|(name, obs)| {
            let r = obs
                .ranges(&scheme)
                .map_err(|e| err(format!("activation `{name}` at {bits} bits: {e}")))?;
            Ok((name.clone(), r[0]))
        })
        .collect()
}

/// Per-channel (`axis`) or per-tensor (`None`) symmetric weight scales of `w` (float
/// initializer `name`, shape `shape`) at `scheme`'s width that minimise the weight's
/// quantization error (quantkit-core's [`quantkit_core::mse_clip_ranges`]). `ptq` holds
/// PTQ's scales of the same slots: where PTQ raised a scale above `max|w| / q_max` (a bias
/// that would not fit int32 at `s_in · s_w` otherwise), PTQ's is kept.
pub fn weight_scales(
    name: &str,
    w: &[f32],
    shape: &[usize],
    axis: Option<usize>,
    scheme: &QuantScheme,
    ptq: &[f32],
) -> Result<Vec<f32>> {
    let scheme = scheme.with_granularity(axis.map_or(Granularity::PerTensor, |axis| {
        Granularity::PerChannel { axis }
    }));
    let e = |e: quantkit_core::CoreError| err(format!("weight `{name}`: {e}"));
    let clip = QParams::from_ranges(
        name,
        &quantkit_core::mse_clip_ranges(name, w, shape, &scheme).map_err(e)?,
        &scheme,
    )
    .map_err(e)?;
    let minmax = QParams::from_tensor(name, w, shape, &scheme).map_err(e)?;
    if clip.scales.len() != ptq.len() {
        return Err(err(format!(
            "weight `{name}`: {} scales in PTQ's graph, {} channels along axis {axis:?}",
            ptq.len(),
            clip.scales.len()
        )));
    }
    Ok(clip
        .scales
        .iter()
        .zip(&minmax.scales)
        .zip(ptq)
        .map(|((&c, &m), &p)| if p > m { p } else { c })
        .collect())
}
