//! The graph IR: nodes in topological order over named values, initializers, typed inputs
//! and outputs, and the model metadata that export writes back.

use crate::error::OpError;
use crate::onnx::proto;
use crate::tensor::{DType, Tensor};
use std::collections::BTreeMap;

/// One dimension of a declared shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Known(usize),
    /// A named symbolic size (e.g. `batch`).
    Symbolic(String),
    /// Unknown.
    Unknown,
}

impl Dim {
    /// The fixed size, if any.
    pub fn known(&self) -> Option<usize> {
        match self {
            Dim::Known(n) => Some(*n),
            _ => None,
        }
    }
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Symbolic(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// Name, element type and (possibly partial) shape of a value.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueInfo {
    /// Value name.
    pub name: String,
    /// Element type; `None` when undeclared or not a type the IR holds.
    pub dtype: Option<DType>,
    /// Raw ONNX element type code (kept so export is faithful for types the IR lacks).
    pub onnx_elem_type: i32,
    /// Shape; `None` when the rank is unknown.
    pub shape: Option<Vec<Dim>>,
}

impl ValueInfo {
    /// A fully known value description.
    pub fn new(name: &str, dtype: DType, shape: &[usize]) -> ValueInfo {
        ValueInfo {
            name: name.to_string(),
            dtype: Some(dtype),
            onnx_elem_type: dtype.onnx_code(),
            shape: Some(shape.iter().map(|&d| Dim::Known(d)).collect()),
        }
    }
    /// The shape if every dimension is known.
    pub fn static_shape(&self) -> Option<Vec<usize>> {
        self.shape.as_ref()?.iter().map(Dim::known).collect()
    }
    /// Human-readable `dtype[d0,d1,...]`.
    pub fn describe(&self) -> String {
        let dt = DType::onnx_name(self.onnx_elem_type);
        match &self.shape {
            None => format!("{dt}[?]"),
            Some(s) => format!(
                "{dt}[{}]",
                s.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum AttrValue {
    Float(f32),
    Int(i64),
    String(Vec<u8>),
    Tensor(Tensor),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    /// Kinds the float executor never reads (graphs, sparse tensors, type protos, tensors of
    /// types the IR lacks), kept verbatim so export writes them back unchanged.
    Raw(Box<proto::AttributeProto>),
}

/// A computation step.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Node name (import names unnamed nodes `<op_type>_<index>`).
    pub name: String,
    /// Operator name, e.g. `Conv`.
    pub op_type: String,
    /// Operator domain; "" is the default ONNX domain.
    pub domain: String,
    /// Input value names; "" marks an omitted optional input.
    pub inputs: Vec<String>,
    /// Output value names; "" marks an unused optional output.
    pub outputs: Vec<String>,
    /// Attributes in file order.
    pub attributes: Vec<(String, AttrValue)>,
    /// Documentation string.
    pub doc_string: String,
}

impl Node {
    /// A node with no attributes.
    pub fn new(name: &str, op_type: &str, inputs: &[&str], outputs: &[&str]) -> Node {
        Node {
            name: name.to_string(),
            op_type: op_type.to_string(),
            domain: String::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            attributes: Vec::new(),
            doc_string: String::new(),
        }
    }
    /// Adds an attribute (builder style).
    pub fn with_attr(mut self, name: &str, value: AttrValue) -> Node {
        self.attributes.push((name.to_string(), value));
        self
    }
    /// The attribute called `name`.
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
    /// Integer attribute, or `default` when absent.
    pub fn attr_int(&self, name: &str, default: i64) -> Result<i64, OpError> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Int(i)) => Ok(*i),
            Some(other) => Err(OpError::attr(
                name,
                format!("expected an int, got {other:?}"),
            )),
        }
    }
    /// Float attribute, or `default` when absent (ints are accepted and converted).
    pub fn attr_float(&self, name: &str, default: f32) -> Result<f32, OpError> {
        match self.attr(name) {
            None => Ok(default),
            Some(AttrValue::Float(f)) => Ok(*f),
            Some(AttrValue::Int(i)) => Ok(*i as f32),
            Some(other) => Err(OpError::attr(
                name,
                format!("expected a float, got {other:?}"),
            )),
        }
    }
    /// Integer-list attribute, `None` when absent.
    pub fn attr_ints(&self, name: &str) -> Result<Option<Vec<i64>>, OpError> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Ints(v)) => Ok(Some(v.clone())),
            Some(AttrValue::Int(i)) => Ok(Some(vec![*i])),
            Some(other) => Err(OpError::attr(name, format!("expected ints, got {other:?}"))),
        }
    }
    /// Float-list attribute, `None` when absent.
    pub fn attr_floats(&self, name: &str) -> Result<Option<Vec<f32>>, OpError> {
        match self.attr(name) {
            None => Ok(None),
            Some(AttrValue::Floats(v)) => Ok(Some(v.clone())),
            Some(other) => Err(OpError::attr(
                name,
                format!("expected floats, got {other:?}"),
            )),
        }
    }
    /// String attribute, or `default` when absent.
    pub fn attr_string(&self, name: &str, default: &str) -> Result<String, OpError> {
        match self.attr(name) {
            None => Ok(default.to_string()),
            Some(AttrValue::String(s)) => Ok(String::from_utf8_lossy(s).into_owned()),
            Some(other) => Err(OpError::attr(
                name,
                format!("expected a string, got {other:?}"),
            )),
        }
    }
}

/// Model-level metadata preserved from import to export.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelMeta {
    /// ONNX IR version.
    pub ir_version: i64,
    /// Producer name.
    pub producer_name: String,
    /// Producer version.
    pub producer_version: String,
    /// Model domain.
    pub domain: String,
    /// Model version.
    pub model_version: i64,
    /// Model documentation.
    pub doc_string: String,
    /// Graph documentation.
    pub graph_doc_string: String,
    /// `metadata_props` key/value pairs.
    pub metadata_props: Vec<(String, String)>,
}

/// A computation graph. `nodes` are kept in topological order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// Graph name.
    pub name: String,
    /// Nodes in execution order.
    pub nodes: Vec<Node>,
    /// Run-time inputs (initializers are not listed here).
    pub inputs: Vec<ValueInfo>,
    /// Graph outputs.
    pub outputs: Vec<ValueInfo>,
    /// Constant tensors by name.
    pub initializers: BTreeMap<String, Tensor>,
    /// Known types/shapes of intermediate values (from the file and from shape inference).
    pub value_info: BTreeMap<String, ValueInfo>,
    /// Operator sets: (domain, version); "" is the default ONNX domain.
    pub opset_imports: Vec<(String, i64)>,
    /// Model metadata.
    pub meta: ModelMeta,
}

impl Graph {
    /// Version of the default ONNX operator set (`""` or `ai.onnx`), 0 if none is imported.
    pub fn opset(&self) -> i64 {
        self.opset_imports
            .iter()
            .find(|(d, _)| d.is_empty() || d == "ai.onnx")
            .map(|(_, v)| *v)
            .unwrap_or(0)
    }
    /// Number of parameters (elements of all initializers).
    pub fn parameter_count(&self) -> usize {
        self.initializers.values().map(Tensor::len).sum()
    }
    /// Index of the node producing `value`.
    pub fn producer(&self, value: &str) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.outputs.iter().any(|o| o == value))
    }
}
