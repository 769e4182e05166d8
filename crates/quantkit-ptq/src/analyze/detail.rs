//! What the HTML report draws beyond [`analyze`](super::analyze)'s ranking: every quantized
//! activation's histogram against its calibrated range (and the fraction clipped), error
//! against bit width (2–8) per tensor, per layer and for the whole model, and one weight
//! tensor's values before and after quantization.
//!
//! These are separate functions over the same [`Setup`] and evaluation feeds, so
//! [`analyze`](super::analyze) and its [`Report`](super::Report) stay as they are for the
//! callers that only want the ranking. Costs: [`details`] runs the float model twice over
//! the evaluation feeds (observed range, then histogram) and the QDQ model once per weight
//! bit width (7 passes); memory is one batch's activations plus `bins` counters and a few
//! sums per activation.

use super::{weight_errors, Feed, OutAcc, OutputError, Setup, WeightError};
use crate::error::{graph as graph_err, PtqError, Result};
use quantkit_graph::{execute, execute_with, OpKind, Uses};
use std::collections::HashMap;

/// The bit widths of the sweeps.
pub const BITS: std::ops::RangeInclusive<u8> = 2..=8;

/// One quantized activation: its values on the evaluation data against its calibrated range.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ActivationRange {
    /// Activation (float graph name).
    pub tensor: String,
    /// The layer whose output it is (`None` for a graph input or a value several layers read).
    pub layer: Option<String>,
    /// Calibrated scale and zero point.
    pub scale: f32,
    /// Calibrated zero point.
    pub zero_point: i32,
    /// Lowest and highest code (`0, 255` for u8).
    pub qmin: i32,
    /// Highest code.
    pub qmax: i32,
    /// The range the codes represent, `s·(qmin − z)`..`s·(qmax − z)`: the clip range.
    pub clip: (f64, f64),
    /// Smallest and largest value seen on the evaluation data.
    pub observed: (f64, f64),
    /// Histogram edges: `bins.len()` equal bins from `hist_range.0` to `hist_range.1`, which
    /// cover both the observed and the clip range.
    pub hist_range: (f64, f64),
    /// Element counts per bin.
    pub bins: Vec<u64>,
    /// Elements below the clip range.
    pub clipped_below: u64,
    /// Elements above the clip range.
    pub clipped_above: u64,
    /// Elements seen.
    pub elements: u64,
    /// `(clipped_below + clipped_above) / elements`.
    pub clipped_fraction: f64,
    /// SQNR of this tensor alone quantized with the same clip range at `bits` bits
    /// (`(bits, SQNR dB)`, bits 2..=8; 8 is the quantizer's own grid).
    pub sqnr_by_bits: Vec<(u8, f64)>,
}

/// Model and layer error when every weight is quantized to `bits` bits (activations stay
/// as calibrated, 8 bits).
#[derive(Debug, Clone, serde::Serialize)]
pub struct BitPoint {
    /// Weight bit width.
    pub bits: u8,
    /// The model output against the float model.
    pub output: OutputError,
    /// Weight error of every weighted layer at this width: `(layer, worst weight SQNR dB)`.
    pub layers: Vec<(String, f64)>,
}

/// What [`details`] measures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Details {
    /// Every quantized activation, in plan order.
    pub activations: Vec<ActivationRange>,
    /// One point per weight bit width, 2..=8.
    pub weight_bits: Vec<BitPoint>,
    /// Evaluation samples the weight sweep's model outputs were measured on (the first
    /// feeds of the evaluation data; the histograms use all of it).
    pub sweep_samples: usize,
}

/// One weight tensor before and after quantization (the report's error picture).
#[derive(Debug, Clone, serde::Serialize)]
pub struct WeightPicture {
    /// The layer (its first node).
    pub layer: String,
    /// Error figures of the tensor (the same as in [`analyze`](super::analyze)'s report).
    pub error: WeightError,
    /// Shape of the float weight.
    pub shape: Vec<usize>,
    /// Float values, in ONNX (row-major) order.
    pub original: Vec<f32>,
    /// `DequantizeLinear(w_q)`, same order.
    pub dequantized: Vec<f32>,
}

/// Running sums of an activation quantized at one bit width.
#[derive(Debug, Clone, Copy)]
struct BitGrid {
    scale: f64,
    inv_scale: f64,
    zero: f64,
    qmax: f64,
    signal: f64,
    noise: f64,
}

impl BitGrid {
    /// The `bits`-bit affine grid over the clip range `lo..hi` (unsigned codes; a signed
    /// grid over the same range is the same set of values).
    fn new(bits: u8, lo: f64, hi: f64) -> BitGrid {
        let qmax = f64::from((1u32 << bits) - 1);
        let scale = ((hi - lo) / qmax).max(f64::MIN_POSITIVE);
        let zero = (-lo / scale).round().clamp(0.0, qmax);
        BitGrid {
            scale,
            inv_scale: 1.0 / scale,
            zero,
            qmax,
            signal: 0.0,
            noise: 0.0,
        }
    }
    fn add(&mut self, x: f64) {
        let q = ((x * self.inv_scale).round_ties_even() + self.zero).clamp(0.0, self.qmax);
        let e = x - (q - self.zero) * self.scale;
        self.signal += x * x;
        self.noise += e * e;
    }
}

struct HistAcc {
    lo: f64,
    hi: f64,
    bins: Vec<u64>,
    below: u64,
    above: u64,
    n: u64,
    grids: Vec<BitGrid>,
}

/// Measures every quantized activation's histogram and clipping, the activation error at
/// 2–8 bits, and the weight and model error with 2–8-bit weights, on `data`. `bins` is the
/// histogram resolution (clamped to 8..=1024). The seven weight-width passes run the QDQ
/// model on the first feeds holding at least `sweep_samples` samples (all of `data` if it
/// has fewer), the expensive part on a large model. `progress(done, total)` counts passes
/// (9).
pub fn details(
    setup: &Setup,
    data: &[Feed],
    bins: usize,
    sweep_samples: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Details> {
    if data.is_empty() {
        return Err(PtqError::InvalidOption(
            "analyze needs at least one evaluation batch".into(),
        ));
    }
    let bins = bins.clamp(8, 1024);
    let total = 2 + BITS.count();
    let float = &setup.float;
    let acts: HashMap<&str, (f32, i32)> = setup.act.iter().map(|(k, &v)| (k.as_str(), v)).collect();
    let scheme = setup.options.activation_scheme();
    let (qmin, qmax) = (scheme.qmin(), scheme.qmax());
    let clip = |(s, z): (f32, i32)| {
        let (s, z) = (f64::from(s), f64::from(z));
        (s * (f64::from(qmin) - z), s * (f64::from(qmax) - z))
    };

    // Pass 1: observed range of every activation, and the float outputs.
    let mut observed: HashMap<String, (f64, f64)> = HashMap::new();
    let mut float_outputs = Vec::with_capacity(data.len());
    for (bi, feed) in data.iter().enumerate() {
        let outs = execute_with(float, feed.clone(), |name, t| {
            if !acts.contains_key(name) {
                return;
            }
            let Some(x) = t.as_f32() else { return };
            let e = observed
                .entry(name.to_string())
                .or_insert((f64::INFINITY, f64::NEG_INFINITY));
            for &v in x {
                let v = f64::from(v);
                e.0 = e.0.min(v);
                e.1 = e.1.max(v);
            }
        })
        .map_err(graph_err(format!("running the float model on batch {bi}")))?;
        float_outputs.push(outs);
    }
    progress(1, total);

    // Pass 2: histograms, clipping and the bit sweep of every activation.
    let mut hists: HashMap<String, HistAcc> = HashMap::new();
    for (name, &(omin, omax)) in &observed {
        let (clo, chi) = clip(acts[name.as_str()]);
        let (lo, hi) = (omin.min(clo), omax.max(chi));
        hists.insert(
            name.clone(),
            HistAcc {
                lo,
                hi: if hi > lo { hi } else { lo + 1.0 },
                bins: vec![0; bins],
                below: 0,
                above: 0,
                n: 0,
                grids: BITS.map(|b| BitGrid::new(b, clo, chi)).collect(),
            },
        );
    }
    for (bi, feed) in data.iter().enumerate() {
        execute_with(float, feed.clone(), |name, t| {
            let (Some(h), Some(x)) = (hists.get_mut(name), t.as_f32()) else {
                return;
            };
            let (s, z) = acts[name];
            let (clo, chi) = clip((s, z));
            // A value is clipped when it lies beyond the outermost code by more than half a
            // step (it rounds to that code from inside otherwise).
            let half = 0.5 * f64::from(s);
            let (below, above) = (clo - half, chi + half);
            let inv_width = bins as f64 / (h.hi - h.lo);
            for &v in x {
                let v = f64::from(v);
                let k = (((v - h.lo) * inv_width) as usize).min(bins - 1);
                h.bins[k] += 1;
                h.below += u64::from(v < below);
                h.above += u64::from(v > above);
                for g in &mut h.grids {
                    g.add(v);
                }
            }
            h.n += x.len() as u64;
        })
        .map_err(graph_err(format!("running the float model on batch {bi}")))?;
    }
    progress(2, total);

    let layers = setup.layers();
    let owner: HashMap<&str, &str> = layers
        .iter()
        .filter_map(|l| Some((l.output.as_deref()?, l.nodes[0].as_str())))
        .collect();
    let activations = setup
        .plan
        .activations
        .iter()
        .filter_map(|t| {
            let h = hists.get(t)?;
            let (s, z) = acts[t.as_str()];
            Some(ActivationRange {
                tensor: t.clone(),
                layer: owner.get(t.as_str()).map(|s| s.to_string()),
                scale: s,
                zero_point: z,
                qmin,
                qmax,
                clip: clip((s, z)),
                observed: observed[t],
                hist_range: (h.lo, h.hi),
                bins: h.bins.clone(),
                clipped_below: h.below,
                clipped_above: h.above,
                elements: h.n,
                clipped_fraction: if h.n == 0 {
                    0.0
                } else {
                    (h.below + h.above) as f64 / h.n as f64
                },
                sqnr_by_bits: BITS
                    .zip(&h.grids)
                    .map(|(b, g)| (b, super::sqnr(g.signal, g.noise)))
                    .collect(),
            })
        })
        .collect();

    // Passes 3..: the QDQ model with every weight at 2..=8 bits, on the first feeds.
    let (mut n_feeds, mut sweep) = (0, 0);
    while n_feeds < data.len() && (n_feeds == 0 || sweep < sweep_samples) {
        sweep += super::batch_of(&data[n_feeds]);
        n_feeds += 1;
    }
    let mut weight_bits = Vec::new();
    for (i, bits) in BITS.enumerate() {
        let mut s = setup.clone();
        s.options.weight_bits = bits;
        let q = s.quantized()?;
        let uses = Uses::new(&q);
        let mut per_layer = Vec::new();
        for l in &layers {
            let w = weight_errors(float, &q, &uses, l)?;
            if let Some(worst) = w.iter().map(|w| w.total.sqnr_db).min_by(f64::total_cmp) {
                per_layer.push((l.nodes[0].clone(), worst));
            }
        }
        let mut acc = OutAcc::default();
        for (bi, (feed, reference)) in data[..n_feeds].iter().zip(&float_outputs).enumerate() {
            let outs = execute(&q, feed.clone()).map_err(graph_err(format!(
                "running the model with {bits}-bit weights on batch {bi}"
            )))?;
            acc.add(reference, &outs);
        }
        weight_bits.push(BitPoint {
            bits,
            output: acc.result(),
            layers: per_layer,
        });
        progress(3 + i, total);
    }
    Ok(Details {
        activations,
        weight_bits,
        sweep_samples: sweep,
    })
}

/// The weight of layer `layer` (its first node's name) as float and dequantized values, for
/// the report's error picture; `None` when the layer has no quantized float weight.
/// `max_elements` bounds the values returned (the first ones, in row-major order); the error
/// figures cover the whole tensor.
pub fn weight_picture(
    setup: &Setup,
    layer: &str,
    max_elements: usize,
) -> Result<Option<WeightPicture>> {
    let q = setup.quantized()?;
    let uses = Uses::new(&q);
    let Some(l) = setup.layers().into_iter().find(|l| l.nodes[0] == layer) else {
        return Ok(None);
    };
    let Some(error) = weight_errors(&setup.float, &q, &uses, &l)?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let w = &setup.float.initializers[&error.tensor];
    // The DequantizeLinear that feeds the quantized node its weight.
    let Some(qnode) = q.nodes.iter().find(|n| n.name == layer) else {
        return Ok(None);
    };
    let Some(dq) = qnode
        .inputs
        .get(1)
        .and_then(|wq| uses.producer(wq))
        .map(|p| &q.nodes[p])
        .filter(|n| n.is(OpKind::DequantizeLinear))
    else {
        return Ok(None);
    };
    let g = quantkit_graph::Graph {
        name: format!("{layer} weight"),
        nodes: vec![dq.clone()],
        outputs: vec![quantkit_graph::ValueInfo {
            name: dq.outputs[0].clone(),
            dtype: None,
            onnx_elem_type: 0,
            shape: None,
        }],
        initializers: dq
            .inputs
            .iter()
            .filter_map(|i| q.initializers.get(i).map(|t| (i.clone(), t.clone())))
            .collect(),
        opset_imports: q.opset_imports.clone(),
        meta: q.meta.clone(),
        ..Default::default()
    };
    let deq = execute(&g, Vec::new()).map_err(graph_err(format!(
        "dequantizing the weight of node `{layer}`"
    )))?;
    let original = w.to_f32_vec();
    let n = original.len().min(max_elements);
    let original = original[..n].to_vec();
    let dequantized = deq[0].1.to_f32_vec()[..n].to_vec();
    Ok(Some(WeightPicture {
        layer: layer.to_string(),
        shape: w.shape.clone(),
        error,
        original,
        dequantized,
    }))
}
