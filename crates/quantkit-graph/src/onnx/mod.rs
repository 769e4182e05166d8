//! ONNX import and export.
//!
//! [`proto`] holds the protobuf messages; [`load_model`] / [`import_model`] turn them into a
//! [`Graph`], and [`export_model`] / [`save_model`] write a graph back.

pub mod proto;

use crate::error::{GraphError, Result};
use crate::ir::{AttrValue, Dim, Graph, ModelMeta, Node, ValueInfo};
use crate::tensor::{DType, Data, Tensor};
use prost::Message;
use proto::type_proto;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Decodes `ModelProto` bytes. `what` names the source in errors.
pub fn decode_model(bytes: &[u8], what: &str) -> Result<proto::ModelProto> {
    proto::ModelProto::decode(bytes).map_err(|source| GraphError::Decode {
        what: what.to_string(),
        source,
    })
}

/// Reads and imports an ONNX model file (constants become initializers, nodes are sorted
/// topologically, constant subgraphs are folded and shapes inferred).
pub fn load_model(path: impl AsRef<Path>) -> Result<Graph> {
    let path = path.as_ref();
    let what = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| GraphError::Io {
        path: what.clone(),
        source,
    })?;
    let model = decode_model(&bytes, &what)?;
    import_model(&model, &what)
}

/// Reads an ONNX `TensorProto` file (the `.pb` files of the ONNX test layout).
pub fn load_tensor_pb(path: impl AsRef<Path>) -> Result<(String, Tensor)> {
    let path = path.as_ref();
    let what = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| GraphError::Io {
        path: what.clone(),
        source,
    })?;
    let t = proto::TensorProto::decode(bytes.as_slice()).map_err(|source| GraphError::Decode {
        what: what.clone(),
        source,
    })?;
    let name = t.name.clone().unwrap_or_default();
    let tensor = tensor_from_proto(&t).map_err(|e| match e {
        GraphError::InvalidTensor { tensor, reason } => GraphError::InvalidTensor {
            tensor: format!("{what}: {tensor}"),
            reason,
        },
        e => e,
    })?;
    Ok((name, tensor))
}

/// Converts a decoded model into a graph; `what` names the source in errors.
pub fn import_model(model: &proto::ModelProto, what: &str) -> Result<Graph> {
    let g = model
        .graph
        .as_ref()
        .ok_or_else(|| GraphError::InvalidModel {
            what: what.to_string(),
            reason: "the model has no graph".into(),
        })?;
    let mut graph = Graph {
        name: g.name.clone().unwrap_or_default(),
        opset_imports: model
            .opset_import
            .iter()
            .map(|o| (o.domain.clone().unwrap_or_default(), o.version.unwrap_or(0)))
            .collect(),
        meta: ModelMeta {
            ir_version: model.ir_version.unwrap_or(0),
            producer_name: model.producer_name.clone().unwrap_or_default(),
            producer_version: model.producer_version.clone().unwrap_or_default(),
            domain: model.domain.clone().unwrap_or_default(),
            model_version: model.model_version.unwrap_or(0),
            doc_string: model.doc_string.clone().unwrap_or_default(),
            graph_doc_string: g.doc_string.clone().unwrap_or_default(),
            metadata_props: model
                .metadata_props
                .iter()
                .map(|e| {
                    (
                        e.key.clone().unwrap_or_default(),
                        e.value.clone().unwrap_or_default(),
                    )
                })
                .collect(),
        },
        ..Graph::default()
    };
    if !model.functions.is_empty() {
        return Err(GraphError::InvalidModel {
            what: what.to_string(),
            reason: "model-local functions are not supported".into(),
        });
    }
    // Bytes of every tensor the file declares, against `Limits::file_bytes`.
    let limits = quantkit_core::limits::Limits::current();
    let mut declared = 0u64;
    let mut count = |t: &Tensor| -> Result<()> {
        declared = declared.saturating_add((t.len() * t.dtype.size_bytes()) as u64);
        quantkit_core::limits::Limits::check(
            &format!("the initializers of {what}"),
            declared,
            limits.file_bytes,
            "file_bytes",
            "bytes",
        )?;
        Ok(())
    };
    for t in &g.initializer {
        let name = t.name.clone().unwrap_or_default();
        let t = tensor_from_proto(t)?;
        count(&t)?;
        graph.initializers.insert(name, t);
    }
    for s in &g.sparse_initializer {
        let (name, t) = sparse_to_dense(s)?;
        count(&t)?;
        graph.initializers.insert(name, t);
    }
    for vi in &g.input {
        let v = value_info_from_proto(vi);
        if !graph.initializers.contains_key(&v.name) {
            graph.inputs.push(v);
        }
    }
    graph.outputs = g.output.iter().map(value_info_from_proto).collect();
    for vi in &g.value_info {
        let v = value_info_from_proto(vi);
        graph.value_info.insert(v.name.clone(), v);
    }
    let scope = Scope {
        depth: 0,
        visible: proto_defined(g),
        prefix: String::new(),
        opsets: graph.opset_imports.clone(),
    };
    for (i, n) in g.node.iter().enumerate() {
        let node = node_from_proto(n, i, &scope)?;
        if node.is(crate::ops::OpKind::Constant) && node.outputs.len() == 1 {
            if let Some(t) = constant_value(&node)? {
                graph.initializers.insert(node.outputs[0].clone(), t);
                continue;
            }
        }
        graph.nodes.push(node);
    }
    crate::passes::topo_sort(&mut graph)?;
    crate::passes::fold_constants(&mut graph)?;
    crate::passes::infer_shapes(&mut graph);
    Ok(graph)
}

/// What a graph being imported can see: the names every enclosing graph defines and how
/// deeply it is nested.
struct Scope {
    depth: usize,
    visible: HashSet<String>,
    /// Prefix of the names given to unnamed nodes (`<node>/<attribute>/` in a subgraph, so
    /// the nodes of two branches never share a name).
    prefix: String,
    /// The model's operator sets (a subgraph carries them too; export does not write them,
    /// `GraphProto` has no such field).
    opsets: Vec<(String, i64)>,
}

/// Names a `GraphProto` defines: inputs, initializers, node outputs.
fn proto_defined(g: &proto::GraphProto) -> HashSet<String> {
    g.input
        .iter()
        .filter_map(|v| v.name.clone())
        .chain(g.initializer.iter().filter_map(|t| t.name.clone()))
        .chain(
            g.sparse_initializer
                .iter()
                .filter_map(|s| s.values.as_ref().and_then(|v| v.name.clone())),
        )
        .chain(g.node.iter().flat_map(|n| n.output.iter().cloned()))
        .filter(|v| !v.is_empty())
        .collect()
}

/// Imports the subgraph attribute `attr` of node `node`. Its nodes may read names of the
/// enclosing graphs (`outer.visible`); defining one of them again is rejected, as the ONNX
/// IR spec forbids ("a node output name MUST be distinct from the names from the outer
/// scopes that are visible in the nested subgraph"), so a name always means one value and
/// every pass can count outer-scope reads by name. `Constant` nodes become the subgraph's
/// initializers (so a weight held in a branch is a constant to the quantizer) unless their
/// value is a subgraph output; nodes are sorted topologically with the outer names
/// available. Nothing is folded and no shapes are inferred inside subgraphs.
fn subgraph_from_proto(
    g: &proto::GraphProto,
    node: &str,
    attr: &str,
    outer: &Scope,
) -> Result<Graph> {
    let invalid = |reason: String| GraphError::InvalidModel {
        what: format!("node `{node}`, subgraph `{attr}`"),
        reason,
    };
    let depth = outer.depth + 1;
    // The `nesting` limit may lower the cap, never raise it past what can be decoded.
    let cap = (quantkit_core::limits::Limits::current().nesting as usize)
        .min(crate::ir::MAX_SUBGRAPH_DEPTH);
    if depth > cap {
        return Err(invalid(format!(
            "subgraphs nest deeper than {cap} levels (QUANTKIT_LIMITS nesting)"
        )));
    }
    let own = proto_defined(g);
    if let Some(shadow) = own.iter().filter(|v| outer.visible.contains(*v)).min() {
        return Err(invalid(format!(
            "defines `{shadow}`, a name of an enclosing graph (ONNX forbids shadowing)"
        )));
    }
    let mut sub = Graph {
        name: g.name.clone().unwrap_or_default(),
        opset_imports: outer.opsets.clone(),
        meta: ModelMeta {
            graph_doc_string: g.doc_string.clone().unwrap_or_default(),
            ..ModelMeta::default()
        },
        ..Graph::default()
    };
    for t in &g.initializer {
        let name = t.name.clone().unwrap_or_default();
        sub.initializers.insert(name, tensor_from_proto(t)?);
    }
    for s in &g.sparse_initializer {
        let (name, t) = sparse_to_dense(s)?;
        sub.initializers.insert(name, t);
    }
    for vi in &g.input {
        let v = value_info_from_proto(vi);
        if !sub.initializers.contains_key(&v.name) {
            sub.inputs.push(v);
        }
    }
    sub.outputs = g.output.iter().map(value_info_from_proto).collect();
    for vi in &g.value_info {
        let v = value_info_from_proto(vi);
        sub.value_info.insert(v.name.clone(), v);
    }
    let mut visible = outer.visible.clone();
    visible.extend(own);
    let scope = Scope {
        depth,
        visible,
        prefix: format!("{node}/{attr}/"),
        opsets: outer.opsets.clone(),
    };
    for (i, n) in g.node.iter().enumerate() {
        let n = node_from_proto(n, i, &scope)?;
        if n.is(crate::ops::OpKind::Constant)
            && n.outputs.len() == 1
            && !sub.is_output(&n.outputs[0])
        {
            if let Some(t) = constant_value(&n)? {
                sub.initializers.insert(n.outputs[0].clone(), t);
                continue;
            }
        }
        sub.nodes.push(n);
    }
    let outer_names: HashSet<String> = outer.visible.iter().cloned().collect();
    crate::passes::topo_sort_in(&mut sub, &outer_names)?;
    Ok(sub)
}

/// The tensor a `Constant` node produces, or `None` for a value kind the IR does not hold
/// (strings, sparse tensors), in which case the node stays in the graph.
pub fn constant_value(node: &Node) -> Result<Option<Tensor>> {
    let Some((name, v)) = node.attributes.first() else {
        return Err(GraphError::Op {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            source: crate::OpError::attr("value", "Constant has no value attribute"),
        });
    };
    Ok(match (name.as_str(), v) {
        ("value", AttrValue::Tensor(t)) => Some(t.clone()),
        ("value_float", AttrValue::Float(f)) => Some(Tensor::scalar_f32(*f)),
        ("value_floats", AttrValue::Floats(f)) => Some(Tensor::from_f32(&[f.len()], f.clone())),
        ("value_int", AttrValue::Int(i)) => Some(Tensor::from_i64(&[], vec![*i])),
        ("value_ints", AttrValue::Ints(i)) => Some(Tensor::from_i64(&[i.len()], i.clone())),
        _ => None,
    })
}

fn node_from_proto(n: &proto::NodeProto, index: usize, scope: &Scope) -> Result<Node> {
    let op_type = n.op_type.clone().unwrap_or_default();
    let name = match n.name.as_deref() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => format!("{}{op_type}_{index}", scope.prefix),
    };
    let mut attributes = Vec::with_capacity(n.attribute.len());
    for a in &n.attribute {
        attributes.push((
            a.name.clone().unwrap_or_default(),
            attr_from_proto(a, &name, scope)?,
        ));
    }
    let domain = match n.domain.as_deref() {
        Some("ai.onnx") | None => String::new(),
        Some(d) => d.to_string(),
    };
    Ok(Node {
        name,
        op_type,
        domain,
        inputs: n.input.clone(),
        outputs: n.output.clone(),
        attributes,
        doc_string: n.doc_string.clone().unwrap_or_default(),
    })
}

fn attr_from_proto(a: &proto::AttributeProto, node: &str, scope: &Scope) -> Result<AttrValue> {
    use proto::attribute_type as at;
    let ty = a.r#type.unwrap_or(at::UNDEFINED);
    let attr = a.name.as_deref().unwrap_or_default();
    Ok(match ty {
        at::GRAPH => match &a.g {
            Some(g) => AttrValue::Graph(Box::new(subgraph_from_proto(g, node, attr, scope)?)),
            None => {
                return Err(GraphError::InvalidModel {
                    what: format!("node `{node}`"),
                    reason: format!("graph attribute `{attr}` holds no graph"),
                })
            }
        },
        at::GRAPHS => AttrValue::Graphs(
            a.graphs
                .iter()
                .map(|g| subgraph_from_proto(g, node, attr, scope))
                .collect::<Result<_>>()?,
        ),
        at::FLOAT => AttrValue::Float(a.f.unwrap_or(0.0)),
        at::INT => AttrValue::Int(a.i.unwrap_or(0)),
        at::STRING => AttrValue::String(a.s.clone().unwrap_or_default()),
        at::FLOATS => AttrValue::Floats(a.floats.clone()),
        at::INTS => AttrValue::Ints(a.ints.clone()),
        at::STRINGS => AttrValue::Strings(a.strings.clone()),
        at::TENSOR => match &a.t {
            Some(t) if DType::from_onnx(t.data_type.unwrap_or(0)).is_some() => {
                AttrValue::Tensor(tensor_from_proto(t).map_err(|e| match e {
                    GraphError::InvalidTensor { tensor, reason } => GraphError::InvalidTensor {
                        tensor: format!("{tensor} (attribute of node `{node}`)"),
                        reason,
                    },
                    e => e,
                })?)
            }
            _ => AttrValue::Raw(Box::new(a.clone())),
        },
        _ => AttrValue::Raw(Box::new(a.clone())),
    })
}

fn attr_to_proto(name: &str, v: &AttrValue) -> proto::AttributeProto {
    use proto::attribute_type as at;
    let mut a = proto::AttributeProto {
        name: Some(name.to_string()),
        ..Default::default()
    };
    match v {
        AttrValue::Float(f) => {
            a.f = Some(*f);
            a.r#type = Some(at::FLOAT);
        }
        AttrValue::Int(i) => {
            a.i = Some(*i);
            a.r#type = Some(at::INT);
        }
        AttrValue::String(s) => {
            a.s = Some(s.clone());
            a.r#type = Some(at::STRING);
        }
        AttrValue::Tensor(t) => {
            a.t = Some(tensor_to_proto("", t));
            a.r#type = Some(at::TENSOR);
        }
        AttrValue::Floats(f) => {
            a.floats = f.clone();
            a.r#type = Some(at::FLOATS);
        }
        AttrValue::Ints(i) => {
            a.ints = i.clone();
            a.r#type = Some(at::INTS);
        }
        AttrValue::Strings(s) => {
            a.strings = s.clone();
            a.r#type = Some(at::STRINGS);
        }
        AttrValue::Graph(g) => {
            a.g = Some(Box::new(graph_to_proto(g)));
            a.r#type = Some(at::GRAPH);
        }
        AttrValue::Graphs(gs) => {
            a.graphs = gs.iter().map(graph_to_proto).collect();
            a.r#type = Some(at::GRAPHS);
        }
        AttrValue::Raw(p) => {
            a = (**p).clone();
            a.name = Some(name.to_string());
        }
    }
    a
}

fn value_info_from_proto(vi: &proto::ValueInfoProto) -> ValueInfo {
    let name = vi.name.clone().unwrap_or_default();
    let (elem, shape) = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => (
            t.elem_type.unwrap_or(0),
            t.shape.as_ref().map(|s| {
                s.dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(proto::Dim::DimValue(v)) if *v >= 0 => Dim::Known(*v as usize),
                        Some(proto::Dim::DimParam(p)) if !p.is_empty() => Dim::Symbolic(p.clone()),
                        _ => Dim::Unknown,
                    })
                    .collect()
            }),
        ),
        _ => (0, None),
    };
    ValueInfo {
        name,
        dtype: DType::from_onnx(elem),
        onnx_elem_type: elem,
        shape,
    }
}

fn value_info_to_proto(v: &ValueInfo) -> proto::ValueInfoProto {
    let shape = v.shape.as_ref().map(|s| proto::TensorShapeProto {
        dim: s
            .iter()
            .map(|d| proto::Dimension {
                value: match d {
                    Dim::Known(n) => Some(proto::Dim::DimValue(*n as i64)),
                    Dim::Symbolic(p) => Some(proto::Dim::DimParam(p.clone())),
                    Dim::Unknown => None,
                },
                denotation: None,
            })
            .collect(),
    });
    // A value the model declares without a type (If branch outputs of some exporters, e.g.
    // silero-vad's) stays without one: an explicit element type 0 is refused by ONNX
    // Runtime ("Invalid tensor data type 0").
    let typed = v.onnx_elem_type != 0 || shape.is_some();
    proto::ValueInfoProto {
        name: Some(v.name.clone()),
        r#type: typed.then(|| proto::TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: (v.onnx_elem_type != 0).then_some(v.onnx_elem_type),
                shape,
            })),
            denotation: None,
        }),
        doc_string: None,
        metadata_props: Vec::new(),
    }
}

fn sparse_to_dense(s: &proto::SparseTensorProto) -> Result<(String, Tensor)> {
    let values = s.values.as_ref().ok_or_else(|| GraphError::InvalidTensor {
        tensor: "<sparse initializer>".into(),
        reason: "no values".into(),
    })?;
    let name = values.name.clone().unwrap_or_default();
    let bad = |reason: &str| GraphError::InvalidTensor {
        tensor: name.clone(),
        reason: reason.into(),
    };
    let vals = tensor_from_proto(values)?;
    let idx = match &s.indices {
        Some(i) => tensor_from_proto(i)?.to_i64_vec(),
        None => return Err(bad("sparse tensor without indices")),
    };
    if s.dims.iter().any(|&d| d < 0) {
        return Err(bad(&format!("negative dimension in {:?}", s.dims)));
    }
    let dims: Vec<usize> = s.dims.iter().map(|&d| d as usize).collect();
    // Checked before the dense tensor is allocated: a sparse initializer's dims cost
    // nothing in the file (dims 2^40 with one value is 16 bytes).
    let total = quantkit_core::limits::Limits::current()
        .check_shape(&format!("sparse initializer `{name}`"), &dims)?;
    let nnz = vals.len();
    let linear: Vec<usize> = if idx.len() == nnz {
        idx.iter().map(|&i| i as usize).collect()
    } else if idx.len() == nnz * dims.len() {
        let st = crate::tensor::strides(&dims);
        idx.chunks(dims.len().max(1))
            .map(|c| {
                // An index outside its axis is out of range (and must not wrap into range).
                c.iter()
                    .zip(&st)
                    .zip(&dims)
                    .try_fold(0usize, |acc, ((&i, &s), &d)| {
                        (i >= 0 && (i as usize) < d).then(|| acc + i as usize * s)
                    })
                    .unwrap_or(usize::MAX)
            })
            .collect()
    } else {
        return Err(bad("indices do not match the number of values"));
    };
    if linear.iter().any(|&i| i >= total) {
        return Err(bad("sparse index out of range"));
    }
    if vals.dtype == DType::F8E8M0 {
        // E8M0 has no zero to fill the unset elements with.
        return Err(bad("sparse float8e8m0 initializer (the type has no zero)"));
    }
    let mut out = Tensor::zeros(vals.dtype, &dims);
    macro_rules! scatter {
        ($o:expr, $v:expr) => {
            for (k, &i) in linear.iter().enumerate() {
                $o[i] = $v[k];
            }
        };
    }
    match (&mut out.data, &vals.data) {
        (Data::F32(o), Data::F32(v)) => scatter!(o, v),
        (Data::I64(o), Data::I64(v)) => scatter!(o, v),
        (Data::I32(o), Data::I32(v)) => scatter!(o, v),
        (Data::I8(o), Data::I8(v)) => scatter!(o, v),
        (Data::U8(o), Data::U8(v)) => scatter!(o, v),
        _ => return Err(bad("sparse initializer dtype not supported")),
    }
    Ok((name, out))
}

/// Decodes a `TensorProto` (raw or typed fields) into a tensor.
pub fn tensor_from_proto(t: &proto::TensorProto) -> Result<Tensor> {
    let name = t.name.clone().unwrap_or_default();
    let bad = |reason: String| GraphError::InvalidTensor {
        tensor: name.clone(),
        reason,
    };
    let code = t.data_type.unwrap_or(0);
    let dtype = DType::from_onnx(code).ok_or_else(|| GraphError::UnsupportedType {
        tensor: name.clone(),
        dtype: DType::onnx_name(code).to_string(),
    })?;
    if t.data_location == Some(1) || !t.external_data.is_empty() {
        return Err(bad("external data is not supported".into()));
    }
    if t.segment.is_some() {
        return Err(bad("segmented tensors are not supported".into()));
    }
    if t.dims.iter().any(|&d| d < 0) {
        return Err(bad(format!("negative dimension in {:?}", t.dims)));
    }
    let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    let n = quantkit_core::limits::Limits::current()
        .check_shape(&format!("tensor `{name}`"), &shape)?;
    let data = match &t.raw_data {
        Some(raw) => decode_raw(raw, dtype, n).map_err(bad)?,
        None => decode_typed(t, dtype, n).map_err(bad)?,
    };
    if data.len() != n {
        return Err(bad(format!(
            "{} elements for shape {shape:?} ({n} expected)",
            data.len()
        )));
    }
    Ok(Tensor { dtype, shape, data })
}

pub(crate) fn decode_raw(raw: &[u8], dtype: DType, n: usize) -> std::result::Result<Data, String> {
    if matches!(dtype, DType::I4 | DType::U4 | DType::F4E2M1) {
        if raw.len() != n.div_ceil(2) {
            return Err(format!("{} raw bytes for {n} 4-bit values", raw.len()));
        }
        return Ok(unpack4(raw, dtype, n));
    }
    if matches!(dtype, DType::I2 | DType::U2) {
        if raw.len() != n.div_ceil(4) {
            return Err(format!("{} raw bytes for {n} 2-bit values", raw.len()));
        }
        return Ok(unpack2(raw, dtype, n));
    }
    let size = dtype.size_bytes();
    if raw.len() != n * size {
        return Err(format!("{} raw bytes for {n} values of {dtype}", raw.len()));
    }
    macro_rules! le {
        ($t:ty, $v:ident) => {
            Data::$v(
                raw.chunks_exact(size)
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk size")))
                    .collect(),
            )
        };
    }
    Ok(match dtype {
        DType::F32 => le!(f32, F32),
        DType::F64 => le!(f64, F64),
        DType::F16 => Data::F16(
            raw.chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]))
                .collect(),
        ),
        DType::I8 => Data::I8(raw.iter().map(|&b| b as i8).collect()),
        DType::U8
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0 => Data::U8(raw.to_vec()),
        DType::I16 => le!(i16, I16),
        DType::U16 | DType::BF16 => le!(u16, U16),
        DType::I32 => le!(i32, I32),
        DType::U32 => le!(u32, U32),
        DType::I64 => le!(i64, I64),
        DType::U64 => le!(u64, U64),
        DType::Bool => Data::Bool(raw.iter().map(|&b| b != 0).collect()),
        DType::I4 | DType::U4 | DType::F4E2M1 => unpack4(raw, dtype, n),
        DType::I2 | DType::U2 => unpack2(raw, dtype, n),
    })
}

/// Unpacks ONNX 4-bit storage: two values per byte, the first in the low nibble (int4 is
/// sign-extended; uint4 and float4 codes are kept as they are). The caller checks that
/// `bytes` holds `n` values.
fn unpack4(bytes: &[u8], dtype: DType, n: usize) -> Data {
    let nib = |i: usize| bytes.get(i / 2).map_or(0, |b| (b >> ((i % 2) * 4)) & 0xF);
    match dtype {
        DType::I4 => Data::I8((0..n).map(|i| ((nib(i) << 4) as i8) >> 4).collect()),
        _ => Data::U8((0..n).map(nib).collect()),
    }
}

/// Unpacks ONNX 2-bit storage: four values per byte, the first in the lowest two bits
/// (int2 is sign-extended). The caller checks that `bytes` holds `n` values.
fn unpack2(bytes: &[u8], dtype: DType, n: usize) -> Data {
    let crumb = |i: usize| bytes.get(i / 4).map_or(0, |b| (b >> ((i % 4) * 2)) & 0x3);
    match dtype {
        DType::I2 => Data::I8((0..n).map(|i| ((crumb(i) << 6) as i8) >> 6).collect()),
        _ => Data::U8((0..n).map(crumb).collect()),
    }
}

/// The low `bits` bits of each stored value (4-bit and 2-bit types).
fn low_bits(data: &Data, bits: u32) -> Vec<u8> {
    let mask = ((1u16 << bits) - 1) as u8;
    match data {
        Data::I8(v) => v.iter().map(|&x| (x as u8) & mask).collect(),
        Data::U8(v) => v.iter().map(|&x| x & mask).collect(),
        _ => Vec::new(),
    }
}

fn pack4(data: &Data) -> Vec<u8> {
    low_bits(data, 4)
        .chunks(2)
        .map(|c| c[0] | (c.get(1).copied().unwrap_or(0) << 4))
        .collect()
}

fn pack2(data: &Data) -> Vec<u8> {
    low_bits(data, 2)
        .chunks(4)
        .map(|c| {
            c.iter()
                .enumerate()
                .fold(0u8, |b, (k, &v)| b | (v << (2 * k)))
        })
        .collect()
}

fn decode_typed(
    t: &proto::TensorProto,
    dtype: DType,
    n: usize,
) -> std::result::Result<Data, String> {
    let i32s = &t.int32_data;
    Ok(match dtype {
        DType::F32 => Data::F32(t.float_data.clone()),
        DType::F64 => Data::F64(t.double_data.clone()),
        DType::I64 => Data::I64(t.int64_data.clone()),
        DType::U64 => Data::U64(t.uint64_data.clone()),
        DType::U32 => Data::U32(t.uint64_data.iter().map(|&x| x as u32).collect()),
        DType::I32 => Data::I32(i32s.clone()),
        DType::I16 => Data::I16(i32s.iter().map(|&x| x as i16).collect()),
        DType::U16 => Data::U16(i32s.iter().map(|&x| x as u16).collect()),
        DType::I8 => Data::I8(i32s.iter().map(|&x| x as i8).collect()),
        DType::U8
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0 => Data::U8(i32s.iter().map(|&x| x as u8).collect()),
        // One bfloat16 per int32_data entry, as its 16 bits (like float16).
        DType::BF16 => Data::U16(i32s.iter().map(|&x| x as u16).collect()),
        DType::Bool => Data::Bool(i32s.iter().map(|&x| x != 0).collect()),
        DType::F16 => Data::F16(
            i32s.iter()
                .map(|&x| half::f16::from_bits(x as u16))
                .collect(),
        ),
        DType::I4 | DType::U4 | DType::F4E2M1 => {
            let bytes: Vec<u8> = i32s.iter().map(|&x| x as u8).collect();
            if bytes.len() != n.div_ceil(2) {
                return Err(format!("{} packed bytes for {n} 4-bit values", bytes.len()));
            }
            unpack4(&bytes, dtype, n)
        }
        DType::I2 | DType::U2 => {
            let bytes: Vec<u8> = i32s.iter().map(|&x| x as u8).collect();
            if bytes.len() != n.div_ceil(4) {
                return Err(format!("{} packed bytes for {n} 2-bit values", bytes.len()));
            }
            unpack2(&bytes, dtype, n)
        }
    })
}

/// Encodes a tensor as a `TensorProto` with `raw_data` (little-endian; 4-bit types packed
/// two per byte, 2-bit types four per byte, first value in the low bits; narrow floats as
/// their codes).
pub fn tensor_to_proto(name: &str, t: &Tensor) -> proto::TensorProto {
    let raw: Vec<u8> = match (&t.data, t.dtype) {
        (d, DType::I4 | DType::U4 | DType::F4E2M1) => pack4(d),
        (d, DType::I2 | DType::U2) => pack2(d),
        (Data::F32(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Data::F64(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Data::F16(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Data::I8(v), _) => v.iter().map(|&x| x as u8).collect(),
        (Data::U8(v), _) => v.clone(),
        (Data::I16(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Data::U16(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Data::I32(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Data::U32(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Data::I64(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Data::U64(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Data::Bool(v), _) => v.iter().map(|&x| x as u8).collect(),
    };
    proto::TensorProto {
        dims: t.shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype.onnx_code()),
        name: if name.is_empty() {
            None
        } else {
            Some(name.to_string())
        },
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// A graph (the model's, or a subgraph) as a `GraphProto`.
fn graph_to_proto(graph: &Graph) -> proto::GraphProto {
    let m = &graph.meta;
    let opt = |s: &String| if s.is_empty() { None } else { Some(s.clone()) };
    let node = graph
        .nodes
        .iter()
        .map(|n| proto::NodeProto {
            input: n.inputs.clone(),
            output: n.outputs.clone(),
            name: Some(n.name.clone()),
            op_type: Some(n.op_type.clone()),
            attribute: n
                .attributes
                .iter()
                .map(|(k, v)| attr_to_proto(k, v))
                .collect(),
            doc_string: opt(&n.doc_string),
            domain: Some(n.domain.clone()),
            ..Default::default()
        })
        .collect();
    let mut outputs_set: HashSet<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
    outputs_set.extend(graph.inputs.iter().map(|o| o.name.as_str()));
    proto::GraphProto {
        node,
        name: Some(graph.name.clone()),
        initializer: graph
            .initializers
            .iter()
            .map(|(k, t)| tensor_to_proto(k, t))
            .collect(),
        doc_string: opt(&m.graph_doc_string),
        input: graph.inputs.iter().map(value_info_to_proto).collect(),
        output: graph.outputs.iter().map(value_info_to_proto).collect(),
        value_info: graph
            .value_info
            .values()
            .filter(|v| !outputs_set.contains(v.name.as_str()))
            .map(value_info_to_proto)
            .collect(),
        ..Default::default()
    }
}

/// Converts a graph back into an ONNX model (initializers as `raw_data`).
pub fn export_model(graph: &Graph) -> proto::ModelProto {
    let m = &graph.meta;
    let opt = |s: &String| if s.is_empty() { None } else { Some(s.clone()) };
    let g = graph_to_proto(graph);
    proto::ModelProto {
        ir_version: Some(if m.ir_version > 0 { m.ir_version } else { 8 }),
        producer_name: opt(&m.producer_name),
        producer_version: opt(&m.producer_version),
        domain: opt(&m.domain),
        model_version: if m.model_version != 0 {
            Some(m.model_version)
        } else {
            None
        },
        doc_string: opt(&m.doc_string),
        graph: Some(g),
        opset_import: graph
            .opset_imports
            .iter()
            .map(|(d, v)| proto::OperatorSetIdProto {
                domain: Some(d.clone()),
                version: Some(*v),
            })
            .collect(),
        metadata_props: m
            .metadata_props
            .iter()
            .map(|(k, v)| proto::StringStringEntryProto {
                key: Some(k.clone()),
                value: Some(v.clone()),
            })
            .collect(),
        ..Default::default()
    }
}

/// Exports a graph and writes it to `path` (written to a temporary file first, then renamed,
/// so a failure never leaves a half-written model).
pub fn save_model(graph: &Graph, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let bytes = export_model(graph).encode_to_vec();
    write_atomic(path, &bytes)
}

/// Writes through quantkit-core's one atomic writer ([`quantkit_core::atomic`]: O_EXCL
/// temporary file with an unpredictable name in the same folder, fsync, rename; removed on
/// every error path; a symlink, directory or FIFO at `path` is refused).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    quantkit_core::atomic::write_bytes(path, bytes).map_err(|source| GraphError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Names of values a graph's nodes read that nothing defines (helper for validation).
pub fn undefined_values(graph: &Graph) -> HashMap<String, String> {
    let mut defined: HashSet<&str> = graph.inputs.iter().map(|v| v.name.as_str()).collect();
    defined.extend(graph.initializers.keys().map(String::as_str));
    let mut missing = HashMap::new();
    for n in &graph.nodes {
        for i in &n.inputs {
            if !i.is_empty() && !defined.contains(i.as_str()) {
                missing.entry(i.clone()).or_insert_with(|| n.name.clone());
            }
        }
        defined.extend(n.outputs.iter().map(String::as_str));
    }
    missing
}
