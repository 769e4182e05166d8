//! Dynamic quantization, in the layout ONNX Runtime's `quantize_dynamic` writes: weights
//! stored as int8 (symmetric, per output channel unless asked otherwise), activations
//! quantized at run time to u8 by `DynamicQuantizeLinear` (scale and zero point from each
//! batch's own min/max), so no calibration data is needed.
//!
//! ```text
//! x ─DynamicQuantizeLinear─▶ (x_q, x_scale, x_zp)
//! MatMul/Gemm: MatMulInteger(x_q, W_q[K,N], x_zp, 0) ─Cast(float)─▶ acc
//! Conv:        ConvInteger(x_q, W_q, x_zp, 0)         ─Cast(float)─▶ acc
//! y = acc · (x_scale · w_scale) (+ bias)          w_scale: [N] for MatMul/Gemm, [M,1,1] for Conv
//! ```
//!
//! Because weights are symmetric (zero point 0 everywhere), the integer ops get one scalar
//! zero point and the per-channel scales live only in the float `Mul`; that keeps per-channel
//! weights within what ONNX Runtime's `ConvInteger` accepts (a per-tensor `w_zero_point`).
//! `Gemm`'s `transB` is applied to the stored weight and `beta` to the float bias.

use crate::error::{core, PtqError, Result};
use crate::prepare::prepare;
use crate::{initializer_bytes, FloatNode, PtqConfig, Summary};
use quantkit_core::{Granularity, QParams, QuantScheme, RoundingMode};
use quantkit_graph::{AttrValue, DType, Data, Graph, Node, OpKind, Tensor};
use std::collections::{HashMap, HashSet};

/// Rewrites every Conv, MatMul and Gemm with a constant weight into the dynamic-quantization
/// form above. `config.method`, `calib_samples` and `batch_size` are not used;
/// `config.format` must be QDQ (the default): dynamic output has its own layout.
pub fn quantize_dynamic(mut graph: Graph, config: &PtqConfig) -> Result<(Graph, Summary)> {
    let bits = config.qdq.weight_bits;
    if !(2..=8).contains(&bits) {
        return Err(PtqError::InvalidOption(format!(
            "--weight-bits {bits}: supported are 2 to 8 (stored as int8)"
        )));
    }
    if config.format != crate::Format::Qdq {
        return Err(PtqError::InvalidOption(
            "dynamic quantization has its own layout; --format does not apply".into(),
        ));
    }
    if graph.opset() < 11 {
        return Err(PtqError::InvalidOption(format!(
            "model opset {} is older than 11, the first with DynamicQuantizeLinear; upgrade it first",
            graph.opset()
        )));
    }
    let prep = prepare(&mut graph)?;
    let all_nodes = graph.all_node_names();
    for e in &config.exclude {
        if !all_nodes.contains(e) {
            let known: Vec<&str> = graph
                .nodes
                .iter()
                .take(5)
                .map(|n| n.name.as_str())
                .collect();
            return Err(PtqError::UnknownNode {
                name: e.clone(),
                known: known.join(", "),
            });
        }
    }
    let exclude: HashSet<&str> = config.exclude.iter().map(String::as_str).collect();
    let weight_bytes_before = initializer_bytes(&graph);
    let nodes_before = graph.nodes.len();
    let mut quantized = Vec::new();
    let mut left_float = Vec::new();
    let mut activations = 0;
    dynamic_graph(
        &mut graph,
        &HashSet::new(),
        &exclude,
        config,
        &mut quantized,
        &mut left_float,
        &mut activations,
    )?;
    if quantized.is_empty() {
        return Err(PtqError::NothingToQuantize(if exclude.is_empty() {
            String::new()
        } else {
            " after --exclude".into()
        }));
    }
    graph.prune_initializers();
    graph.meta.ir_version = graph.meta.ir_version.max(7);
    // Float shapes recorded for rewritten outputs still hold; nothing else to fix.
    let summary = Summary {
        format: "dynamic".into(),
        qoperator: None,
        nodes: nodes_before,
        quantized,
        left_float,
        fused: Vec::new(),
        prepare: prep,
        activations_quantized: activations,
        calibration_samples: 0,
        calibration_seconds: 0.0,
        weight_bytes_before,
        weight_bytes_after: initializer_bytes(&graph),
        opset_upgraded_from: None,
        method: "dynamic".into(),
        auto: None,
        activations: "u8 at run time (DynamicQuantizeLinear)".into(),
        weights: format!(
            "i{bits} symmetric {}",
            if config.qdq.per_channel {
                "per-channel"
            } else {
                "per-tensor"
            }
        ),
    };
    Ok((graph, summary))
}

/// Rewrites the nodes of one graph (`outer`: the names of the enclosing graphs), then its
/// subgraphs: the Conv/MatMul/Gemm inside an If branch or a Loop body take the dynamic form
/// like top-level ones, with the weights that graph holds as constants (see
/// [`crate::prepare::localize_constants`]).
#[allow(clippy::too_many_arguments)]
fn dynamic_graph(
    graph: &mut Graph,
    outer: &HashSet<String>,
    exclude: &HashSet<&str>,
    config: &PtqConfig,
    quantized: &mut Vec<(String, String)>,
    left_float: &mut Vec<FloatNode>,
    activations: &mut usize,
) -> Result<()> {
    // One DynamicQuantizeLinear per activation, shared by all its readers.
    let mut dql: HashMap<String, [String; 3]> = HashMap::new();
    let mut out: Vec<Node> = Vec::with_capacity(graph.nodes.len());
    let mut names: HashSet<String> = graph.all_value_names();
    names.extend(outer.iter().cloned());
    for n in std::mem::take(&mut graph.nodes) {
        let reason = if exclude.contains(n.name.as_str()) {
            Some("excluded by --exclude".to_string())
        } else {
            check(graph, &n).err()
        };
        if let Some(reason) = reason {
            if n.facts().integer.is_some() {
                left_float.push(FloatNode {
                    name: n.name.clone(),
                    op_type: n.op_type.clone(),
                    reason,
                });
            }
            out.push(n);
            continue;
        }
        let x = n.inputs[0].clone();
        let [xq, xs, xz] = match dql.get(&x) {
            Some(v) => v.clone(),
            None => {
                let names = [
                    unique_in(graph, &names, &out, &format!("{x}_quantized")),
                    unique_in(graph, &names, &out, &format!("{x}_scale")),
                    unique_in(graph, &names, &out, &format!("{x}_zero_point")),
                ];
                out.push(Node::of(
                    OpKind::DynamicQuantizeLinear,
                    &format!("{x}_DynamicQuantizeLinear"),
                    &[&x],
                    &[&names[0], &names[1], &names[2]],
                ));
                dql.insert(x.clone(), names.clone());
                names
            }
        };
        rewrite(graph, &names, &mut out, &n, [&xq, &xs, &xz], config)?;
        quantized.push((n.name.clone(), n.op_type.clone()));
    }
    graph.nodes = out;
    *activations += dql.len();
    // Then the subgraphs, each seeing every name of the model as taken (the rewritten
    // enclosing graphs and the subgraphs done before it), so no new name shadows another.
    for i in 0..graph.nodes.len() {
        let count = graph.nodes[i].subgraphs().count();
        for j in 0..count {
            let mut taken = graph.all_value_names();
            taken.extend(outer.iter().cloned());
            let sub = graph.nodes[i].subgraphs_mut().nth(j).expect("counted");
            dynamic_graph(
                sub,
                &taken,
                exclude,
                config,
                quantized,
                left_float,
                activations,
            )?;
        }
    }
    graph.prune_initializers();
    Ok(())
}

/// A value name free in `g`'s initializers and inputs, in the nodes already written
/// (`pending`) and among the original graph's values (`names`; the graph's node list is
/// taken apart while it is rewritten, so `unique` alone cannot see them).
fn unique_in(g: &Graph, names: &HashSet<String>, pending: &[Node], base: &str) -> String {
    let taken =
        |n: &str| names.contains(n) || pending.iter().any(|x| x.outputs.iter().any(|o| o == n));
    let mut name = g.unique_name(base);
    let mut k = 1;
    while taken(&name) {
        name = g.unique_name(&format!("{base}_{k}"));
        k += 1;
    }
    name
}

fn float_const<'a>(g: &'a Graph, name: Option<&String>) -> Option<&'a Tensor> {
    g.initializers.get(name?).filter(|t| t.dtype == DType::F32)
}

/// Why `n` cannot take the dynamic form (Err), or Ok.
fn check(g: &Graph, n: &Node) -> std::result::Result<(), String> {
    if !n.is_onnx_domain() {
        return Err(format!("operator of domain {}", n.domain));
    }
    if n.facts().integer.is_none() {
        return Err("no dynamic form".into());
    }
    if n.outputs.first().is_none_or(String::is_empty) {
        return Err("no output".into());
    }
    let w = float_const(g, n.inputs.get(1)).ok_or("weight is not a float32 constant")?;
    if n.inputs[0].is_empty() || g.initializers.contains_key(&n.inputs[0]) {
        return Err("input is a constant".into());
    }
    match n.kind() {
        Some(OpKind::MatMul) if w.rank() != 2 => Err("MatMul weight of rank ≠ 2".into()),
        Some(OpKind::Gemm) => {
            let attr = |k: &str, d: f32| n.attr_float(k, d).unwrap_or(f32::NAN);
            if n.attr_int("transA", 0).unwrap_or(1) != 0 || attr("alpha", 1.0) != 1.0 {
                return Err("Gemm with transA or alpha ≠ 1".into());
            }
            if w.rank() != 2 {
                return Err("Gemm weight of rank ≠ 2".into());
            }
            match n.inputs.get(2).filter(|c| !c.is_empty()) {
                Some(c) if float_const(g, Some(c)).is_none() => {
                    Err("Gemm bias is not a float32 constant".into())
                }
                _ => Ok(()),
            }
        }
        Some(OpKind::Conv) => {
            if w.rank() < 3 {
                return Err("Conv weight of rank < 3".into());
            }
            match n.inputs.get(2).filter(|c| !c.is_empty()) {
                Some(c) if float_const(g, Some(c)).is_none_or(|b| b.len() != w.shape[0]) => {
                    Err("Conv bias is not a float32 constant per output channel".into())
                }
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// Quantizes `w` (`[K, N]` for MatMul/Gemm, `[M, ...]` for Conv) symmetrically, per output
/// channel (`axis`) or per tensor; returns the int8 tensor and the scales.
fn quantize_weight(
    name: &str,
    node: &str,
    w: &[f32],
    shape: &[usize],
    axis: usize,
    config: &PtqConfig,
) -> Result<(Tensor, Vec<f32>)> {
    let gran = if config.qdq.per_channel {
        Granularity::PerChannel { axis }
    } else {
        Granularity::PerTensor
    };
    let scheme = QuantScheme::new(config.qdq.weight_bits, true)
        .map_err(core(format!("weight `{name}`")))?
        .with_symmetric(true)
        .with_granularity(gran);
    let p = QParams::from_tensor(name, w, shape, &scheme)
        .map_err(core(format!("weight `{name}` of node `{node}`")))?;
    let q = p
        .quantize(w, shape, RoundingMode::HalfToEven)
        .map_err(core(format!("weight `{name}`")))?;
    let t = Tensor::new(
        shape.to_vec(),
        Data::I8(q.iter().map(|&v| v as i8).collect()),
    )
    .map_err(|e| PtqError::Unsupported {
        node: node.into(),
        op_type: "weight".into(),
        reason: e.to_string(),
    })?;
    Ok((t, p.scales))
}

fn rewrite(
    g: &mut Graph,
    names: &HashSet<String>,
    out: &mut Vec<Node>,
    n: &Node,
    [xq, xs, xz]: [&str; 3],
    config: &PtqConfig,
) -> Result<()> {
    let w_name = n.inputs[1].clone();
    let w = g.initializers[&w_name].clone();
    let wv = w.to_f32_vec();
    let y = n.outputs[0].clone();
    let conv = n.is(OpKind::Conv);
    // MatMulInteger wants B as [K, N]: undo Gemm's transB on the constant.
    let (wv, wshape) = if n.is(OpKind::Gemm) && n.attr_int("transB", 0).unwrap_or(0) != 0 {
        let (rows, cols) = (w.shape[0], w.shape[1]);
        let mut t = vec![0f32; wv.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = wv[r * cols + c];
            }
        }
        (t, vec![cols, rows])
    } else {
        (wv, w.shape.clone())
    };
    let axis = if conv { 0 } else { 1 };
    let (wq, scales) = quantize_weight(&w_name, &n.name, &wv, &wshape, axis, config)?;
    let channels = wshape[axis];
    let add_init = |g: &mut Graph, base: &str, t: Tensor| {
        let name = unique_in(g, names, &[], base);
        g.initializers.insert(name.clone(), t);
        name
    };
    let wqn = add_init(g, &format!("{w_name}_quantized"), wq);
    let wzn = add_init(
        g,
        &format!("{w_name}_zero_point"),
        Tensor::new(vec![], Data::I8(vec![0])).expect("scalar"),
    );
    // Scales broadcast against the output: [N] for [.., N] rows, [M, 1, 1..] for NCHW.
    let sshape: Vec<usize> = if scales.len() == 1 {
        vec![]
    } else if conv {
        let mut s = vec![channels];
        s.extend(std::iter::repeat_n(1, wshape.len() - 2));
        s
    } else {
        vec![channels]
    };
    let wsn = add_init(
        g,
        &format!("{w_name}_scale"),
        Tensor::from_f32(&sshape, scales),
    );
    let name = &n.name;
    let acc = unique_in(g, names, out, &format!("{y}_output_quantized"));
    let int_kind = n.facts().integer.expect("checked: a dynamic form exists");
    let mut int_node = Node::of(
        int_kind,
        &format!("{name}_quant"),
        &[xq, &wqn, xz, &wzn],
        &[&acc],
    );
    if conv {
        int_node.attributes = n.attributes.clone();
    }
    int_node.doc_string = n.doc_string.clone();
    out.push(int_node);
    let accf = unique_in(g, names, out, &format!("{y}_output_quantized_cast_output"));
    out.push(
        Node::of(
            OpKind::Cast,
            &format!("{name}_quant_cast"),
            &[&acc],
            &[&accf],
        )
        .with_attr("to", AttrValue::Int(i64::from(DType::F32.onnx_code()))),
    );
    let scale = unique_in(g, names, out, &format!("{name}_scales_mul_output"));
    out.push(Node::of(
        OpKind::Mul,
        &format!("{name}_scales_mul"),
        &[xs, &wsn],
        &[&scale],
    ));
    let bias = n
        .inputs
        .get(2)
        .filter(|b| !b.is_empty())
        .and_then(|b| g.initializers.get(b).cloned());
    let scaled = if bias.is_some() {
        unique_in(g, names, out, &format!("{y}_scaled"))
    } else {
        y.clone()
    };
    out.push(Node::of(
        OpKind::Mul,
        &format!("{name}_output_scale_mul"),
        &[&accf, &scale],
        &[&scaled],
    ));
    if let Some(b) = bias {
        let bv = b.to_f32_vec();
        let (bshape, bv) = if conv {
            (sshape_for_bias(channels, wshape.len()), bv)
        } else {
            let beta = n.attr_float("beta", 1.0).unwrap_or(1.0);
            let bv: Vec<f32> = bv.iter().map(|v| v * beta).collect();
            (b.shape.clone(), bv)
        };
        let bn = add_init(
            g,
            &format!("{}_dynamic", n.inputs[2]),
            Tensor::from_f32(&bshape, bv),
        );
        out.push(Node::of(
            OpKind::Add,
            &format!("{name}_bias_add"),
            &[&scaled, &bn],
            &[&y],
        ));
    }
    Ok(())
}

fn sshape_for_bias(channels: usize, rank: usize) -> Vec<usize> {
    let mut s = vec![channels];
    s.extend(std::iter::repeat_n(1, rank - 2));
    s
}
