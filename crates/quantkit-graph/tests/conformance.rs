//! Runs the ONNX node conformance vectors in ../shared/conformance/onnx-node and checks the
//! acceptance thresholds of issue 5.

mod common;

use quantkit_graph::conformance::{run_dir, Status};

fn is_quant_case(name: &str) -> bool {
    ["quantizelinear", "qlinear", "matmulinteger", "convinteger"]
        .iter()
        .any(|k| name.contains(k))
}

fn is_exotic_type_case(name: &str) -> bool {
    ["e4m3", "e5m2", "float4", "int2", "uint2", "e8m0"]
        .iter()
        .any(|k| name.contains(k))
}

#[test]
fn onnx_node_conformance() {
    let Some(dir) = common::shared("conformance/onnx-node") else {
        return;
    };
    let report = run_dir(&dir).expect("conformance folder readable");
    for c in &report.cases {
        if c.status != Status::Passed {
            eprintln!("{:?} {} {:?} {}", c.status, c.name, c.max_error, c.message);
        }
    }
    eprintln!("{}", report.summary());
    let mut float_total = 0;
    let mut float_pass = 0;
    let mut exotic = 0;
    for c in &report.cases {
        if is_exotic_type_case(&c.name) {
            // float8/float4/2-bit QuantizeLinear/DequantizeLinear: the IR holds these types
            // since the "types" work, so they must pass like every quantization case.
            exotic += 1;
            assert_eq!(
                c.status,
                Status::Passed,
                "float8/float4/2-bit case {} must pass: {}",
                c.name,
                c.message
            );
        } else if is_quant_case(&c.name) {
            assert_eq!(
                c.status,
                Status::Passed,
                "quantization case {} must pass: {}",
                c.name,
                c.message
            );
        } else {
            float_total += 1;
            float_pass += (c.status == Status::Passed) as usize;
        }
    }
    assert!(float_total > 0);
    assert!(exotic > 0, "no float8/float4/2-bit case found");
    let rate = float_pass as f64 / float_total as f64;
    assert!(
        rate >= 0.95,
        "float-operator pass rate {float_pass}/{float_total} = {rate:.3} < 0.95"
    );
}
