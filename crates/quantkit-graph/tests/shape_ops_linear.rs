//! The indexing operators on a million elements: linear work finishes in milliseconds, a
//! scan per index (quadratic) would not finish at all, so these pin the complexity without
//! timing anything. Each also checks values, so a fast wrong answer fails too.

use quantkit_graph::ops::{
    compress, gather_elements, gather_nd, scatter_elements, scatter_nd, tile, top_k, unique, OpCtx,
};
use quantkit_graph::{AttrValue, Data, Node, Tensor};

const N: usize = 1 << 20;

fn ctx(n: &Node, opset: i64) -> OpCtx<'_> {
    OpCtx { node: n, opset }
}

fn ramp() -> Tensor {
    Tensor::from_f32(&[N], (0..N).map(|v| v as f32).collect())
}

#[test]
fn gathers_and_scatters_a_million_indices() {
    let x = ramp();
    let rev = Tensor::from_i64(&[N], (0..N as i64).map(|i| -1 - i).collect());
    let n = Node::new("g", "GatherElements", &["x", "i"], &["y"]);
    let y = gather_elements::eval(&ctx(&n, 13), &[Some(&x), Some(&rev)]).unwrap();
    let y = y[0].as_f32().unwrap();
    assert_eq!((y[0], y[N - 1]), ((N - 1) as f32, 0.0));
    let n = Node::new("s", "ScatterElements", &["x", "i", "u"], &["y"])
        .with_attr("reduction", AttrValue::String(b"add".to_vec()));
    let y = scatter_elements::eval(&ctx(&n, 18), &[Some(&x), Some(&rev), Some(&x)]).unwrap();
    let y = y[0].as_f32().unwrap();
    assert!(y.iter().all(|&v| v == (N - 1) as f32));
    let tuples = Tensor::from_i64(&[N, 1], (0..N as i64).rev().collect());
    let n = Node::new("g", "GatherND", &["x", "i"], &["y"]);
    let y = gather_nd::eval(&ctx(&n, 13), &[Some(&x), Some(&tuples)]).unwrap();
    assert_eq!(y[0].as_f32().unwrap()[0], (N - 1) as f32);
    let n = Node::new("s", "ScatterND", &["x", "i", "u"], &["y"]);
    let y = scatter_nd::eval(&ctx(&n, 18), &[Some(&x), Some(&tuples), Some(&x)]).unwrap();
    assert_eq!(y[0].as_f32().unwrap()[N - 1], 0.0);
}

#[test]
fn selects_sorts_and_tiles_a_million_elements() {
    let x = ramp();
    let k = Tensor::from_i64(&[1], vec![5]);
    let n = Node::new("t", "TopK", &["x", "k"], &["v", "i"]);
    let y = top_k::eval(&ctx(&n, 11), &[Some(&x), Some(&k)]).unwrap();
    assert_eq!(
        y[1].to_i64_vec(),
        (N as i64 - 5..N as i64).rev().collect::<Vec<_>>()
    );
    let dup = Tensor::from_i64(&[N], (0..N as i64).map(|v| v % 1000).collect());
    let n = Node::new("u", "Unique", &["x"], &["y", "i", "v", "c"]);
    let y = unique::eval(&ctx(&n, 11), &[Some(&dup)]).unwrap();
    assert_eq!(y[0].len(), 1000);
    assert_eq!(y[3].to_i64_vec().iter().sum::<i64>(), N as i64);
    let c = Tensor::new(vec![N], Data::Bool((0..N).map(|i| i % 2 == 0).collect())).unwrap();
    let n = Node::new("c", "Compress", &["x", "c"], &["y"]).with_attr("axis", AttrValue::Int(0));
    let y = compress::eval(&ctx(&n, 11), &[Some(&x), Some(&c)]).unwrap();
    assert_eq!(y[0].len(), N / 2);
    let one = Tensor::from_f32(&[1, 1], vec![7.0]);
    let r = Tensor::from_i64(&[2], vec![1024, 1024]);
    let n = Node::new("t", "Tile", &["x", "r"], &["y"]);
    let y = tile::eval(&ctx(&n, 13), &[Some(&one), Some(&r)]).unwrap();
    assert!(y[0].len() == N && y[0].as_f32().unwrap().iter().all(|&v| v == 7.0));
}
