//! The integer engine's profile, shared by `quantkit run --engine int8 --profile` and
//! `quantkit bench MODEL --int8 Q.onnx --profile`: time per step and per operator kind, with
//! float islands (the graph crate's operator on dequantized values) marked.
//!
//! Each step's time is the median over the profiled runs of that step's wall time, so one
//! slow run (a page fault, another process) does not move a step; the total is the sum of
//! the step medians, which is close to a median run.

use anyhow::Result;
use quantkit_engine::{Plan, StepKind, StepTime};
use quantkit_graph::Tensor;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;

/// Median per-step times of a plan over several runs.
pub struct EngineProfile {
    /// One entry per step, in execution order (median seconds).
    pub steps: Vec<StepTime>,
    /// Runs measured.
    pub runs: usize,
}

impl EngineProfile {
    /// Runs `plan` on `inputs` at least `min_runs` times and for at least `seconds`
    /// (after one warm-up run), keeping each step's median time.
    pub fn measure(
        plan: &Plan,
        inputs: &[(String, Tensor)],
        min_runs: usize,
        seconds: f64,
    ) -> Result<EngineProfile> {
        plan.run_timed(inputs.to_vec())?;
        let start = Instant::now();
        let mut all: Vec<Vec<StepTime>> = Vec::new();
        while all.len() < min_runs.max(1) || start.elapsed().as_secs_f64() < seconds {
            all.push(plan.run_timed(inputs.to_vec())?.1);
            if all.len() >= 10_000 {
                break;
            }
        }
        let mut steps = all[0].clone();
        for (i, s) in steps.iter_mut().enumerate() {
            let mut v: Vec<f64> = all
                .iter()
                .filter_map(|r| r.get(i))
                .map(|t| t.seconds)
                .collect();
            v.sort_by(f64::total_cmp);
            s.seconds = v[v.len() / 2];
        }
        Ok(EngineProfile {
            steps,
            runs: all.len(),
        })
    }

    /// Total of the step medians.
    pub fn total(&self) -> f64 {
        self.steps.iter().map(|s| s.seconds).sum()
    }

    /// `(kind, op_type) → (seconds, steps)`, slowest first.
    pub fn by_op(&self) -> Vec<((StepKind, String), f64, usize)> {
        let mut m: BTreeMap<(StepKind, String), (f64, usize)> = BTreeMap::new();
        for s in &self.steps {
            let e = m.entry((s.kind, s.op_type.clone())).or_default();
            e.0 += s.seconds;
            e.1 += 1;
        }
        let mut v: Vec<_> = m.into_iter().map(|(k, (s, n))| (k, s, n)).collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }

    /// Seconds and step count per [`StepKind`].
    pub fn by_kind(&self) -> Vec<(StepKind, f64, usize)> {
        [StepKind::Integer, StepKind::Convert, StepKind::Float]
            .into_iter()
            .map(|k| {
                let it = self.steps.iter().filter(|s| s.kind == k);
                (k, it.clone().map(|s| s.seconds).sum(), it.count())
            })
            .collect()
    }

    /// Prints the per-kind summary, the per-operator table and the `top` slowest steps.
    pub fn print(&self, top: usize) {
        let total = self.total().max(1e-12);
        println!(
            "integer engine profile: {} steps, median of {} runs per step, sum {:.3} ms",
            self.steps.len(),
            self.runs,
            total * 1e3
        );
        for (k, s, n) in self.by_kind() {
            let what = match k {
                StepKind::Integer => "integer steps",
                StepKind::Convert => "Q/DQ conversions",
                StepKind::Float => "float islands (graph operators)",
            };
            println!(
                "  {what:<32} {n:>5} {:>10.3} ms {:>5.1}%",
                s * 1e3,
                100.0 * s / total
            );
        }
        println!(
            "{:<6} {:<24} {:>6} {:>10} {:>6}",
            "kind", "op", "steps", "ms", "%"
        );
        for ((k, op), s, n) in self.by_op() {
            println!(
                "{:<6} {op:<24} {n:>6} {:>10.3} {:>5.1}%",
                k.label(),
                s * 1e3,
                100.0 * s / total
            );
        }
        let mut idx: Vec<usize> = (0..self.steps.len()).collect();
        idx.sort_by(|&a, &b| self.steps[b].seconds.total_cmp(&self.steps[a].seconds));
        println!("slowest steps:");
        for &i in idx.iter().take(top) {
            let s = &self.steps[i];
            println!(
                "  #{i:<4} {:<6} {:>9.3} ms  {}: {}",
                s.kind.label(),
                s.seconds * 1e3,
                s.node,
                s.kernel
            );
        }
    }

    /// The profile as JSON: totals per kind, per operator, and every step.
    pub fn to_json(&self) -> Value {
        json!({
            "runs": self.runs,
            "total_seconds": self.total(),
            "by_kind": self.by_kind().iter().map(|(k, s, n)| json!({
                "kind": kind_name(*k), "seconds": s, "steps": n,
            })).collect::<Vec<_>>(),
            "by_op": self.by_op().iter().map(|((k, op), s, n)| json!({
                "kind": kind_name(*k), "op_type": op, "seconds": s, "steps": n,
            })).collect::<Vec<_>>(),
            "steps": self.steps.iter().map(|s| json!({
                "node": s.node, "op_type": s.op_type, "kernel": s.kernel,
                "kind": kind_name(s.kind), "seconds": s.seconds,
            })).collect::<Vec<_>>(),
        })
    }
}

fn kind_name(k: StepKind) -> &'static str {
    match k {
        StepKind::Integer => "integer",
        StepKind::Convert => "convert",
        StepKind::Float => "float_island",
    }
}
