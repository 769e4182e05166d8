//! Bad input to the shape and indexing operators (Tile, GatherElements, ScatterND, TopK,
//! OneHot, DepthToSpace...) through the executor: each is a `GraphError::Op` naming the
//! node, never a panic or an allocation abort, also when the bad operand is a constant that
//! import folds.

use quantkit_graph::{
    execute, export_model, import_model, AttrValue, DType, Data, Graph, GraphError, Node, Tensor,
    ValueInfo,
};

/// An output of unknown type and shape.
fn untyped(name: &str) -> ValueInfo {
    ValueInfo {
        name: name.to_string(),
        dtype: None,
        onnx_elem_type: 0,
        shape: None,
    }
}

/// A one-node graph whose inputs are all graph inputs fed with `feeds`.
fn run(node: Node, feeds: Vec<(&str, Tensor)>, opset: i64) -> GraphError {
    let g = Graph {
        inputs: feeds
            .iter()
            .map(|(n, t)| ValueInfo::new(n, t.dtype, &t.shape))
            .collect(),
        outputs: node.outputs.iter().map(|o| untyped(o)).collect(),
        opset_imports: vec![(String::new(), opset)],
        nodes: vec![node],
        ..Graph::default()
    };
    let feeds = feeds.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    execute(&g, feeds).expect_err("bad input must fail")
}

/// Checks the error names `node` and its message contains `what`.
fn names(err: GraphError, node: &str, what: &str) {
    let msg = err.to_string();
    match &err {
        GraphError::Op { node: n, .. } => assert_eq!(n, node, "{msg}"),
        other => panic!("expected an operator error, got {other:?}"),
    }
    assert!(msg.contains(node) && msg.contains(what), "{msg}");
}

fn x23() -> Tensor {
    Tensor::from_f32(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

fn i64s(shape: &[usize], v: Vec<i64>) -> Tensor {
    Tensor::from_i64(shape, v)
}

#[test]
fn absurd_tile_repeats_are_an_error_not_an_allocation() {
    let n = Node::new("tile_huge", "Tile", &["x", "r"], &["y"]);
    let r = i64s(&[2], vec![1 << 40, 1 << 40]);
    names(
        run(n, vec![("x", x23()), ("r", r)], 13),
        "tile_huge",
        "elements",
    );
    let n = Node::new("tile_overflow", "Tile", &["x", "r"], &["y"]);
    let r = i64s(&[2], vec![i64::MAX, i64::MAX]);
    names(
        run(n, vec![("x", x23()), ("r", r)], 13),
        "tile_overflow",
        "Tile",
    );
    let n = Node::new("tile_rank", "Tile", &["x", "r"], &["y"]);
    let r = i64s(&[3], vec![1, 1, 1]);
    names(
        run(n, vec![("x", x23()), ("r", r)], 13),
        "tile_rank",
        "repeats",
    );
}

#[test]
fn out_of_range_indices_name_the_node() {
    let n =
        Node::new("ge", "GatherElements", &["x", "i"], &["y"]).with_attr("axis", AttrValue::Int(1));
    let i = i64s(&[1, 1], vec![3]);
    names(
        run(n, vec![("x", x23()), ("i", i)], 13),
        "ge",
        "out of range",
    );
    let n = Node::new("gnd", "GatherND", &["x", "i"], &["y"]);
    let i = i64s(&[1, 2], vec![0, -4]);
    names(
        run(n, vec![("x", x23()), ("i", i)], 13),
        "gnd",
        "out of range",
    );
    let n = Node::new("snd", "ScatterND", &["x", "i", "u"], &["y"]);
    let (i, u) = (
        i64s(&[1, 1], vec![2]),
        Tensor::from_f32(&[1, 3], vec![0.0; 3]),
    );
    names(
        run(n, vec![("x", x23()), ("i", i), ("u", u)], 18),
        "snd",
        "out of range",
    );
    let n = Node::new("se", "ScatterElements", &["x", "i", "u"], &["y"]);
    let (i, u) = (
        i64s(&[1, 1], vec![-3]),
        Tensor::from_f32(&[1, 1], vec![0.0]),
    );
    names(
        run(n, vec![("x", x23()), ("i", i), ("u", u)], 18),
        "se",
        "out of range",
    );
}

#[test]
fn wrong_ranks_axes_and_attributes_name_the_node() {
    let n = Node::new("tk", "TopK", &["x", "k"], &["v", "i"]);
    names(
        run(n, vec![("x", x23()), ("k", i64s(&[1], vec![4]))], 11),
        "tk",
        "k = 4",
    );
    let n =
        Node::new("tk_axis", "TopK", &["x", "k"], &["v", "i"]).with_attr("axis", AttrValue::Int(2));
    names(
        run(n, vec![("x", x23()), ("k", i64s(&[1], vec![1]))], 11),
        "tk_axis",
        "axis 2",
    );
    let n =
        Node::new("oh", "OneHot", &["i", "d", "v"], &["y"]).with_attr("axis", AttrValue::Int(3));
    let feeds = vec![
        ("i", i64s(&[2], vec![0, 1])),
        ("d", i64s(&[], vec![3])),
        ("v", Tensor::from_f32(&[2], vec![0.0, 1.0])),
    ];
    names(run(n, feeds, 11), "oh", "axis");
    let n =
        Node::new("d2s", "DepthToSpace", &["x"], &["y"]).with_attr("blocksize", AttrValue::Int(2));
    let x = Tensor::from_f32(&[1, 3, 1, 1], vec![0.0; 3]);
    names(run(n, vec![("x", x)], 13), "d2s", "divisible");
    let n = Node::new("tri", "Trilu", &["x"], &["y"]);
    let x = Tensor::from_f32(&[3], vec![0.0; 3]);
    names(run(n, vec![("x", x)], 14), "tri", "rank");
    let n = Node::new("cmp", "Compress", &["x", "c"], &["y"]).with_attr("axis", AttrValue::Int(-3));
    let c = Tensor::new(vec![1], Data::Bool(vec![true])).unwrap();
    names(run(n, vec![("x", x23()), ("c", c)], 11), "cmp", "axis");
    let n = Node::new("eye", "EyeLike", &["x"], &["y"]);
    let x = Tensor::zeros(DType::F32, &[2, 2, 2]);
    names(run(n, vec![("x", x)], 9), "eye", "2-D");
    let n = Node::new("ccp", "CenterCropPad", &["x", "s"], &["y"]);
    let s = i64s(&[2], vec![1 << 40, 1 << 40]);
    names(run(n, vec![("x", x23()), ("s", s)], 18), "ccp", "elements");
}

#[test]
fn a_constant_absurd_repeat_fails_at_import_naming_the_node() {
    // Import folds nodes whose inputs are all constant (and whose outputs are not graph
    // outputs): the same checks apply there.
    let mut g = Graph {
        outputs: vec![untyped("y")],
        opset_imports: vec![(String::new(), 13)],
        nodes: vec![
            Node::new("tile_const", "Tile", &["x", "r"], &["t"]),
            Node::new("id", "Identity", &["t"], &["y"]),
        ],
        ..Graph::default()
    };
    g.initializers.insert("x".into(), x23());
    g.initializers
        .insert("r".into(), i64s(&[2], vec![1 << 31, 1 << 31]));
    let err = import_model(&export_model(&g), "tile_const").expect_err("must fail");
    names(err, "tile_const", "elements");
}
