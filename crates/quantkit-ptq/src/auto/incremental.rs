//! Incremental evaluation of range candidates for [`super::choose`] (issue 18): a candidate
//! changes one activation's scale and zero point (and the biases and weight scales of the
//! layers reading it), so every node of the QDQ graph that does not depend on the change
//! computes what it computed before. [`Incremental`] keeps, per selection batch, the values
//! that cross a *cut* of the node list (the frontier), and runs a candidate from the first
//! node it changes to the end only.
//!
//! Definitions, on the QDQ graph's node list (topological order):
//!
//! - a **constant node** reads only initializers and constant nodes' outputs (the DQ of a
//!   weight or a bias); it is cheap and re-run wherever it is read, never cached;
//! - a node is **dirty** for a candidate when it differs from the base graph's node at the
//!   same index (attributes, a subgraph), reads an initializer whose value differs, or
//!   reads a dirty node's output;
//! - the candidate's **start** is its first dirty non-constant node; every non-constant
//!   node before it computes exactly what it computes in the base graph;
//! - the **frontier** at position `p`: the graph inputs and outputs of non-constant nodes
//!   before `p` that a non-constant node at or after `p` reads, or that are graph outputs.
//!
//! A candidate run is then the non-constant nodes from its start on (and the constant
//! nodes they read), fed the frontier at its start: the same nodes on the same inputs as a
//! full run, so the outputs are equal bit for bit (`tests/auto.rs` checks it). The
//! frontier moves forward by running the base graph's nodes between two starts once;
//! accepting a candidate makes it the base (the frontier before its start stays valid).
//! Memory: the frontier of every selection batch (the values live across one cut, e.g.
//! one activation and a residual branch), never every intermediate value.

use crate::analyze::Feed;
use crate::error::{graph as graph_err, Result};
use quantkit_graph::{execute, Graph, Tensor, ValueInfo};
use std::collections::{BTreeSet, HashSet};

fn info(name: &str) -> ValueInfo {
    ValueInfo {
        name: name.to_string(),
        dtype: None,
        onnx_elem_type: 0,
        shape: None,
    }
}

/// Outputs of one graph run: `(name, tensor)` in the graph's output order.
pub type Outputs = Vec<(String, Tensor)>;

/// Runs candidates of a QDQ graph on fixed feeds, re-running only what each changes (see
/// the module docs).
pub struct Incremental<'f> {
    feeds: &'f [Feed],
    base: Graph,
    /// Per node: reads only initializers and constant nodes.
    constant: Vec<bool>,
    /// Frontier position: the non-constant nodes before it have run on every feed.
    pos: usize,
    /// Per feed, the frontier values at `pos`.
    frontier: Vec<Vec<(String, Tensor)>>,
    /// Node evaluations done (non-constant nodes, summed over feeds' runs).
    pub nodes_run: usize,
    /// Node evaluations full re-runs would have done for the same candidates.
    pub nodes_full: usize,
}

/// Which nodes of `g` are constant (read only initializers and constant nodes' outputs).
fn constant_nodes(g: &Graph) -> Vec<bool> {
    let mut produced_const: HashSet<&str> = HashSet::new();
    let mut out = Vec::with_capacity(g.nodes.len());
    for n in &g.nodes {
        let c = n
            .reads()
            .iter()
            .all(|v| g.initializers.contains_key(*v) || produced_const.contains(v));
        if c {
            produced_const.extend(n.outputs.iter().map(String::as_str));
        }
        out.push(c);
    }
    out
}

impl<'f> Incremental<'f> {
    /// Starts from `base` with the frontier at the graph inputs.
    pub fn new(base: Graph, feeds: &'f [Feed]) -> Self {
        let constant = constant_nodes(&base);
        Incremental {
            frontier: feeds.to_vec(),
            feeds,
            base,
            constant,
            pos: 0,
            nodes_run: 0,
            nodes_full: 0,
        }
    }

    /// The current base graph.
    pub fn base(&self) -> &Graph {
        &self.base
    }

    /// Index of the first dirty non-constant node of `cand` against the base, or `None`
    /// when the two graphs differ in structure (node count or any node's outputs): then
    /// only a full run is safe. `Some(len)` when no non-constant node is dirty.
    fn start_of(&self, cand: &Graph) -> Option<usize> {
        if cand.nodes.len() != self.base.nodes.len()
            || cand.inputs != self.base.inputs
            || cand.outputs != self.base.outputs
        {
            return None;
        }
        let keys: BTreeSet<&String> = cand
            .initializers
            .keys()
            .chain(self.base.initializers.keys())
            .collect();
        let changed: HashSet<&str> = keys
            .into_iter()
            .filter(|k| cand.initializers.get(*k) != self.base.initializers.get(*k))
            .map(String::as_str)
            .collect();
        let mut dirty: HashSet<&str> = HashSet::new();
        let mut start = None;
        for (i, (c, b)) in cand.nodes.iter().zip(&self.base.nodes).enumerate() {
            if c.outputs != b.outputs {
                return None;
            }
            let d = c != b
                || c.reads()
                    .iter()
                    .any(|v| changed.contains(v) || dirty.contains(v));
            if d {
                dirty.extend(c.outputs.iter().map(String::as_str));
                if !self.constant[i] && start.is_none() {
                    start = Some(i);
                }
            }
        }
        // A graph output written by a dirty constant node (or an initializer output that
        // changed) is not covered by the non-constant nodes: re-run everything.
        for o in &cand.outputs {
            if changed.contains(o.name.as_str()) {
                return Some(0);
            }
            if dirty.contains(o.name.as_str()) && start.is_none() {
                return Some(0);
            }
        }
        Some(start.unwrap_or(cand.nodes.len()))
    }

    /// The names of the frontier at `p` for graph `g` (same structure as the base).
    fn frontier_names(&self, g: &Graph, p: usize) -> Vec<String> {
        let outputs: HashSet<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
        let mut read_after: HashSet<&str> = HashSet::new();
        for (i, n) in g.nodes.iter().enumerate().skip(p) {
            if !self.constant[i] {
                read_after.extend(n.reads());
            }
        }
        let mut names: Vec<String> = Vec::new();
        let mut keep = |v: &str| {
            if (read_after.contains(v) || outputs.contains(v)) && !names.iter().any(|n| n == v) {
                names.push(v.to_string());
            }
        };
        for vi in &g.inputs {
            keep(&vi.name);
        }
        for (i, n) in g.nodes.iter().enumerate().take(p) {
            if !self.constant[i] {
                for o in n.outputs.iter().filter(|o| !o.is_empty()) {
                    keep(o);
                }
            }
        }
        names
    }

    /// Runs the non-constant nodes `from..to` of `g` (and the constant nodes they read)
    /// on `inputs` (the frontier at `from`), returning the values named in `want`. The
    /// initializers are lent to the segment and given back.
    fn segment(
        &mut self,
        g: &mut Graph,
        from: usize,
        to: usize,
        inputs: &[Vec<(String, Tensor)>],
        want: &[String],
    ) -> Result<Vec<Outputs>> {
        let mut needed: HashSet<&str> = want.iter().map(String::as_str).collect();
        let mut pick = vec![false; to];
        for i in (0..to).rev() {
            let n = &g.nodes[i];
            let take = if self.constant[i] {
                n.outputs.iter().any(|o| needed.contains(o.as_str()))
            } else {
                i >= from
            };
            if take {
                pick[i] = true;
                needed.extend(n.reads());
            }
        }
        let in_names: Vec<String> = inputs
            .first()
            .map(|f| f.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default();
        let mut sub = Graph {
            name: format!("{} [{from}..{to}]", g.name),
            nodes: g.nodes[..to]
                .iter()
                .zip(&pick)
                .filter(|(_, p)| **p)
                .map(|(n, _)| n.clone())
                .collect(),
            inputs: in_names.iter().map(|n| info(n)).collect(),
            outputs: want.iter().map(|n| info(n)).collect(),
            initializers: std::mem::take(&mut g.initializers),
            opset_imports: g.opset_imports.clone(),
            meta: g.meta.clone(),
            ..Default::default()
        };
        let work = (from..to).filter(|&i| !self.constant[i]).count();
        let mut outs = Vec::with_capacity(inputs.len());
        let mut failed = None;
        for (bi, f) in inputs.iter().enumerate() {
            match execute(&sub, f.clone()) {
                Ok(o) => outs.push(o),
                Err(e) => {
                    failed = Some(graph_err(format!(
                        "running the quantized model (nodes {from}..{to}) on selection batch \
                         {bi} of --method auto"
                    ))(e));
                    break;
                }
            }
            self.nodes_run += work;
        }
        g.initializers = std::mem::take(&mut sub.initializers);
        match failed {
            Some(e) => Err(e),
            None => Ok(outs),
        }
    }

    /// Moves the frontier to `p` on the base graph (back to the graph inputs first when
    /// `p` lies before it).
    fn advance(&mut self, p: usize) -> Result<()> {
        if p < self.pos {
            self.pos = 0;
            self.frontier = self.feeds.to_vec();
        }
        if p == self.pos {
            return Ok(());
        }
        let mut base = std::mem::take(&mut self.base);
        let want = self.frontier_names(&base, p);
        let frontier = std::mem::take(&mut self.frontier);
        let r = self.segment(&mut base, self.pos, p, &frontier, &want);
        self.base = base;
        self.frontier = r?;
        self.pos = p;
        Ok(())
    }

    /// The graph outputs of `cand` on every feed, computed from its first dirty node on.
    pub fn run(&mut self, cand: &mut Graph) -> Result<Vec<Outputs>> {
        let full = (0..cand.nodes.len())
            .filter(|&i| self.constant.get(i).is_some_and(|c| !c))
            .count()
            * self.feeds.len();
        self.nodes_full += full;
        // A dirty node whose subgraph reads other outer values than the base's would
        // miss them in the frontier: such a candidate runs in full.
        let start = self
            .start_of(cand)
            .filter(|&s| self.frontier_names(cand, s) == self.frontier_names(&self.base, s));
        let Some(start) = start else {
            self.nodes_run += full;
            return self
                .feeds
                .iter()
                .enumerate()
                .map(|(bi, f)| {
                    execute(cand, f.clone()).map_err(graph_err(format!(
                        "running the quantized model on selection batch {bi} of --method auto"
                    )))
                })
                .collect();
        };
        self.advance(start)?;
        let want: Vec<String> = cand.outputs.iter().map(|o| o.name.clone()).collect();
        let frontier = std::mem::take(&mut self.frontier);
        let end = cand.nodes.len();
        let r = self.segment(cand, start, end, &frontier, &want);
        self.frontier = frontier;
        r
    }

    /// Makes `g` the base graph (a candidate that was accepted). The frontier stays where
    /// it is when `g` changes nothing before it, else it goes back to the graph inputs.
    pub fn accept(&mut self, g: Graph) {
        match self.start_of(&g) {
            Some(s) if s >= self.pos => {}
            _ => {
                self.pos = 0;
                self.frontier = self.feeds.to_vec();
            }
        }
        self.constant = constant_nodes(&g);
        self.base = g;
    }
}
