//! The shape rules of the spatial operators agree with their evaluation: for every
//! committed node-suite case of those operators (tests/data/onnx-node-extra), the rule,
//! given the case's input shapes and its inputs as constants, predicts the dtype and shape
//! of the expected output.

use quantkit_graph::ops::Info;
use quantkit_graph::{load_model, load_tensor_pb, shape_infer, OpKind, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

/// The operators whose rule must give an answer when every input is known.
const RULED: &[OpKind] = &[
    OpKind::Resize,
    OpKind::GridSample,
    OpKind::AffineGrid,
    OpKind::RoiAlign,
    OpKind::MaxRoiPool,
    OpKind::LpPool,
    OpKind::Col2Im,
    OpKind::DeformConv,
    OpKind::Upsample,
];

#[test]
fn spatial_shape_rules_predict_the_expected_outputs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/onnx-node-extra");
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let case = e.path();
        if !case.join("model.onnx").exists() {
            continue;
        }
        let g = load_model(case.join("model.onnx")).unwrap();
        let [node] = &g.nodes[..] else { continue };
        let Some(kind) = OpKind::of(&node.domain, &node.op_type) else {
            continue;
        };
        if !RULED.contains(&kind) {
            continue;
        }
        let opset = g.opset();
        let set = case.join("test_data_set_0");
        let mut consts: BTreeMap<String, Tensor> = g.initializers.clone();
        for (k, vi) in g.inputs.iter().enumerate() {
            let p = set.join(format!("input_{k}.pb"));
            if p.exists() {
                consts.insert(vi.name.clone(), load_tensor_pb(&p).unwrap().1);
            }
        }
        let infos: Vec<Option<Info>> = node
            .inputs
            .iter()
            .map(|n| consts.get(n).map(|t| (t.dtype, t.shape.clone())))
            .collect();
        let ins: Vec<Option<&Info>> = infos.iter().map(|i| i.as_ref()).collect();
        let got = shape_infer::infer(node, opset, &ins, &consts)
            .unwrap_or_else(|| panic!("{}: no shape from the rule", case.display()));
        let (_, want) = load_tensor_pb(set.join("output_0.pb")).unwrap();
        assert_eq!(
            got[0],
            (want.dtype, want.shape.clone()),
            "{}",
            case.display()
        );
        checked += 1;
    }
    assert!(checked >= 80, "only {checked} cases checked");
}
