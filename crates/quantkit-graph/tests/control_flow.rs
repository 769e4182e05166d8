//! Subgraphs (If, Loop, Scan): import/export of nested graphs, the name-scoping rule and
//! the depth cap, outer-scope reads in every "who reads X" query, and execution with the
//! observer seeing values inside subgraphs.

use prost::Message;
use quantkit_graph::onnx::{decode_model, export_model, import_model};
use quantkit_graph::{
    execute, execute_with, passes, AttrValue, DType, Data, Graph, GraphError, Node, OpKind, Tensor,
    Uses, ValueInfo,
};

fn bool_scalar(b: bool) -> Tensor {
    Tensor::new(vec![], Data::Bool(vec![b])).unwrap()
}

/// A subgraph with no inputs computing `out = Op(a, b)`.
fn branch(name: &str, op: OpKind, a: &str, b: &str, out: &str) -> Graph {
    Graph {
        name: name.into(),
        nodes: vec![Node::of(op, &format!("{name}_op"), &[a, b], &[out])],
        outputs: vec![ValueInfo::new(out, DType::F32, &[2])],
        ..Graph::default()
    }
}

/// `y = If(c) { x + w } else { x * w }` with `w` a top-level initializer read only by the
/// branches, then `z = y + 1`.
fn if_model() -> Graph {
    let mut g = Graph {
        name: "if_model".into(),
        inputs: vec![
            ValueInfo::new("c", DType::Bool, &[]),
            ValueInfo::new("x", DType::F32, &[2]),
        ],
        outputs: vec![ValueInfo::new("z", DType::F32, &[2])],
        opset_imports: vec![(String::new(), 17)],
        ..Graph::default()
    };
    g.initializers
        .insert("w".into(), Tensor::from_f32(&[2], vec![10.0, 20.0]));
    g.initializers
        .insert("one".into(), Tensor::from_f32(&[], vec![1.0]));
    g.nodes.push(
        Node::of(OpKind::If, "if", &["c"], &["y"])
            .with_attr(
                "then_branch",
                AttrValue::Graph(Box::new(branch("then", OpKind::Add, "x", "w", "t"))),
            )
            .with_attr(
                "else_branch",
                AttrValue::Graph(Box::new(branch("else", OpKind::Mul, "x", "w", "e"))),
            ),
    );
    g.nodes
        .push(Node::of(OpKind::Add, "add", &["y", "one"], &["z"]));
    g
}

fn round_trip(g: &Graph) -> Result<Graph, GraphError> {
    let bytes = export_model(g).encode_to_vec();
    import_model(&decode_model(&bytes, "mem")?, "mem")
}

#[test]
fn if_runs_the_selected_branch_reading_outer_values() {
    let g = if_model();
    let x = Tensor::from_f32(&[2], vec![1.0, 2.0]);
    for (c, want) in [(true, [12.0, 23.0]), (false, [11.0, 41.0])] {
        let out = execute(
            &g,
            vec![("c".into(), bool_scalar(c)), ("x".into(), x.clone())],
        )
        .unwrap();
        assert_eq!(out[0].1.as_f32().unwrap(), want, "cond {c}");
    }
}

#[test]
fn observer_sees_values_computed_inside_a_branch() {
    let g = if_model();
    let mut seen = Vec::new();
    execute_with(
        &g,
        vec![
            ("c".into(), bool_scalar(true)),
            ("x".into(), Tensor::from_f32(&[2], vec![1.0, 2.0])),
        ],
        |name, t| seen.push((name.to_string(), t.to_f32_vec())),
    )
    .unwrap();
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["c", "x", "t", "y", "z"]);
    assert_eq!(seen[2].1, [11.0, 22.0]);
}

#[test]
fn outer_reads_count_as_reads_in_every_query() {
    let g = if_model();
    // `w` is read only inside the branches: the If node reads it.
    assert_eq!(g.readers("w"), vec![0]);
    assert_eq!(Uses::new(&g).readers("w"), &[0]);
    assert!(Uses::new(&g).readers("x").contains(&0));
    assert_eq!(
        Uses::new(&g).sole_reader("x"),
        None,
        "read inside the branches: no rewrite here may consume it"
    );
    assert_eq!(
        g.nodes[0].outer_reads().into_iter().collect::<Vec<_>>(),
        ["w", "x"]
    );
    let mut pruned = g.clone();
    pruned.prune_initializers();
    assert!(
        pruned.initializers.contains_key("w"),
        "kept: a branch reads it"
    );
    // A name defined inside a branch is taken for the whole model.
    assert_eq!(g.unique_name("t"), "t_1");
    assert_eq!(g.unique_name("fresh"), "fresh");
    // Constant folding keeps the If (it needs the scope) and the initializer it reads.
    let mut folded = g.clone();
    passes::fold_constants(&mut folded).unwrap();
    assert_eq!(folded.nodes.len(), 2);
    assert!(folded.initializers.contains_key("w"));
}

#[test]
fn topological_sort_places_a_node_after_what_its_subgraph_reads() {
    let mut g = if_model();
    // The branch now reads `x2`, produced by a node listed after the If.
    if let Some(AttrValue::Graph(b)) = g.nodes[0].attributes.get_mut(0).map(|(_, v)| v) {
        b.nodes[0].inputs[0] = "x2".into();
    }
    g.nodes
        .push(Node::of(OpKind::Identity, "id", &["x"], &["x2"]));
    passes::topo_sort(&mut g).unwrap();
    let pos = |n: &str| g.nodes.iter().position(|x| x.name == n).unwrap();
    assert!(pos("id") < pos("if"));
}

#[test]
fn nested_subgraphs_round_trip_through_onnx() {
    // A Loop whose body holds an If whose branches read the loop's carried value and a
    // top-level initializer.
    let mut g = if_model();
    let if_node = g.nodes.remove(0);
    g.nodes.clear();
    let mut if_inner = if_node.clone();
    if_inner.inputs = vec!["c_in".into()];
    for sub in if_inner.subgraphs_mut() {
        sub.nodes[0].inputs[0] = "acc_in".into();
    }
    if_inner.outputs = vec!["acc_out".into()];
    let body = Graph {
        name: "body".into(),
        inputs: vec![
            ValueInfo::new("i", DType::I64, &[]),
            ValueInfo::new("c_in", DType::Bool, &[]),
            ValueInfo::new("acc_in", DType::F32, &[2]),
        ],
        outputs: vec![
            ValueInfo::new("c_in", DType::Bool, &[]),
            ValueInfo::new("acc_out", DType::F32, &[2]),
            ValueInfo::new("acc_out", DType::F32, &[2]),
        ],
        nodes: vec![if_inner],
        ..Graph::default()
    };
    g.inputs.insert(0, ValueInfo::new("m", DType::I64, &[]));
    g.nodes.push(
        Node::of(OpKind::Loop, "loop", &["m", "c", "x"], &["y", "ys"])
            .with_attr("body", AttrValue::Graph(Box::new(body))),
    );
    g.nodes
        .push(Node::of(OpKind::Add, "add", &["y", "one"], &["z"]));
    g.outputs.push(ValueInfo::new("ys", DType::F32, &[3, 2]));
    let back = round_trip(&g).unwrap();
    assert_eq!(back.nodes.len(), 2);
    let l = &back.nodes[0];
    assert_eq!(l.subgraphs().count(), 1);
    let b = l.subgraphs().next().unwrap();
    assert_eq!(b.nodes[0].subgraphs().count(), 2);
    assert_eq!(
        b.nodes[0]
            .subgraphs()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["then", "else"]
    );
    assert_eq!(b.outer_reads().into_iter().collect::<Vec<_>>(), ["w"]);
    assert!(back.initializers.contains_key("w"));
    // Exported again, the bytes are the same (the IR keeps what it read).
    assert_eq!(
        export_model(&back).encode_to_vec(),
        export_model(&round_trip(&back).unwrap()).encode_to_vec()
    );
    // It runs: 3 iterations of acc + w (condition true).
    let out = execute(
        &back,
        vec![
            ("m".into(), Tensor::from_i64(&[], vec![3])),
            ("c".into(), bool_scalar(true)),
            ("x".into(), Tensor::from_f32(&[2], vec![1.0, 2.0])),
        ],
    )
    .unwrap();
    assert_eq!(out[0].1.as_f32().unwrap(), [32.0, 63.0]);
    assert_eq!(out[1].1.shape, [3, 2]);
    assert_eq!(
        out[1].1.as_f32().unwrap(),
        [11.0, 22.0, 21.0, 42.0, 31.0, 62.0]
    );
    // The observer sees the body's values on every iteration.
    let mut n_acc = 0;
    execute_with(
        &back,
        vec![
            ("m".into(), Tensor::from_i64(&[], vec![3])),
            ("c".into(), bool_scalar(true)),
            ("x".into(), Tensor::from_f32(&[2], vec![1.0, 2.0])),
        ],
        |name, _| n_acc += usize::from(name == "acc_out"),
    )
    .unwrap();
    assert_eq!(n_acc, 3);
}

/// `depth` Ifs nested in then-branches (each else-branch is a leaf, so the model stays
/// linear in `depth`).
fn nested_ifs(depth: usize) -> Graph {
    let mut inner = branch("leaf", OpKind::Add, "x", "x", &format!("v{depth}"));
    for d in (0..depth).rev() {
        let out = format!("v{d}");
        let node = Node::of(OpKind::If, &format!("if{d}"), &["c"], &[&out])
            .with_attr("then_branch", AttrValue::Graph(Box::new(inner)))
            .with_attr(
                "else_branch",
                AttrValue::Graph(Box::new(branch(
                    &format!("else{d}"),
                    OpKind::Mul,
                    "x",
                    "x",
                    &format!("e{d}"),
                ))),
            );
        inner = Graph {
            name: format!("g{d}"),
            nodes: vec![node],
            outputs: vec![ValueInfo::new(&out, DType::F32, &[2])],
            ..Graph::default()
        };
    }
    Graph {
        inputs: vec![
            ValueInfo::new("c", DType::Bool, &[]),
            ValueInfo::new("x", DType::F32, &[2]),
        ],
        opset_imports: vec![(String::new(), 17)],
        ..inner
    }
}

#[test]
fn subgraph_depth_is_capped_at_import() {
    let ok = round_trip(&nested_ifs(quantkit_graph::ir::MAX_SUBGRAPH_DEPTH)).unwrap();
    let out = execute(
        &ok,
        vec![
            ("c".into(), bool_scalar(true)),
            ("x".into(), Tensor::from_f32(&[2], vec![1.0, 2.0])),
        ],
    )
    .unwrap();
    assert_eq!(out[0].1.as_f32().unwrap(), [2.0, 4.0]);
    let err = round_trip(&nested_ifs(quantkit_graph::ir::MAX_SUBGRAPH_DEPTH + 1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("deeper than 30"), "{err}");
    assert!(err.contains("node `if30`"), "{err}");
}

#[test]
fn a_subgraph_redefining_an_outer_name_is_rejected() {
    let mut g = if_model();
    // The then-branch now defines `z`, the outer graph's output.
    if let Some(AttrValue::Graph(b)) = g.nodes[0].attributes.get_mut(0).map(|(_, v)| v) {
        b.nodes[0].outputs[0] = "z".into();
        b.outputs[0].name = "z".into();
    }
    let err = round_trip(&g).unwrap_err().to_string();
    assert!(err.contains("node `if`") && err.contains("`z`"), "{err}");
    assert!(err.contains("shadowing"), "{err}");
}

#[test]
fn bad_control_flow_inputs_are_errors_naming_the_node() {
    let g = if_model();
    let err = execute(
        &g,
        vec![
            ("c".into(), bool_scalar(true)),
            ("x".into(), Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0])),
        ],
    );
    assert!(err.is_err(), "x declared [2]");
    // A condition of two elements.
    let mut g2 = if_model();
    g2.inputs[0] = ValueInfo::new("c", DType::Bool, &[2]);
    let err = execute(
        &g2,
        vec![
            (
                "c".into(),
                Tensor::new(vec![2], Data::Bool(vec![true, false])).unwrap(),
            ),
            ("x".into(), Tensor::from_f32(&[2], vec![1.0, 2.0])),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("`if`") && err.contains("one element"), "{err}");
    // A Loop with neither trip count nor condition never ends: an error, not a hang.
    let body = Graph {
        inputs: vec![
            ValueInfo::new("i", DType::I64, &[]),
            ValueInfo::new("ci", DType::Bool, &[]),
        ],
        outputs: vec![ValueInfo::new("ci", DType::Bool, &[])],
        ..Graph::default()
    };
    let g3 = Graph {
        inputs: vec![],
        outputs: vec![],
        nodes: vec![Node::of(OpKind::Loop, "forever", &["", ""], &[])
            .with_attr("body", AttrValue::Graph(Box::new(body)))],
        opset_imports: vec![(String::new(), 17)],
        ..Graph::default()
    };
    let err = execute(&g3, vec![]).unwrap_err().to_string();
    assert!(
        err.contains("`forever`") && err.contains("never ends"),
        "{err}"
    );
}

/// `y, ys = Loop(m, cond, x) { acc + w }` with the trip count `m` a constant.
fn counted_loop(cond: &str) -> Graph {
    let mut g = if_model();
    g.nodes.clear();
    g.initializers
        .insert("m".into(), Tensor::from_i64(&[], vec![3]));
    let body = Graph {
        name: "body".into(),
        inputs: vec![
            ValueInfo::new("i", DType::I64, &[]),
            ValueInfo::new("c_in", DType::Bool, &[]),
            ValueInfo::new("acc_in", DType::F32, &[2]),
        ],
        outputs: vec![
            ValueInfo::new("c_in", DType::Bool, &[]),
            ValueInfo::new("acc_out", DType::F32, &[2]),
            ValueInfo::new("acc_out", DType::F32, &[2]),
        ],
        nodes: vec![Node::of(OpKind::Add, "acc", &["acc_in", "w"], &["acc_out"])],
        ..Graph::default()
    };
    g.nodes.push(
        Node::of(OpKind::Loop, "loop", &["m", cond, "x"], &["y", "ys"])
            .with_attr("body", AttrValue::Graph(Box::new(body))),
    );
    g.outputs = vec![ValueInfo::new("y", DType::F32, &[2])];
    g
}

#[test]
fn loop_shapes_are_inferred_where_determinable() {
    let infos = |g: &Graph| -> Vec<(String, Option<Vec<usize>>)> {
        passes::infer_value_infos(g)
            .unwrap()
            .into_iter()
            .map(|v| (v.name.clone(), v.static_shape()))
            .collect()
    };
    // A constant trip count and no condition: the loop runs 3 times.
    assert_eq!(
        infos(&counted_loop("")),
        [("y".into(), Some(vec![2])), ("ys".into(), Some(vec![3, 2]))]
    );
    // With a condition the number of iterations is unknown: only the carried value.
    assert_eq!(infos(&counted_loop("c")), [("y".into(), Some(vec![2]))]);
    let out = execute(
        &counted_loop(""),
        vec![
            ("c".into(), bool_scalar(true)),
            ("x".into(), Tensor::from_f32(&[2], vec![1.0, 2.0])),
        ],
    )
    .unwrap();
    assert_eq!(out[0].1.as_f32().unwrap(), [31.0, 62.0]);
}

/// `QUANTKIT_LIMITS=nesting=N` lowers the depth cap. The limits are read once per process,
/// so the test reruns itself in a child process with the variable set.
#[test]
fn nesting_limit_lowers_the_depth_cap() {
    if std::env::var("QUANTKIT_LIMITS").as_deref() == Ok("nesting=2") {
        round_trip(&nested_ifs(2)).expect("depth 2 is within nesting=2");
        let err = round_trip(&nested_ifs(3)).unwrap_err().to_string();
        assert!(err.contains("deeper than 2"), "{err}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["nesting_limit_lowers_the_depth_cap", "--exact"])
        .env("QUANTKIT_LIMITS", "nesting=2")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child: {text}");
    assert!(text.contains("1 passed"), "the child ran the test: {text}");
}
