//! Runs the ONNX node test cases committed in tests/data/onnx-node-extra (operators beyond
//! the shared conformance subset; see the README there) and requires every one to pass.

use quantkit_graph::conformance::{run_dir, Status};
use std::path::Path;

#[test]
fn every_committed_onnx_node_case_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/onnx-node-extra");
    let report = run_dir(&dir).expect("tests/data/onnx-node-extra readable");
    let bad: Vec<String> = report
        .cases
        .iter()
        .filter(|c| c.status != Status::Passed)
        .map(|c| format!("{:?} {} {:?} {}", c.status, c.name, c.max_error, c.message))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(
        !report.cases.is_empty(),
        "no cases found in {}",
        dir.display()
    );
}
