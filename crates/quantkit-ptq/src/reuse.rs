//! Re-running only what a graph changes (issue 18: the mixed-precision search of
//! [`crate::mixed`] and the sensitivity passes of [`crate::analyze`]). Most configurations
//! the search measures differ from one it already ran only from some node on (one layer
//! left float, int16 activations on a few layers, …): every node before the first change
//! computes the same values. [`Reuse`] keeps, per evaluation batch, the values of earlier
//! runs at a few *cuts* of their node lists (checkpoints, within a memory budget), and runs
//! a new graph from the nearest usable cut on. [`crate::auto::incremental`] does the same
//! for candidates with the same node list; here the graphs may add and remove Q/DQ nodes
//! and change types, so nodes are matched by content, not by index.
//!
//! Definitions, for a graph `G` to run against a cached run of a graph `B`:
//!
//! - a **constant node** reads only initializers and constant nodes' outputs (the DQ of a
//!   weight); it is cheap, never cached, and re-run wherever it is read;
//! - a node of `G` is **clean** when `B` has an equal node (same name, operator, inputs,
//!   outputs, attributes and subgraphs; output names are unique, so it is looked up by its
//!   first output) and every value it reads is a graph input (the same inputs in both), an
//!   initializer with the same value in both graphs, or an output of a clean node of `G`.
//!   By induction a clean node computes bit for bit what its twin computed in `B`: the same
//!   operator on the same values;
//! - `G`'s **start** is its first non-constant node that is not clean;
//! - the **frontier** of `B` at a cut before its node `p`: the graph inputs and outputs of
//!   non-constant nodes before `p` that a non-constant node at or after `p` reads, or that
//!   are graph outputs. A cached cut stores these values per batch.
//!
//! `G` runs from a cut `p` of `B` as the set `R` of its non-constant nodes that are at or
//! after its start, or clean with a twin at or after `p` (and the constant nodes `R`
//! reads), fed the values `R` reads from outside `R`. The cut is usable when every such
//! value is in the cut and is produced in `G` by a clean node (or is a graph input): it is
//! then the value of that node's twin in `B`, equal to `G`'s own. So every node of `R`
//! runs on the values a full run of `G` gives it, and the outputs are those of a full run
//! bit for bit (`tests/reuse.rs` compares them on float-fallback, int16, 4-bit and
//! sensitivity graphs). Among the cached runs and their usable cuts the one with the
//! fewest nodes to run is taken; with none a graph runs in full.
//!
//! **Memory.** The values kept are counted in bytes (`Tensor::nbytes`, summed over the
//! batches; a value shared by several cuts of a run counts once). The budget
//! ([`DEFAULT_BUDGET`], 1 GiB, overridden by the environment variable
//! `QUANTKIT_REUSE_BYTES`, e.g. `512M`, `2G`, `0` to switch reuse off) is split evenly among
//! the runs kept ([`Reuse::new`]'s `runs`). For a run it may keep, the first batch records
//! the size of every value; the cuts are then chosen as `K` windows of equal node count,
//! in each the position whose frontier adds the fewest bytes, for the largest `K`
//! (halving from one cut per node) whose values, scaled from the first batch to all
//! batches by their sample counts, fit the run's share. Nothing fitting means no cut: the
//! later graphs run in full. The first batch records sizes without keeping the values: it
//! keeps only the values of the cuts predicted from the sizes earlier runs' first batches
//! showed (by value name), and runs once more when its own sizes choose cuts it did not
//! keep (the first run; a value whose type changed). So a run holds at most its share of
//! the budget besides what any run holds, where holding every value of the first batch to
//! learn the sizes took several GB on a large model.

use crate::analyze::Feed;
use crate::error::{graph as graph_err, Result};
use quantkit_graph::{execute, execute_with, Graph, GraphError, Node, Tensor, ValueInfo};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Default memory budget of [`Reuse`]: 1 GiB of cached values.
pub const DEFAULT_BUDGET: usize = 1 << 30;

/// Outputs of one graph run: `(name, tensor)` in the graph's output order.
pub type Outputs = Vec<(String, Tensor)>;

/// The budget from `QUANTKIT_REUSE_BYTES` (bytes, or with a `K`, `M` or `G` suffix, powers
/// of 1024), else [`DEFAULT_BUDGET`]. Errors name the variable and its value.
pub fn budget_from_env() -> Result<usize> {
    match std::env::var("QUANTKIT_REUSE_BYTES") {
        Ok(s) => parse_bytes(&s).ok_or_else(|| {
            crate::PtqError::InvalidOption(format!(
                "QUANTKIT_REUSE_BYTES={s}: expected a number of bytes, e.g. 1073741824, 512M or 2G \
                 (0 switches reuse off)"
            ))
        }),
        Err(_) => Ok(DEFAULT_BUDGET),
    }
}

/// `123`, `64K`, `512M`, `2G` (powers of 1024, case-insensitive, an optional `B`/`iB`).
pub fn parse_bytes(s: &str) -> Option<usize> {
    let t = s.trim().to_ascii_uppercase();
    let t = t
        .strip_suffix("IB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(&t);
    let (num, mul) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 1usize << 10),
        'M' => (&t[..t.len() - 1], 1 << 20),
        'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some((v * mul as f64) as usize)
}

fn info(name: &str) -> ValueInfo {
    ValueInfo {
        name: name.to_string(),
        dtype: None,
        onnx_elem_type: 0,
        shape: None,
    }
}

/// Which nodes of `g` are constant (read only initializers and constant nodes' outputs).
fn constant_nodes(g: &Graph) -> Vec<bool> {
    let mut produced: HashSet<&str> = HashSet::new();
    g.nodes
        .iter()
        .map(|n| {
            let c = n
                .reads()
                .iter()
                .all(|v| g.initializers.contains_key(*v) || produced.contains(v));
            if c {
                produced.extend(n.outputs.iter().map(String::as_str));
            }
            c
        })
        .collect()
}

/// Whether a subgraph defines a name the top level also defines: the observer of
/// [`execute_with`] reports subgraph values by name, so values could not be told apart.
fn names_collide(g: &Graph) -> bool {
    let top: HashSet<&str> = g
        .inputs
        .iter()
        .map(|v| v.name.as_str())
        .chain(
            g.nodes
                .iter()
                .flat_map(|n| n.outputs.iter().map(String::as_str)),
        )
        .collect();
    fn walk(g: &Graph, top: &HashSet<&str>) -> bool {
        g.nodes.iter().any(|n| {
            n.subgraphs().into_iter().any(|s| {
                s.inputs.iter().any(|v| top.contains(v.name.as_str()))
                    || s.nodes
                        .iter()
                        .any(|m| m.outputs.iter().any(|o| top.contains(o.as_str())))
                    || walk(s, top)
            })
        })
    }
    walk(g, &top)
}

/// A graph with what the matching needs.
struct Indexed {
    graph: Graph,
    constant: Vec<bool>,
    /// First non-empty output → node index.
    by_output: HashMap<String, usize>,
    /// Per value that can be in a frontier: `(producer + 1, last non-constant reader)`, the
    /// value is in the frontier at cut `q` when `first <= q <= last` (graph inputs have
    /// `first = 0`; graph outputs `last = len`).
    span: HashMap<String, (usize, usize)>,
}

impl Indexed {
    fn new(graph: Graph) -> Indexed {
        let constant = constant_nodes(&graph);
        let mut by_output = HashMap::new();
        let mut span: HashMap<String, (usize, usize)> = HashMap::new();
        for vi in &graph.inputs {
            if !graph.initializers.contains_key(&vi.name) {
                span.insert(vi.name.clone(), (0, 0));
            }
        }
        for (i, n) in graph.nodes.iter().enumerate() {
            if let Some(o) = n.outputs.iter().find(|o| !o.is_empty()) {
                by_output.insert(o.clone(), i);
            }
            if !constant[i] {
                for v in n.reads() {
                    if let Some(s) = span.get_mut(v) {
                        s.1 = s.1.max(i);
                    }
                }
                for o in n.outputs.iter().filter(|o| !o.is_empty()) {
                    span.insert(o.clone(), (i + 1, 0));
                }
            }
        }
        let len = graph.nodes.len();
        for o in &graph.outputs {
            if let Some(s) = span.get_mut(&o.name) {
                s.1 = len;
            }
        }
        // A value nobody reads after its producer is in no frontier.
        span.retain(|_, s| s.1 >= s.0);
        Indexed {
            graph,
            constant,
            by_output,
            span,
        }
    }

    /// Names in the frontier at cut `q`.
    fn frontier(&self, q: usize) -> impl Iterator<Item = &String> {
        self.span
            .iter()
            .filter(move |(_, &(a, b))| a <= q && q <= b)
            .map(|(n, _)| n)
    }
}

/// Per batch: cached values by name.
type Values = Arc<Vec<HashMap<String, Arc<Tensor>>>>;

/// The best plan found so far: run index, cut, nodes to run, which nodes, inputs.
type Best = (usize, usize, usize, Vec<bool>, Vec<String>);

/// A run kept: its graph, the values at its cuts per batch.
struct Cached {
    ix: Indexed,
    /// Cut positions (node indices of the graph, ascending).
    cuts: Vec<usize>,
    /// Per batch: the values of every cut (shared with the sessions running from them, so
    /// evicting a run never pulls values from under a session).
    values: Values,
    bytes: usize,
    pinned: bool,
    used: u64,
}

/// How a session keeps its run for later graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Not kept.
    No,
    /// Kept until [`Reuse::unpin`] (a base every later graph is compared with).
    Pin,
    /// Kept among the most recent runs (evicted oldest first).
    Recent,
}

/// Runs graphs on fixed feeds, each from the nearest cut of a run kept (module docs).
pub struct Reuse<'f> {
    feeds: &'f [Feed],
    budget: usize,
    max_runs: usize,
    runs: Vec<Cached>,
    clock: u64,
    /// Non-constant node evaluations done (summed over batches).
    pub nodes_run: usize,
    /// Non-constant node evaluations full runs would have done for the same batches.
    pub nodes_full: usize,
    /// The most bytes kept at once.
    pub peak_bytes: usize,
    /// Bytes of the values seen in the first batch of earlier runs, by name: the sizes a
    /// new run's cuts are chosen from before its first batch runs.
    sizes: HashMap<String, usize>,
    /// First batches run a second time because the cuts chosen from their real sizes
    /// needed values the sizes known before did not predict.
    pub first_batch_reruns: usize,
    /// The most bytes of values a run held for its cuts in one batch while running it (not
    /// counting the values it computes and frees as any run does).
    pub held_peak_bytes: usize,
}

/// How one graph runs: from which cut of which kept run.
struct Segment {
    /// The values of the cut run from (per batch); `None`: a full run.
    from: Option<Values>,
    /// The graph to execute (the whole graph for a full run).
    sub: Graph,
    /// Inputs of `sub` (names of the cut's values, or the graph inputs).
    inputs: Vec<String>,
    /// Non-constant nodes run per batch, and of the whole graph.
    work: usize,
    full: usize,
}

/// One graph being run batch by batch ([`Reuse::session`]).
pub struct Session {
    ix: Indexed,
    seg: Segment,
    keep: Keep,
    /// Names that may be captured (values available at some possible cut), and the
    /// possible cuts; empty when the run is not kept.
    possible: Vec<usize>,
    capturable: HashSet<String>,
    /// After the first batch: the names kept.
    kept_names: Option<HashSet<String>>,
    cuts: Vec<usize>,
    values: Vec<HashMap<String, Arc<Tensor>>>,
    /// Bytes of each capturable value in the first batch.
    sizes: HashMap<String, usize>,
    batches_done: usize,
    budget: usize,
    scale: f64,
}

impl<'f> Reuse<'f> {
    /// Reuse over `feeds` with `budget` bytes, kept runs at most `runs` (each gets an even
    /// share of the budget).
    pub fn new(feeds: &'f [Feed], budget: usize, runs: usize) -> Self {
        Reuse {
            feeds,
            budget,
            max_runs: runs.max(1),
            runs: Vec::new(),
            clock: 0,
            nodes_run: 0,
            nodes_full: 0,
            peak_bytes: 0,
            sizes: HashMap::new(),
            first_batch_reruns: 0,
            held_peak_bytes: 0,
        }
    }

    /// The feeds.
    pub fn feeds(&self) -> &'f [Feed] {
        self.feeds
    }

    /// Bytes kept now.
    pub fn bytes(&self) -> usize {
        self.runs.iter().map(|r| r.bytes).sum()
    }

    /// Drops the pinned runs.
    pub fn unpin(&mut self) {
        self.runs.retain(|r| !r.pinned);
    }

    /// Prepares `graph` to run batch by batch; `keep` says whether its run is kept for later
    /// graphs (only when every batch runs: [`Reuse::finish`]).
    pub fn session(&mut self, graph: &Graph, keep: Keep) -> Session {
        let ix = Indexed::new(graph.clone());
        let seg = self.plan(&ix);
        let share = self.budget / self.max_runs;
        let keep = if share == 0 || names_collide(&ix.graph) {
            Keep::No
        } else {
            keep
        };
        let mut possible = Vec::new();
        let mut capturable = HashSet::new();
        if keep != Keep::No {
            // Values the run will have: its inputs and the outputs of the nodes it runs.
            let mut avail: HashSet<&str> = seg.inputs.iter().map(String::as_str).collect();
            for n in &seg.sub.nodes {
                avail.extend(n.outputs.iter().map(String::as_str));
            }
            for q in 1..ix.graph.nodes.len() {
                if ix.constant[q] {
                    continue;
                }
                let names: Vec<&String> = ix.frontier(q).collect();
                if names.iter().all(|n| avail.contains(n.as_str())) {
                    possible.push(q);
                    capturable.extend(names.into_iter().cloned());
                }
            }
        }
        let samples = |f: &Feed| {
            f.first()
                .map_or(1, |(_, t)| t.shape.first().copied().unwrap_or(1).max(1))
        };
        let scale = match self.feeds.first() {
            Some(f0) => self.feeds.iter().map(samples).sum::<usize>() as f64 / samples(f0) as f64,
            None => 0.0,
        };
        let mut s = Session {
            ix,
            seg,
            keep,
            possible,
            capturable,
            kept_names: None,
            cuts: Vec::new(),
            values: Vec::new(),
            sizes: HashMap::new(),
            batches_done: 0,
            budget: share,
            scale,
        };
        // Cuts predicted from the sizes earlier first batches showed, so that the first batch
        // keeps only their values (checked against its own sizes when it has run).
        if s.keep != Keep::No
            && s.capturable
                .iter()
                .all(|n| self.sizes.contains_key(n.as_str()))
        {
            s.sizes = s
                .capturable
                .iter()
                .map(|n| (n.clone(), self.sizes[n.as_str()]))
                .collect();
            s.choose_cuts();
        }
        s
    }

    /// Nodes of `g` clean against run `r` (their twin's index), and `g`'s start.
    fn clean(&self, r: &Cached, g: &Indexed) -> Option<(Vec<Option<usize>>, usize)> {
        let b = &r.ix.graph;
        let names = |x: &Graph| x.inputs.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
        if names(&g.graph) != names(b) {
            return None;
        }
        let inputs: HashSet<&str> = g.graph.inputs.iter().map(|v| v.name.as_str()).collect();
        let mut same_init: HashMap<&str, bool> = HashMap::new();
        let mut produced_clean: HashSet<&str> = HashSet::new();
        let mut twin = vec![None; g.graph.nodes.len()];
        let mut start = None;
        for (j, n) in g.graph.nodes.iter().enumerate() {
            let t = n
                .outputs
                .iter()
                .find(|o| !o.is_empty())
                .and_then(|o| r.ix.by_output.get(o))
                .copied()
                .filter(|&i| b.nodes[i] == *n);
            let ok = t.is_some()
                && n.reads().iter().all(|v| {
                    if produced_clean.contains(v) {
                        return true;
                    }
                    let (gi, bi) = (g.graph.initializers.get(*v), b.initializers.get(*v));
                    if gi.is_some() || bi.is_some() {
                        return *same_init.entry(*v).or_insert_with(|| gi == bi);
                    }
                    inputs.contains(v)
                });
            if ok {
                twin[j] = t;
                produced_clean.extend(n.outputs.iter().map(String::as_str));
            } else if !g.constant[j] && start.is_none() {
                start = Some(j);
            }
        }
        Some((twin, start.unwrap_or(g.graph.nodes.len())))
    }

    /// The cheapest way to run `g`: from the usable cut of a kept run with the fewest
    /// nodes to run, else in full.
    fn plan(&mut self, g: &Indexed) -> Segment {
        let len = g.graph.nodes.len();
        let full = g.constant.iter().filter(|c| !**c).count();
        let mut best: Option<Best> = None;
        let outputs: Vec<&str> = g.graph.outputs.iter().map(|o| o.name.as_str()).collect();
        for (ri, r) in self.runs.iter().enumerate() {
            let Some((twin, start)) = self.clean(r, g) else {
                continue;
            };
            let clean_out: HashSet<&str> = g
                .graph
                .nodes
                .iter()
                .zip(&twin)
                .filter(|(_, t)| t.is_some())
                .flat_map(|(n, _)| n.outputs.iter().map(String::as_str))
                .collect();
            let const_out: HashSet<&str> = g
                .graph
                .nodes
                .iter()
                .zip(&g.constant)
                .filter(|(_, c)| **c)
                .flat_map(|(n, _)| n.outputs.iter().map(String::as_str))
                .collect();
            let inputs: HashSet<&str> = g.graph.inputs.iter().map(|v| v.name.as_str()).collect();
            // Latest cuts first: the first usable one runs the fewest nodes.
            for &p in r.cuts.iter().rev() {
                let in_r: Vec<bool> = (0..len)
                    .map(|j| !g.constant[j] && (j >= start || twin[j].is_some_and(|t| t >= p)))
                    .collect();
                let work = in_r.iter().filter(|x| **x).count();
                if best.as_ref().is_some_and(|b| b.2 <= work) || work >= full {
                    break;
                }
                let mut made: HashSet<&str> = HashSet::new();
                for (j, n) in g.graph.nodes.iter().enumerate() {
                    if in_r[j] {
                        made.extend(n.outputs.iter().map(String::as_str));
                    }
                }
                let mut need: Vec<String> = Vec::new();
                let mut ok = true;
                let frontier: HashSet<&str> = r.ix.frontier(p).map(String::as_str).collect();
                let check = |v: &str, need: &mut Vec<String>| {
                    if made.contains(v)
                        || const_out.contains(v)
                        || g.graph.initializers.contains_key(v)
                        || need.iter().any(|x| x == v)
                    {
                        return true;
                    }
                    let from_clean = clean_out.contains(v) || inputs.contains(v);
                    if from_clean && frontier.contains(v) {
                        need.push(v.to_string());
                        true
                    } else {
                        false
                    }
                };
                for (j, n) in g.graph.nodes.iter().enumerate() {
                    if in_r[j] && !n.reads().iter().all(|v| check(v, &mut need)) {
                        ok = false;
                        break;
                    }
                }
                if ok && !outputs.iter().all(|v| check(v, &mut need)) {
                    ok = false;
                }
                if ok {
                    best = Some((ri, p, work, in_r, need));
                    break;
                }
            }
        }
        if let Some((ri, p, work, in_r, need)) = best {
            self.clock += 1;
            self.runs[ri].used = self.clock;
            // The constant nodes the segment reads, found backwards.
            let mut needed: HashSet<&str> = outputs.iter().copied().collect();
            let mut pick = in_r.clone();
            for j in (0..len).rev() {
                let n = &g.graph.nodes[j];
                if in_r[j]
                    || (g.constant[j] && n.outputs.iter().any(|o| needed.contains(o.as_str())))
                {
                    pick[j] = true;
                    needed.extend(n.reads());
                }
            }
            let sub = Graph {
                name: format!("{} [from cut {p}]", g.graph.name),
                nodes: g
                    .graph
                    .nodes
                    .iter()
                    .zip(&pick)
                    .filter(|(_, p)| **p)
                    .map(|(n, _)| n.clone())
                    .collect(),
                inputs: need.iter().map(|n| info(n)).collect(),
                outputs: g.graph.outputs.clone(),
                initializers: g.graph.initializers.clone(),
                opset_imports: g.graph.opset_imports.clone(),
                meta: g.graph.meta.clone(),
                ..Default::default()
            };
            return Segment {
                from: Some(Arc::clone(&self.runs[ri].values)),
                sub,
                inputs: need,
                work,
                full,
            };
        }
        Segment {
            from: None,
            sub: g.graph.clone(),
            inputs: g.graph.inputs.iter().map(|v| v.name.clone()).collect(),
            work: full,
            full,
        }
    }

    /// The inputs of `s`'s segment for batch `bi`.
    fn inputs(&self, s: &Session, bi: usize) -> Feed {
        match &s.seg.from {
            None => self.feeds[bi].clone(),
            Some(values) => {
                let vals = &values[bi];
                s.seg
                    .inputs
                    .iter()
                    .map(|n| (n.clone(), (*vals[n]).clone()))
                    .collect()
            }
        }
    }

    /// Runs batch `bi` of `s`; `observer` sees every value computed (as [`execute_with`]).
    ///
    /// A run that may be kept stores, per batch, the values of its cuts. The cuts are chosen
    /// from the first batch's sizes (module docs); that batch records the size of every value
    /// without keeping it, and keeps only the values of the cuts predicted from the sizes of
    /// earlier runs' first batches. When its own sizes choose cuts whose values it did not
    /// keep (a new graph, or values whose type changed), it runs once more to keep them.
    pub fn batch_with(
        &mut self,
        s: &mut Session,
        bi: usize,
        observer: &mut dyn FnMut(&str, &Tensor),
    ) -> std::result::Result<Outputs, GraphError> {
        let inputs = self.inputs(s, bi);
        let capturing = s.keep != Keep::No;
        let first = capturing && s.batches_done == 0 && bi == 0;
        let mut got: HashMap<String, Arc<Tensor>> = HashMap::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        let outs = if capturing {
            let kept = s.kept_names.clone();
            let wanted = |n: &str| kept.as_ref().is_some_and(|k| k.contains(n));
            for (n, t) in &inputs {
                if first && s.capturable.contains(n) {
                    seen.insert(n.clone(), t.nbytes());
                }
                if wanted(n) {
                    got.insert(n.clone(), Arc::new(t.clone()));
                }
            }
            let capturable = &s.capturable;
            execute_with(&s.seg.sub, inputs, |n, t| {
                observer(n, t);
                if first && capturable.contains(n) {
                    seen.entry(n.to_string()).or_insert_with(|| t.nbytes());
                }
                if wanted(n) && !got.contains_key(n) {
                    got.insert(n.to_string(), Arc::new(t.clone()));
                }
            })?
        } else {
            // Graph inputs are reported by `execute_with` too: keep the observer's view.
            execute_with(&s.seg.sub, inputs, |n, t| observer(n, t))?
        };
        self.nodes_run += s.seg.work;
        self.nodes_full += s.seg.full;
        if capturing {
            if first {
                self.sizes.extend(seen.iter().map(|(n, b)| (n.clone(), *b)));
                s.sizes = seen;
                s.choose_cuts();
                let keep = s.kept_names.clone().unwrap_or_default();
                let held: usize = got.values().map(|t| t.nbytes()).sum();
                self.held_peak_bytes = self.held_peak_bytes.max(held);
                if keep.iter().all(|n| got.contains_key(n)) {
                    got.retain(|n, _| keep.contains(n));
                } else {
                    // The batch again, keeping the values of the cuts chosen.
                    self.first_batch_reruns += 1;
                    self.nodes_run += s.seg.work;
                    got.clear();
                    let inputs = self.inputs(s, bi);
                    for (n, t) in &inputs {
                        if keep.contains(n) {
                            got.insert(n.clone(), Arc::new(t.clone()));
                        }
                    }
                    execute_with(&s.seg.sub, inputs, |n, t| {
                        if keep.contains(n) && !got.contains_key(n) {
                            got.insert(n.to_string(), Arc::new(t.clone()));
                        }
                    })?;
                }
            }
            let held: usize = got.values().map(|t| t.nbytes()).sum();
            self.held_peak_bytes = self.held_peak_bytes.max(held);
            if s.kept_names.as_ref().is_some_and(|k| !k.is_empty()) && bi == s.values.len() {
                s.values.push(got);
            } else {
                s.keep = Keep::No;
            }
        }
        s.batches_done += 1;
        Ok(outs)
    }

    /// [`Reuse::batch_with`] without an observer.
    pub fn batch(
        &mut self,
        s: &mut Session,
        bi: usize,
    ) -> std::result::Result<Outputs, GraphError> {
        self.batch_with(s, bi, &mut |_, _| {})
    }

    /// Runs every batch of `graph` (no run kept).
    pub fn run_all(&mut self, graph: &Graph) -> Result<Vec<Outputs>> {
        let mut s = self.session(graph, Keep::No);
        (0..self.feeds.len())
            .map(|bi| {
                self.batch(&mut s, bi).map_err(graph_err(format!(
                    "running `{}` on evaluation batch {bi}",
                    graph.name
                )))
            })
            .collect()
    }

    /// Whether a run of `graph` is kept.
    pub fn holds(&self, graph: &Graph) -> bool {
        self.runs.iter().any(|r| r.ix.graph == *graph)
    }

    /// Drops the kept runs of `graph`.
    pub fn forget(&mut self, graph: &Graph) {
        self.runs.retain(|r| r.ix.graph != *graph);
    }

    /// [`Reuse::session`] that runs `graph` in full (an observer sees every value).
    pub fn session_full(&mut self, graph: &Graph, keep: Keep) -> Session {
        let saved = std::mem::take(&mut self.runs);
        let s = self.session(graph, keep);
        self.runs = saved;
        s
    }

    /// Ends a session: a run that ran every batch in order and was to be kept is kept
    /// (evicting the least recently used unpinned runs beyond the limit).
    pub fn finish(&mut self, s: Session) {
        if s.keep == Keep::No || s.values.len() != self.feeds.len() || s.cuts.is_empty() {
            return;
        }
        let bytes = s
            .values
            .iter()
            .flat_map(|m| m.values().map(|t| t.nbytes()))
            .sum();
        self.clock += 1;
        self.runs.push(Cached {
            ix: s.ix,
            cuts: s.cuts,
            values: Arc::new(s.values),
            bytes,
            pinned: s.keep == Keep::Pin,
            used: self.clock,
        });
        while self.runs.len() > self.max_runs {
            let Some(i) = self
                .runs
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.pinned)
                .min_by_key(|(_, r)| r.used)
                .map(|(i, _)| i)
            else {
                break;
            };
            self.runs.remove(i);
        }
        self.peak_bytes = self.peak_bytes.max(self.bytes());
    }
}

impl Session {
    /// Chooses the cuts from the first batch's sizes (module docs).
    fn choose_cuts(&mut self) {
        let est = |names: &HashSet<&String>, sizes: &HashMap<String, usize>| -> f64 {
            names
                .iter()
                .map(|n| sizes.get(*n).copied().unwrap_or(0) as f64)
                .sum::<f64>()
        };
        let frontiers: Vec<Vec<&String>> = self
            .possible
            .iter()
            .map(|&q| self.ix.frontier(q).collect())
            .collect();
        let n = self.possible.len();
        let mut k = n;
        let mut chosen: Vec<usize> = Vec::new();
        let mut names: HashSet<&String> = HashSet::new();
        while k >= 1 {
            chosen.clear();
            names.clear();
            let w = n.div_ceil(k);
            for win in (0..n).collect::<Vec<_>>().chunks(w.max(1)) {
                // The position adding the fewest bytes.
                let best = win.iter().copied().min_by(|&a, &b| {
                    let add = |i: usize| {
                        frontiers[i]
                            .iter()
                            .filter(|x| !names.contains(*x))
                            .map(|x| self.sizes.get(*x).copied().unwrap_or(0))
                            .sum::<usize>()
                    };
                    add(a).cmp(&add(b)).then(b.cmp(&a))
                });
                if let Some(i) = best {
                    chosen.push(self.possible[i]);
                    names.extend(frontiers[i].iter().copied());
                }
            }
            if est(&names, &self.sizes) * self.scale <= self.budget as f64 {
                break;
            }
            chosen.clear();
            names.clear();
            k /= 2;
        }
        self.cuts = chosen;
        self.kept_names = Some(names.into_iter().cloned().collect());
    }
}

/// Runs `graph` on every feed without reuse (the reference the tests compare with).
pub fn run_full(graph: &Graph, feeds: &[Feed]) -> Result<Vec<Outputs>> {
    feeds
        .iter()
        .enumerate()
        .map(|(bi, f)| {
            execute(graph, f.clone()).map_err(graph_err(format!(
                "running `{}` on evaluation batch {bi}",
                graph.name
            )))
        })
        .collect()
}

/// Whether two nodes are the same (exposed for tests).
pub fn same_node(a: &Node, b: &Node) -> bool {
    a == b
}
