//! `QGemm` (com.microsoft) is exact: per-tensor without bias it equals `QLinearMatMul` bit
//! for bit, and per-column with an int32 bias and `transB` it equals an i64 reference written
//! out here from the formula in `ops/qgemm.rs`.

use quantkit_graph::ops::{lookup, OpCtx};
use quantkit_graph::{AttrValue, DType, Data, Node, OpError, Tensor};

fn lcg(n: usize, seed: u64, lo: i64, hi: i64) -> Vec<i64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + ((s >> 33) as i64).rem_euclid(hi - lo + 1)
        })
        .collect()
}

fn u8t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::new(
        shape.to_vec(),
        Data::U8(v.iter().map(|&x| x as u8).collect()),
    )
    .unwrap()
}

fn i8t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::new(
        shape.to_vec(),
        Data::I8(v.iter().map(|&x| x as i8).collect()),
    )
    .unwrap()
}

fn run(op: &str, domain: &str, node: &Node, inputs: &[Option<&Tensor>]) -> Result<Tensor, OpError> {
    let f = lookup(domain, op).expect("registered");
    let ctx = OpCtx { node, opset: 13 };
    f(&ctx, inputs).map(|mut v| v.remove(0))
}

fn qgemm_node(trans_b: bool) -> Node {
    let mut n = Node::new("qg", "QGemm", &[], &["y"]);
    n.domain = "com.microsoft".into();
    n.with_attr("transB", AttrValue::Int(i64::from(trans_b)))
}

#[test]
fn qgemm_per_tensor_equals_qlinear_matmul() {
    // K = 257 stresses accumulation; zero points at both ends of the range.
    for (m, k, n, a_zp, y_zp) in [(1, 1, 1, 0, 255), (3, 257, 5, 255, 0), (7, 16, 9, 128, 3)] {
        let a = u8t(&[m, k], &lcg(m * k, 1, 0, 255));
        let b = i8t(&[k, n], &lcg(k * n, 2, -127, 127));
        let (a_s, b_s, y_s) = (
            Tensor::from_f32(&[], vec![0.02]),
            Tensor::from_f32(&[], vec![0.003]),
            Tensor::from_f32(&[], vec![0.05 * (k as f32).sqrt()]),
        );
        let (az, bz, yz) = (u8t(&[], &[a_zp]), i8t(&[], &[0]), u8t(&[], &[y_zp]));
        let ins = [
            Some(&a),
            Some(&a_s),
            Some(&az),
            Some(&b),
            Some(&b_s),
            Some(&bz),
        ];
        let mut q = ins.to_vec();
        q.extend([Some(&y_s), Some(&yz)]);
        let want = run(
            "QLinearMatMul",
            "",
            &Node::new("m", "QLinearMatMul", &[], &["y"]),
            &q,
        )
        .unwrap();
        let mut g = ins.to_vec();
        g.extend([None, Some(&y_s), Some(&yz)]);
        let got = run("QGemm", "com.microsoft", &qgemm_node(false), &g).unwrap();
        assert_eq!(got.dtype, DType::U8);
        assert_eq!(got, want, "m={m} k={k} n={n}");
    }
}

#[test]
fn qgemm_per_column_bias_trans_b_matches_reference() {
    let (m, k, n) = (5, 33, 6);
    let av = lcg(m * k, 3, -128, 127);
    let bv = lcg(n * k, 4, -127, 127); // [N, K] (transB)
    let cv = lcg(n, 5, -20000, 20000);
    let a_s = 0.04f32;
    let b_s: Vec<f32> = (0..n).map(|j| 0.001 * (j as f32 + 1.0)).collect();
    let (y_s, a_zp, y_zp) = (0.3f32, -7i64, -128i64);
    let a = i8t(&[m, k], &av);
    let b = i8t(&[n, k], &bv);
    let c = Tensor::new(vec![n], Data::I32(cv.iter().map(|&x| x as i32).collect())).unwrap();
    let (ast, bst, yst) = (
        Tensor::from_f32(&[], vec![a_s]),
        Tensor::from_f32(&[n], b_s.clone()),
        Tensor::from_f32(&[], vec![y_s]),
    );
    let (az, bz, yz) = (i8t(&[], &[a_zp]), i8t(&[n], &vec![0; n]), i8t(&[], &[y_zp]));
    let got = run(
        "QGemm",
        "com.microsoft",
        &qgemm_node(true),
        &[
            Some(&a),
            Some(&ast),
            Some(&az),
            Some(&b),
            Some(&bst),
            Some(&bz),
            Some(&c),
            Some(&yst),
            Some(&yz),
        ],
    )
    .unwrap();
    let Data::I8(got) = &got.data else {
        panic!("{:?}", got.dtype)
    };
    let mut steps = 0;
    for i in 0..m {
        for j in 0..n {
            let acc: i64 = (0..k)
                .map(|p| (av[i * k + p] - a_zp) * bv[j * k + p])
                .sum::<i64>()
                + cv[j];
            let mult = f64::from((a_s * b_s[j]) / y_s);
            let want =
                ((acc as f64 * mult + y_zp as f64).round_ties_even() as i64).clamp(-128, 127);
            assert_eq!(i64::from(got[i * n + j]), want, "({i}, {j})");
            steps += usize::from(want > -128 && want < 127);
        }
    }
    assert!(
        steps > m * n / 2,
        "most outputs should be unsaturated ({steps})"
    );
    // Without y_scale the output is the float acc · a_scale · b_scale[j].
    let f = run(
        "QGemm",
        "com.microsoft",
        &qgemm_node(true),
        &[
            Some(&a),
            Some(&ast),
            Some(&az),
            Some(&b),
            Some(&bst),
            Some(&bz),
            Some(&c),
        ],
    )
    .unwrap();
    let fv = f.to_f32_vec();
    for j in 0..n {
        let acc: i64 = (0..k).map(|p| (av[p] - a_zp) * bv[j * k + p]).sum::<i64>() + cv[j];
        assert_eq!(fv[j], (acc as f64 * f64::from(a_s * b_s[j])) as f32);
    }
}

#[test]
fn qgemm_rejects_bad_shapes() {
    let a = u8t(&[2, 3], &[0; 6]);
    let b = i8t(&[4, 5], &[0; 20]);
    let s = Tensor::from_f32(&[], vec![1.0]);
    let (az, bz) = (u8t(&[], &[0]), i8t(&[], &[0]));
    let e = run(
        "QGemm",
        "com.microsoft",
        &qgemm_node(false),
        &[Some(&a), Some(&s), Some(&az), Some(&b), Some(&s), Some(&bz)],
    )
    .unwrap_err();
    assert!(matches!(e, OpError::ShapeMismatch { .. }), "{e}");
    let b = i8t(&[3, 5], &[0; 15]);
    let bs3 = Tensor::from_f32(&[3], vec![1.0; 3]);
    let e = run(
        "QGemm",
        "com.microsoft",
        &qgemm_node(false),
        &[
            Some(&a),
            Some(&s),
            Some(&az),
            Some(&b),
            Some(&bs3),
            Some(&bz),
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("b_scale"), "{e}");
}
