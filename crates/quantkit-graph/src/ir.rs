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
    /// A subgraph (the branches of `If`, the body of `Loop` and `Scan`). Its nodes may read
    /// values of every enclosing graph by name ([`Graph::outer_reads`]).
    Graph(Box<Graph>),
    /// A list of subgraphs (no standard operator has one; kept so export is faithful).
    Graphs(Vec<Graph>),
    /// Kinds the float executor never reads (sparse tensors, type protos, tensors of
    /// types the IR lacks), kept verbatim so export writes them back unchanged.
    Raw(Box<proto::AttributeProto>),
}

/// How deeply subgraphs may nest (a `Loop` body holding an `If` whose branch holds a
/// `Scan`... is depth 3). Import rejects deeper models with an error naming the node: every
/// pass walks subgraphs recursively, so the cap bounds the stack. 30 because the protobuf
/// decoder stops at 100 nested messages and each level of subgraph costs three (node,
/// attribute, graph): a deeper model could not be decoded anyway, and this cap reports it
/// by name rather than as a decode error.
pub const MAX_SUBGRAPH_DEPTH: usize = 30;

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
    /// The subgraphs held in this node's attributes, in attribute order.
    pub fn subgraphs(&self) -> impl Iterator<Item = &Graph> {
        self.attributes.iter().flat_map(|(_, v)| match v {
            AttrValue::Graph(g) => std::slice::from_ref(&**g),
            AttrValue::Graphs(gs) => gs.as_slice(),
            _ => &[],
        })
    }
    /// Mutable access to the subgraphs held in this node's attributes.
    pub fn subgraphs_mut(&mut self) -> impl Iterator<Item = &mut Graph> {
        self.attributes.iter_mut().flat_map(|(_, v)| match v {
            AttrValue::Graph(g) => std::slice::from_mut(&mut **g),
            AttrValue::Graphs(gs) => gs.as_mut_slice(),
            _ => &mut [],
        })
    }
    /// Whether the node holds a subgraph (control flow).
    pub fn has_subgraphs(&self) -> bool {
        self.subgraphs().next().is_some()
    }
    /// The subgraph attribute called `name`.
    pub fn attr_graph(&self, name: &str) -> Result<&Graph, OpError> {
        match self.attr(name) {
            Some(AttrValue::Graph(g)) => Ok(g),
            None => Err(OpError::attr(name, "missing subgraph attribute")),
            Some(other) => Err(OpError::attr(
                name,
                format!("expected a graph, got {}", other.kind_name()),
            )),
        }
    }
    /// Values of enclosing graphs that this node's subgraphs read (at any depth), besides
    /// the node's own inputs: the node reads them too, as far as every pass is concerned.
    pub fn outer_reads(&self) -> std::collections::BTreeSet<&str> {
        let mut free = std::collections::BTreeSet::new();
        for g in self.subgraphs() {
            free.extend(g.outer_reads());
        }
        free
    }
    /// Every value this node reads: its inputs (without `""`) and its subgraphs' outer
    /// reads, each once.
    pub fn reads(&self) -> std::collections::BTreeSet<&str> {
        let mut r = self.outer_reads();
        r.extend(
            self.inputs
                .iter()
                .filter(|v| !v.is_empty())
                .map(String::as_str),
        );
        r
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

impl AttrValue {
    /// A short name of the attribute kind, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            AttrValue::Float(_) => "float",
            AttrValue::Int(_) => "int",
            AttrValue::String(_) => "string",
            AttrValue::Tensor(_) => "tensor",
            AttrValue::Floats(_) => "floats",
            AttrValue::Ints(_) => "ints",
            AttrValue::Strings(_) => "strings",
            AttrValue::Graph(_) => "graph",
            AttrValue::Graphs(_) => "graphs",
            AttrValue::Raw(_) => "raw attribute",
        }
    }
}

impl Graph {
    /// Names this graph defines: inputs, initializers and node outputs (not `""`), not
    /// those of its subgraphs.
    pub fn defined(&self) -> std::collections::HashSet<&str> {
        self.inputs
            .iter()
            .map(|v| v.name.as_str())
            .chain(self.initializers.keys().map(String::as_str))
            .chain(
                self.nodes
                    .iter()
                    .flat_map(|n| n.outputs.iter().map(String::as_str)),
            )
            .filter(|v| !v.is_empty())
            .collect()
    }
    /// Whether `name` is defined by this graph or by any subgraph nested in it.
    pub fn defines_anywhere(&self, name: &str) -> bool {
        self.inputs.iter().any(|i| i.name == name)
            || self.initializers.contains_key(name)
            || self.nodes.iter().any(|n| {
                n.outputs.iter().any(|o| o == name)
                    || n.subgraphs().any(|g| g.defines_anywhere(name))
            })
    }
    /// Names read by this graph (its nodes, its outputs, its nested subgraphs) that it does
    /// not define: the values of enclosing graphs it uses. ONNX forbids a subgraph to
    /// define a name visible from an enclosing scope (import rejects it), so a name here
    /// always means the enclosing graph's value.
    pub fn outer_reads(&self) -> std::collections::BTreeSet<&str> {
        let defined = self.defined();
        let mut free = std::collections::BTreeSet::new();
        for n in &self.nodes {
            for v in n.reads() {
                if !defined.contains(v) {
                    free.insert(v);
                }
            }
        }
        for o in &self.outputs {
            if !o.name.is_empty() && !defined.contains(o.name.as_str()) {
                free.insert(o.name.as_str());
            }
        }
        free
    }
    /// Whether any node, at any depth, holds a subgraph.
    pub fn has_subgraphs(&self) -> bool {
        self.nodes.iter().any(Node::has_subgraphs)
    }
    /// Every value name used anywhere in the model (inputs, outputs, initializers, node
    /// inputs and outputs, at every depth), for a rewrite that needs fresh names.
    pub fn all_value_names(&self) -> std::collections::HashSet<String> {
        let mut s = std::collections::HashSet::new();
        self.collect_names(&mut s, &mut std::collections::HashSet::new());
        s
    }
    /// Every node name used anywhere in the model (at every depth).
    pub fn all_node_names(&self) -> std::collections::HashSet<String> {
        let mut s = std::collections::HashSet::new();
        self.collect_names(&mut std::collections::HashSet::new(), &mut s);
        s
    }
    fn collect_names(
        &self,
        values: &mut std::collections::HashSet<String>,
        nodes: &mut std::collections::HashSet<String>,
    ) {
        values.extend(
            self.inputs
                .iter()
                .chain(&self.outputs)
                .map(|v| v.name.clone()),
        );
        values.extend(self.initializers.keys().cloned());
        for n in &self.nodes {
            nodes.insert(n.name.clone());
            values.extend(n.inputs.iter().chain(&n.outputs).cloned());
            for g in n.subgraphs() {
                g.collect_names(values, nodes);
            }
        }
    }
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
    /// listed once). A node whose subgraph reads `value` from this graph reads it.
    pub fn readers(&self, value: &str) -> Vec<usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                n.inputs.iter().any(|i| i == value)
                    || (n.has_subgraphs() && n.outer_reads().contains(value))
            })
            .map(|(i, _)| i)
            .collect()
    }
    /// Whether `value` is one of the graph's outputs.
    pub fn is_output(&self, value: &str) -> bool {
        self.outputs.iter().any(|o| o.name == value)
    }
    /// A value name not yet used by any initializer, node output or graph input, here or
    /// in a nested subgraph (a new name must not be shadowed by one): `base`, else
    /// `base_1`, `base_2`...
    pub fn unique_name(&self, base: &str) -> String {
        let taken = |n: &str| self.defines_anywhere(n);
        if !taken(base) {
            return base.to_string();
        }
        (1..)
            .map(|k| format!("{base}_{k}"))
            .find(|n| !taken(n))
            .expect("unbounded")
    }
    /// Drops initializers that no node (nor any subgraph of a node, at any depth) and no
    /// graph output reads.
    pub fn prune_initializers(&mut self) {
        let used: std::collections::HashSet<&str> = self
            .nodes
            .iter()
            .flat_map(|n| n.reads())
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
    /// Values read from inside a subgraph (outer-scope reads).
    sub_read: std::collections::HashSet<&'g str>,
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
            // A subgraph reading an outer value makes its node one more reader of it.
            for v in n.outer_reads() {
                u.readers.entry(v).or_default().push(i);
                u.sub_read.insert(v);
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
    /// exactly one input of one node (so a rewrite may consume it). A value read from inside
    /// a subgraph has no sole reader: a rewrite of this graph cannot rewire that read.
    pub fn sole_reader(&self, value: &str) -> Option<usize> {
        match self.readers(value) {
            [r] if !self.is_output(value) && !self.sub_read.contains(value) => Some(*r),
            _ => None,
        }
    }
}
