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
    for (i, n) in g.node.iter().enumerate() {
        let node = node_from_proto(n, i)?;
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

fn node_from_proto(n: &proto::NodeProto, index: usize) -> Result<Node> {
    let op_type = n.op_type.clone().unwrap_or_default();
    let name = match n.name.as_deref() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => format!("{op_type}_{index}"),
    };
    let mut attributes = Vec::with_capacity(n.attribute.len());
    for a in &n.attribute {
        attributes.push((
            a.name.clone().unwrap_or_default(),
            attr_from_proto(a, &name)?,
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

fn attr_from_proto(a: &proto::AttributeProto, node: &str) -> Result<AttrValue> {
    use proto::attribute_type as at;
    let ty = a.r#type.unwrap_or(at::UNDEFINED);
    Ok(match ty {
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
    proto::ValueInfoProto {
        name: Some(v.name.clone()),
        r#type: Some(proto::TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(v.onnx_elem_type),
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

fn decode_raw(raw: &[u8], dtype: DType, n: usize) -> std::result::Result<Data, String> {
    if matches!(dtype, DType::I4 | DType::U4) {
        if raw.len() != n.div_ceil(2) {
            return Err(format!("{} raw bytes for {n} 4-bit values", raw.len()));
        }
        return Ok(unpack4(raw, dtype, n));
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
        DType::U8 => Data::U8(raw.to_vec()),
        DType::I16 => le!(i16, I16),
        DType::U16 => le!(u16, U16),
        DType::I32 => le!(i32, I32),
        DType::U32 => le!(u32, U32),
        DType::I64 => le!(i64, I64),
        DType::U64 => le!(u64, U64),
        DType::Bool => Data::Bool(raw.iter().map(|&b| b != 0).collect()),
        DType::I4 | DType::U4 => unreachable!("handled above"),
    })
}

/// Unpacks ONNX 4-bit storage: two values per byte, the first in the low nibble.
fn unpack4(bytes: &[u8], dtype: DType, n: usize) -> Data {
    let nib = |i: usize| (bytes[i / 2] >> ((i % 2) * 4)) & 0xF;
    match dtype {
        DType::I4 => Data::I8((0..n).map(|i| ((nib(i) << 4) as i8) >> 4).collect()),
        _ => Data::U8((0..n).map(nib).collect()),
    }
}

fn pack4(data: &Data) -> Vec<u8> {
    let vals: Vec<u8> = match data {
        Data::I8(v) => v.iter().map(|&x| (x as u8) & 0xF).collect(),
        Data::U8(v) => v.iter().map(|&x| x & 0xF).collect(),
        _ => Vec::new(),
    };
    vals.chunks(2)
        .map(|c| c[0] | (c.get(1).copied().unwrap_or(0) << 4))
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
        DType::U8 => Data::U8(i32s.iter().map(|&x| x as u8).collect()),
        DType::Bool => Data::Bool(i32s.iter().map(|&x| x != 0).collect()),
        DType::F16 => Data::F16(
            i32s.iter()
                .map(|&x| half::f16::from_bits(x as u16))
                .collect(),
        ),
        DType::I4 | DType::U4 => {
            let bytes: Vec<u8> = i32s.iter().map(|&x| x as u8).collect();
            if bytes.len() != n.div_ceil(2) {
                return Err(format!("{} packed bytes for {n} 4-bit values", bytes.len()));
            }
            unpack4(&bytes, dtype, n)
        }
    })
}

/// Encodes a tensor as a `TensorProto` with `raw_data` (little-endian; 4-bit types packed).
pub fn tensor_to_proto(name: &str, t: &Tensor) -> proto::TensorProto {
    let raw: Vec<u8> = match (&t.data, t.dtype) {
        (d, DType::I4 | DType::U4) => pack4(d),
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

/// Converts a graph back into an ONNX model (initializers as `raw_data`).
pub fn export_model(graph: &Graph) -> proto::ModelProto {
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
    let g = proto::GraphProto {
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
    };
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
