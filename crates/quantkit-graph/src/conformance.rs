//! Conformance runner for the ONNX node-test layout: `CASE/model.onnx` plus
//! `CASE/test_data_set_N/{input_K.pb, output_K.pb}`.
//!
//! A case passes when every output of every data set matches: integer and boolean outputs
//! exactly, float outputs within `|y − ref| ≤ atol + rtol·|ref|` (rtol 1e-3, atol 1e-5,
//! ONNX's defaults for model tests; NaN matches NaN). A case is `unsupported` when it needs
//! an operator or element type this crate does not implement; it is then never run.
//!
//! A case is `excluded` (not run, and outside the pass-rate measure) when it needs what
//! quantkit deliberately does not model: string tensors, sequence/map/optional values, the
//! training operators (Adagrad, Adam, Momentum, Gradient) or random numbers (Bernoulli,
//! RandomNormal*, RandomUniform*, Multinomial, and Dropout in training mode with a
//! non-zero ratio). [`excluded_reason`] decides it from the model file alone, except for
//! the training-mode Dropout cases, which are recognised by name
//! (`test_training_dropout*` other than `*zero_ratio*`): whether their mask is random
//! depends on input data, not on the graph.

use crate::error::{GraphError, OpError};
use crate::onnx::proto;
use crate::onnx::{decode_model, import_model, load_tensor_pb};
use crate::tensor::Tensor;
use serde::Serialize;
use std::path::Path;

/// Relative tolerance for float outputs.
pub const RTOL: f64 = 1e-3;
/// Absolute tolerance for float outputs.
pub const ATOL: f64 = 1e-5;

/// Outcome of one case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// All outputs matched.
    Passed,
    /// Ran and mismatched, or failed with an error.
    Failed,
    /// Needs an operator or type that is not implemented; not run.
    Unsupported,
    /// Needs strings, sequences/maps/optionals, training operators or random numbers:
    /// outside what quantkit models, not run and not counted (see the module docs).
    Excluded,
}

/// Result of one case.
#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    /// Case folder name.
    pub name: String,
    /// Outcome.
    pub status: Status,
    /// Largest absolute difference over all outputs (`None` if nothing was compared).
    pub max_error: Option<f64>,
    /// Why it failed or is unsupported (empty on success).
    pub message: String,
}

/// Results of a whole folder.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Per-case results, sorted by name.
    pub cases: Vec<CaseResult>,
    /// Number passed.
    pub passed: usize,
    /// Number failed.
    pub failed: usize,
    /// Number unsupported (skipped).
    pub unsupported: usize,
    /// Number excluded from the measure (see [`Status::Excluded`]).
    pub excluded: usize,
}

fn is_unsupported(e: &GraphError) -> bool {
    matches!(
        e,
        GraphError::UnknownOp { .. }
            | GraphError::UnsupportedType { .. }
            | GraphError::Op {
                source: OpError::Unsupported(_),
                ..
            }
    )
}

/// Runs every case folder under `dir` (folders without `model.onnx` are ignored).
pub fn run_dir(dir: &Path) -> Result<Report, GraphError> {
    let io = |source| GraphError::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("model.onnx").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let cases: Vec<CaseResult> = names.iter().map(|n| run_case(&dir.join(n))).collect();
    let count = |s| cases.iter().filter(|c| c.status == s).count();
    Ok(Report {
        passed: count(Status::Passed),
        failed: count(Status::Failed),
        unsupported: count(Status::Unsupported),
        excluded: count(Status::Excluded),
        cases,
    })
}

/// Runs one case folder.
pub fn run_case(case: &Path) -> CaseResult {
    let name = case
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut max_error: Option<f64> = None;
    let mut excluded = None;
    let outcome = (|| -> Result<Option<String>, GraphError> {
        let path = case.join("model.onnx");
        let what = path.display().to_string();
        let bytes = std::fs::read(&path).map_err(|source| GraphError::Io {
            path: what.clone(),
            source,
        })?;
        let model = decode_model(&bytes, &what)?;
        excluded = excluded_reason(&model).or_else(|| {
            (name.starts_with("test_training_dropout") && !name.contains("zero_ratio")).then(|| {
                "Dropout in training mode with a non-zero ratio draws a random mask".into()
            })
        });
        if excluded.is_some() {
            return Ok(None);
        }
        let graph = import_model(&model, &what)?;
        crate::exec::plan(&graph)?;
        let mut sets: Vec<_> = std::fs::read_dir(case)
            .map_err(|source| GraphError::Io {
                path: case.display().to_string(),
                source,
            })?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.is_dir()
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_"))
            })
            .collect();
        sets.sort();
        if sets.is_empty() {
            return Ok(Some("no test_data_set_* folder".into()));
        }
        for set in sets {
            let mut inputs = Vec::new();
            for (k, vi) in graph.inputs.iter().enumerate() {
                let p = set.join(format!("input_{k}.pb"));
                if !p.exists() {
                    continue;
                }
                let (_, t) = load_tensor_pb(&p)?;
                inputs.push((vi.name.clone(), t));
            }
            let outputs = crate::exec::execute(&graph, inputs)?;
            for (k, (oname, got)) in outputs.iter().enumerate() {
                let p = set.join(format!("output_{k}.pb"));
                if !p.exists() {
                    continue;
                }
                let (_, want) = load_tensor_pb(&p)?;
                let (ok, err, why) = compare(got, &want);
                max_error = Some(max_error.map_or(err, |m: f64| m.max(err)));
                if !ok {
                    let set_name = set
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned();
                    return Ok(Some(format!("{set_name}, output `{oname}`: {why}")));
                }
            }
        }
        Ok(None)
    })();
    let (status, message) = match outcome {
        _ if excluded.is_some() => (Status::Excluded, excluded.unwrap_or_default()),
        Ok(None) => (Status::Passed, String::new()),
        Ok(Some(m)) => (Status::Failed, m),
        Err(e) if is_unsupported(&e) => (Status::Unsupported, e.to_string()),
        Err(e) => (Status::Failed, e.to_string()),
    };
    CaseResult {
        name,
        status,
        max_error,
        message,
    }
}

/// Operators of the training domain (`ai.onnx.preview.training`).
const TRAINING_OPS: [&str; 4] = ["Adagrad", "Adam", "Momentum", "Gradient"];
/// Operators that draw random numbers.
const RANDOM_OPS: [&str; 6] = [
    "Bernoulli",
    "Multinomial",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
];
/// Operators whose inputs or outputs are sequences or optionals.
const SEQUENCE_OPS: [&str; 12] = [
    "ConcatFromSequence",
    "Optional",
    "OptionalGetElement",
    "OptionalHasElement",
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceErase",
    "SequenceInsert",
    "SequenceLength",
    "SequenceMap",
    "SplitToSequence",
];
/// ONNX's element type code of `string`.
const STRING: i32 = 8;

/// Why a model is outside the conformance measure, if it is: it holds string tensors,
/// sequence/map/optional values, training operators or random-number operators, at any
/// subgraph depth.
pub fn excluded_reason(model: &proto::ModelProto) -> Option<String> {
    model.graph.as_ref().and_then(|g| excluded_in_graph(g, 0))
}

fn excluded_type(t: &proto::TypeProto) -> Option<&'static str> {
    use proto::type_proto::Value;
    match t.value.as_ref()? {
        Value::TensorType(tt) if tt.elem_type == Some(STRING) => Some("string tensors"),
        Value::SequenceType(_) => Some("sequence values"),
        Value::MapType(_) => Some("map values"),
        Value::OptionalType(_) => Some("optional values"),
        _ => None,
    }
}

fn excluded_in_graph(g: &proto::GraphProto, depth: usize) -> Option<String> {
    // Nesting past this is left to the importer, which rejects it with its own error.
    if depth > 64 {
        return None;
    }
    let infos = g.input.iter().chain(&g.output).chain(&g.value_info);
    for vi in infos {
        if let Some(why) = vi.r#type.as_ref().and_then(excluded_type) {
            return Some(format!(
                "needs {why} (`{}`)",
                vi.name.as_deref().unwrap_or("")
            ));
        }
    }
    if let Some(t) = g.initializer.iter().find(|t| t.data_type == Some(STRING)) {
        return Some(format!(
            "needs string tensors (initializer `{}`)",
            t.name.as_deref().unwrap_or("")
        ));
    }
    for n in &g.node {
        let op = n.op_type.as_deref().unwrap_or("");
        let why = if TRAINING_OPS.contains(&op) {
            Some("is a training operator")
        } else if RANDOM_OPS.contains(&op) {
            Some("draws random numbers")
        } else if SEQUENCE_OPS.contains(&op) {
            Some("works on sequence or optional values")
        } else {
            None
        };
        if let Some(why) = why {
            return Some(format!("`{op}` {why}"));
        }
        for a in &n.attribute {
            let strings = a.t.as_ref().is_some_and(|t| t.data_type == Some(STRING))
                || (op == "Cast"
                    && a.name.as_deref() == Some("to")
                    && a.i == Some(i64::from(STRING)));
            if strings {
                return Some(format!("needs string tensors (node `{op}`)"));
            }
            let subgraphs = a.g.as_deref().into_iter().chain(&a.graphs);
            for sub in subgraphs {
                if let Some(why) = excluded_in_graph(sub, depth + 1) {
                    return Some(why);
                }
            }
        }
    }
    None
}

/// Narrow float outputs (bfloat16, float8, float4) are codes of a rounding the spec fixes
/// exactly, so they must match bit for bit; only a NaN matches any NaN.
fn compare_codes(got: &Tensor, want: &Tensor) -> (bool, f64, String) {
    let (gv, wv) = (got.to_f64_vec(), want.to_f64_vec());
    let codes = |t: &Tensor| -> Vec<u32> {
        match &t.data {
            crate::tensor::Data::U8(v) => v.iter().map(|&c| u32::from(c)).collect(),
            crate::tensor::Data::U16(v) => v.iter().map(|&c| u32::from(c)).collect(),
            _ => Vec::new(),
        }
    };
    let (gc, wc) = (codes(got), codes(want));
    if gc.len() != gv.len() || wc.len() != wv.len() {
        return (false, f64::INFINITY, "unexpected storage".into());
    }
    let mut max_err = 0f64;
    let mut bad = None;
    for i in 0..gc.len() {
        let (a, b) = (gv[i], wv[i]);
        if gc[i] == wc[i] || (a.is_nan() && b.is_nan()) {
            continue;
        }
        let err = if a == b { 0.0 } else { (a - b).abs() };
        max_err = max_err.max(if err.is_nan() { f64::INFINITY } else { err });
        bad.get_or_insert_with(|| {
            format!(
                "element {i}: {a} (code {:#x}) vs reference {b} (code {:#x})",
                gc[i], wc[i]
            )
        });
    }
    match bad {
        None => (true, 0.0, String::new()),
        Some(why) => (false, max_err, why),
    }
}

/// Compares an output with its reference: (matches, max abs error, explanation).
pub fn compare(got: &Tensor, want: &Tensor) -> (bool, f64, String) {
    if got.dtype != want.dtype {
        return (
            false,
            f64::INFINITY,
            format!("dtype {} instead of {}", got.dtype, want.dtype),
        );
    }
    if got.shape != want.shape {
        return (
            false,
            f64::INFINITY,
            format!("shape {:?} instead of {:?}", got.shape, want.shape),
        );
    }
    if got.dtype.is_narrow_float() {
        return compare_codes(got, want);
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let float = got.dtype.is_float();
    let (gi, wi) = if float {
        (Vec::new(), Vec::new())
    } else {
        (got.to_i64_vec(), want.to_i64_vec())
    };
    let mut max_err = 0f64;
    let mut bad = None;
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        if a.is_nan() && b.is_nan() {
            continue;
        }
        let err = if a == b { 0.0 } else { (a - b).abs() };
        let err = if err.is_nan() { f64::INFINITY } else { err };
        max_err = max_err.max(err);
        let ok = if float {
            err <= ATOL + RTOL * b.abs()
        } else {
            gi[i] == wi[i]
        };
        if !ok && bad.is_none() {
            bad = Some(format!("element {i}: {a} vs reference {b}"));
        }
    }
    match bad {
        None => (true, max_err, String::new()),
        Some(why) => (
            false,
            max_err,
            format!("{why} (max abs error {max_err:.3e})"),
        ),
    }
}

impl Report {
    /// The one-line summary: `N passed, M failed` plus `, K skipped` when some were skipped
    /// and `, E excluded (pass rate P % of the rest)` when some were excluded.
    pub fn summary(&self) -> String {
        let mut s = format!("{} passed, {} failed", self.passed, self.failed);
        if self.unsupported > 0 {
            s.push_str(&format!(", {} skipped", self.unsupported));
        }
        if self.excluded > 0 {
            s.push_str(&format!(
                ", {} excluded (pass rate {:.1} % of the other {})",
                self.excluded,
                100.0 * self.pass_rate(),
                self.measured()
            ));
        }
        s
    }

    /// Cases inside the measure: all but the excluded ones.
    pub fn measured(&self) -> usize {
        self.cases.len() - self.excluded
    }

    /// Passed cases over [`Report::measured`] (0 when nothing is measured).
    pub fn pass_rate(&self) -> f64 {
        match self.measured() {
            0 => 0.0,
            m => self.passed as f64 / m as f64,
        }
    }

    /// A Markdown page with one table row per case (CONFORMANCE.md).
    pub fn to_markdown(&self, source: &str) -> String {
        let mut s = String::from("# ONNX conformance\n\n");
        s.push_str(&format!(
            "Generated by `quantkit conformance {source} --markdown CONFORMANCE.md`. Float outputs must match within rtol {RTOL:e}, atol {ATOL:e}; integer outputs exactly. `unsupported` cases need an operator or element type quantkit does not implement and are not run; `excluded` cases need string tensors, sequence/map/optional values, training operators or random numbers, are not run and are not counted in the pass rate.\n\n**{}**\n\n",
            self.summary()
        ));
        s.push_str("| case | status | max abs error | note |\n|---|---|---|---|\n");
        for c in &self.cases {
            let st = match c.status {
                Status::Passed => "passed",
                Status::Failed => "**failed**",
                Status::Unsupported => "unsupported",
                Status::Excluded => "excluded",
            };
            let err = c
                .max_error
                .map(|e| format!("{e:.2e}"))
                .unwrap_or_else(|| "–".into());
            s.push_str(&format!(
                "| {} | {st} | {err} | {} |\n",
                c.name,
                c.message.replace('|', "\\|").replace('\n', " ")
            ));
        }
        s
    }
}
