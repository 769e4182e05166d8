//! The graph IR: nodes in topological order over named values, initializers, typed inputs
//! and outputs, and the model metadata that export writes back.

use crate::error::OpError;
use crate::onnx::proto;
use crate::ops::{Facts, OpKind};
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
    /// A node of operator `kind` (its op type and domain) with no attributes.
    pub fn of(kind: OpKind, name: &str, inputs: &[&str], outputs: &[&str]) -> Node {
        let mut n = Node::new(name, kind.name(), inputs, outputs);
        n.domain = kind.domain().to_string();
        n
    }
    /// The registered operator this node runs, if quantkit has it.
    pub fn kind(&self) -> Option<OpKind> {
        OpKind::of(&self.domain, &self.op_type)
    }
    /// Whether this node runs operator `kind` (same op type, same domain).
    pub fn is(&self, kind: OpKind) -> bool {
        self.op_type == kind.name()
            && (self.domain == kind.domain()
                || (kind.domain().is_empty() && crate::ops::is_onnx_domain(&self.domain)))
    }
    /// Whether the node is in the default ONNX domain (`""` or `ai.onnx`).
    pub fn is_onnx_domain(&self) -> bool {
        crate::ops::is_onnx_domain(&self.domain)
    }
    /// The registry's facts about this node's operator ([`Facts::NONE`] when quantkit does
    /// not have it).
    pub fn facts(&self) -> &'static Facts {
        const NONE: Facts = Facts::NONE;
        self.kind().map_or(&NONE, OpKind::facts)
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
    /// Indices of the nodes reading `value`, in graph order (a node reading it twice is
    /// listed once).
    pub fn readers(&self, value: &str) -> Vec<usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.inputs.iter().any(|i| i == value))
            .map(|(i, _)| i)
            .collect()
    }
    /// Whether `value` is one of the graph's outputs.
    pub fn is_output(&self, value: &str) -> bool {
        self.outputs.iter().any(|o| o.name == value)
    }
    /// A value name not yet used by any initializer, node output or graph input: `base`,
    /// else `base_1`, `base_2`...
    pub fn unique_name(&self, base: &str) -> String {
        let taken = |n: &str| {
            self.initializers.contains_key(n)
                || self.inputs.iter().any(|i| i.name == n)
                || self.nodes.iter().any(|x| x.outputs.iter().any(|o| o == n))
        };
        if !taken(base) {
            return base.to_string();
        }
        (1..)
            .map(|k| format!("{base}_{k}"))
            .find(|n| !taken(n))
            .expect("unbounded")
    }
    /// Drops initializers that no node and no graph output reads.
    pub fn prune_initializers(&mut self) {
        let used: std::collections::HashSet<&str> = self
            .nodes
            .iter()
            .flat_map(|n| n.inputs.iter().map(String::as_str))
            .chain(self.outputs.iter().map(|o| o.name.as_str()))
            .collect();
        let dead: Vec<String> = self
            .initializers
            .keys()
            .filter(|k| !used.contains(k.as_str()))
            .cloned()
            .collect();
        for k in dead {
            self.initializers.remove(&k);
        }
    }
}

/// Who reads and who writes each value of a graph, indexed once for the passes that ask
/// many times (matchers, rewrites).
#[derive(Clone, Debug, Default)]
pub struct Uses<'g> {
    readers: std::collections::HashMap<&'g str, Vec<usize>>,
    producer: std::collections::HashMap<&'g str, usize>,
    outputs: std::collections::HashSet<&'g str>,
}

impl<'g> Uses<'g> {
    /// Indexes `g` (omitted optional inputs and outputs, `""`, are skipped).
    pub fn new(g: &'g Graph) -> Uses<'g> {
        Uses::of(&g.nodes, &g.outputs)
    }
    /// Indexes a node list with graph outputs `outputs` (for a rewrite that has taken the
    /// nodes out of their graph).
    pub fn of(nodes: &'g [Node], outputs: &'g [ValueInfo]) -> Uses<'g> {
        let mut u = Uses::default();
        for (i, n) in nodes.iter().enumerate() {
            for v in n.inputs.iter().filter(|v| !v.is_empty()) {
                u.readers.entry(v.as_str()).or_default().push(i);
            }
            for o in n.outputs.iter().filter(|o| !o.is_empty()) {
                u.producer.insert(o.as_str(), i);
            }
        }
        u.outputs = outputs.iter().map(|o| o.name.as_str()).collect();
        u
    }
    /// Index of the node producing `value`.
    pub fn producer(&self, value: &str) -> Option<usize> {
        self.producer.get(value).copied()
    }
    /// Indices of the nodes reading `value`, in graph order, once per input that reads it
    /// (`Mul(x, x)` lists its node twice).
    pub fn readers(&self, value: &str) -> &[usize] {
        self.readers.get(value).map_or(&[], Vec::as_slice)
    }
    /// Whether `value` is a graph output.
    pub fn is_output(&self, value: &str) -> bool {
        self.outputs.contains(value)
    }
    /// The one node reading `value`, when `value` is not a graph output and is read by
    /// exactly one input of one node (so a rewrite may consume it).
    pub fn sole_reader(&self, value: &str) -> Option<usize> {
        match self.readers(value) {
            [r] if !self.is_output(value) => Some(*r),
            _ => None,
        }
    }
}
