//! `QLinearMatMul` with per-column `b_scale`/`b_zero_point` (allowed by the ONNX spec,
//! written by the QOperator pass for per-channel weights): column `j` equals the per-tensor
//! operator run on column `j` alone with `b_scale[j]`, `b_zero_point[j]`, bit for bit.

use quantkit_graph::ops::{lookup, OpCtx};
use quantkit_graph::{Data, Node, OpError, Tensor};

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

fn qlmm(inputs: &[&Tensor]) -> Result<Tensor, OpError> {
    let node = Node::new("m", "QLinearMatMul", &[], &["y"]);
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    lookup("", "QLinearMatMul").unwrap()(
        &OpCtx {
            node: &node,
            opset: 13,
        },
        &ins,
    )
    .map(|mut v| v.remove(0))
}

#[test]
fn per_column_equals_per_tensor_column_by_column() {
    for (m, k, n) in [(1, 1, 2), (4, 63, 7), (3, 300, 16)] {
        let a = u8t(&[m, k], &lcg(m * k, 1, 0, 255));
        let bv = lcg(k * n, 2, -128, 127);
        let b = i8t(&[k, n], &bv);
        let scales: Vec<f32> = (0..n).map(|j| 0.0007 * (j as f32 + 1.0)).collect();
        let zps: Vec<i64> = (0..n).map(|j| [-128, 0, 127, 5][j % 4]).collect();
        let (a_s, y_s) = (
            Tensor::from_f32(&[], vec![0.01]),
            Tensor::from_f32(&[], vec![0.02 * (k as f32).sqrt()]),
        );
        let (az, yz) = (u8t(&[], &[7]), u8t(&[], &[120]));
        let b_s = Tensor::from_f32(&[n], scales.clone());
        let b_zp = i8t(&[n], &zps);
        let got = qlmm(&[&a, &a_s, &az, &b, &b_s, &b_zp, &y_s, &yz]).unwrap();
        assert_eq!(got.shape, [m, n]);
        let got = got.to_i64_vec();
        for j in 0..n {
            let col: Vec<i64> = (0..k).map(|p| bv[p * n + j]).collect();
            let bj = i8t(&[k, 1], &col);
            let sj = Tensor::from_f32(&[], vec![scales[j]]);
            let zj = i8t(&[], &[zps[j]]);
            let want = qlmm(&[&a, &a_s, &az, &bj, &sj, &zj, &y_s, &yz])
                .unwrap()
                .to_i64_vec();
            for i in 0..m {
                assert_eq!(got[i * n + j], want[i], "m={m} k={k} n={n} ({i}, {j})");
            }
        }
    }
}

#[test]
fn per_column_parameters_must_match_the_columns() {
    let a = u8t(&[2, 3], &[0; 6]);
    let b = i8t(&[3, 4], &[0; 12]);
    let s = Tensor::from_f32(&[], vec![1.0]);
    let z = u8t(&[], &[0]);
    let bz = i8t(&[], &[0]);
    let s3 = Tensor::from_f32(&[3], vec![1.0; 3]);
    let e = qlmm(&[&a, &s, &z, &b, &s3, &bz, &s, &z]).unwrap_err();
    assert!(matches!(e, OpError::ShapeMismatch { .. }), "{e}");
    let a2 = Tensor::from_f32(&[2], vec![1.0; 2]);
    let e = qlmm(&[&a, &a2, &z, &b, &s, &bz, &s, &z]).unwrap_err();
    assert!(matches!(e, OpError::Unsupported(_)), "{e}");
}
