//! The per-tensor 8- and 16-bit QuantizeLinear fast path against the generic
//! element-by-element path, on values that exercise rounding ties, saturation, infinities
//! and NaN; and the per-tensor DequantizeLinear fast path against the spec formula.

use quantkit_graph::ops::{dequantize_linear, quantize_linear, OpCtx};
use quantkit_graph::{Data, Node, Tensor};

#[test]
fn per_tensor_quantize_fast_path_equals_generic_path() {
    let node = Node::new("q", "QuantizeLinear", &["x", "s", "z"], &["y"]);
    let ctx = OpCtx {
        node: &node,
        opset: 19,
    };
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut x: Vec<f32> = (0..4000).map(|_| (next() - 0.5) * 600.0).collect();
    // Exact halves (ties) at scale 0.5 and 1, huge and special values.
    x.extend((-600..600).map(|i| i as f32 * 0.25));
    x.extend([
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        1e30,
        -1e30,
        4_194_304.5,
        -8_388_607.0,
        f32::MIN_POSITIVE,
    ]);
    let xt = Tensor::from_f32(&[x.len()], x.clone());
    // Ties of the 16-bit range and just beyond it at scale 1.
    x.extend((-70_000..70_000).map(|i| i as f32 * 0.5));
    for scale in [0.5f32, 1.0, 0.0123, 3.7, 1e-30, 0.004, 3.1e-5] {
        let s = Tensor::scalar_f32(scale);
        for z in [
            Tensor::new(vec![], Data::U8(vec![0])).unwrap(),
            Tensor::new(vec![], Data::U8(vec![128])).unwrap(),
            Tensor::new(vec![], Data::U8(vec![255])).unwrap(),
            Tensor::new(vec![], Data::I8(vec![0])).unwrap(),
            Tensor::new(vec![], Data::I8(vec![-128])).unwrap(),
            Tensor::new(vec![], Data::I8(vec![77])).unwrap(),
            Tensor::new(vec![], Data::U16(vec![0])).unwrap(),
            Tensor::new(vec![], Data::U16(vec![32_768])).unwrap(),
            Tensor::new(vec![], Data::U16(vec![65_535])).unwrap(),
            Tensor::new(vec![], Data::I16(vec![0])).unwrap(),
            Tensor::new(vec![], Data::I16(vec![-32_768])).unwrap(),
            Tensor::new(vec![], Data::I16(vec![32_767])).unwrap(),
            Tensor::new(vec![], Data::I16(vec![-5])).unwrap(),
        ] {
            let ins = [Some(&xt), Some(&s), Some(&z)];
            let fast = quantize_linear::eval_with(&ctx, &ins, false).unwrap();
            let generic = quantize_linear::eval_with(&ctx, &ins, true).unwrap();
            assert_eq!(fast[0].dtype, generic[0].dtype);
            assert_eq!(
                fast[0].to_i64_vec(),
                generic[0].to_i64_vec(),
                "scale {scale}, zero point {:?}",
                z.to_i64_vec()
            );
        }
    }
}

#[test]
fn per_tensor_dequantize_is_the_spec_formula() {
    let node = Node::new("dq", "DequantizeLinear", &["x", "s", "z"], &["y"]);
    let ctx = OpCtx {
        node: &node,
        opset: 19,
    };
    let s = Tensor::scalar_f32(0.037);
    let codes: Vec<u8> = (0..=255).collect();
    let xt = Tensor::new(vec![256], Data::U8(codes.clone())).unwrap();
    let z = Tensor::new(vec![], Data::U8(vec![131])).unwrap();
    let y = dequantize_linear::eval(&ctx, &[Some(&xt), Some(&s), Some(&z)]).unwrap();
    let want: Vec<f32> = codes.iter().map(|&q| (q as f32 - 131.0) * 0.037).collect();
    assert_eq!(y[0].as_f32().unwrap(), want.as_slice());
    let xi = Tensor::new(
        vec![256],
        Data::I8(codes.iter().map(|&q| q as i8).collect()),
    )
    .unwrap();
    let zi = Tensor::new(vec![], Data::I8(vec![-5])).unwrap();
    let y = dequantize_linear::eval(&ctx, &[Some(&xi), Some(&s), Some(&zi)]).unwrap();
    let want: Vec<f32> = codes
        .iter()
        .map(|&q| (q as i8 as f32 + 5.0) * 0.037)
        .collect();
    assert_eq!(y[0].as_f32().unwrap(), want.as_slice());
}

/// The 16-bit per-tensor DequantizeLinear (W8A16/W16A16 activations) on every code, against
/// `(q − z) · s` in i64 then f32, at zero points at both ends of the range.
#[test]
fn per_tensor_dequantize_16bit_is_the_spec_formula() {
    let node = Node::new("dq", "DequantizeLinear", &["x", "s", "z"], &["y"]);
    let ctx = OpCtx {
        node: &node,
        opset: 21,
    };
    let s = Tensor::scalar_f32(3.1e-5);
    let spec = |q: i64, z: i64| ((q - z) as f32 * 3.1e-5f32).to_bits();
    let codes: Vec<u16> = (0..=u16::MAX).collect();
    let xt = Tensor::new(vec![codes.len()], Data::U16(codes.clone())).unwrap();
    for z in [0u16, 1, 32_768, 65_535] {
        let zt = Tensor::new(vec![], Data::U16(vec![z])).unwrap();
        let y = dequantize_linear::eval(&ctx, &[Some(&xt), Some(&s), Some(&zt)]).unwrap();
        let got: Vec<u32> = y[0].as_f32().unwrap().iter().map(|v| v.to_bits()).collect();
        let want: Vec<u32> = codes.iter().map(|&q| spec(q.into(), z.into())).collect();
        assert_eq!(got, want, "u16, zero point {z}");
    }
    let codes: Vec<i16> = (i16::MIN..=i16::MAX).collect();
    let xt = Tensor::new(vec![codes.len()], Data::I16(codes.clone())).unwrap();
    for z in [i16::MIN, -5, 0, i16::MAX] {
        let zt = Tensor::new(vec![], Data::I16(vec![z])).unwrap();
        let y = dequantize_linear::eval(&ctx, &[Some(&xt), Some(&s), Some(&zt)]).unwrap();
        let got: Vec<u32> = y[0].as_f32().unwrap().iter().map(|v| v.to_bits()).collect();
        let want: Vec<u32> = codes.iter().map(|&q| spec(q.into(), z.into())).collect();
        assert_eq!(got, want, "i16, zero point {z}");
    }
}

/// DynamicQuantizeLinear's vectorised arithmetic against the ONNX spec written out plainly
/// (sequential min/max folds, `round_ties_even`), on ties, signed zeros, subnormal ranges,
/// huge ranges, lengths around the eight-lane split, infinities and NaN.
#[test]
fn dynamic_quantize_equals_the_spec_formula() {
    use quantkit_graph::ops::dynamic_quantize_linear::quantize;
    let spec = |v: &[f32]| -> (Vec<u8>, f32, u8) {
        let maxx = v.iter().copied().fold(0f32, f32::max);
        let minx = v.iter().copied().fold(0f32, f32::min);
        let scale = if maxx == minx { 1.0 } else { maxx - minx } / 255.0;
        let zp = (0.0 - minx / scale).clamp(0.0, 255.0).round_ties_even();
        let q = v
            .iter()
            .map(|&t| ((t / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8)
            .collect();
        (q, scale, zp as u8)
    };
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut cases: Vec<Vec<f32>> = Vec::new();
    for (len, lo, hi) in [
        (1, -1.0, 1.0),
        (7, 0.5, 3.0),
        (8, -3.0, -0.5),
        (9, -1e-3, 2e-3),
        (100, -5.0, 5.0),
        (1001, -1e30, 1e30),
        (33, -1e-40, 1e-40), // subnormal range: the scale underflows
    ] {
        cases.push((0..len).map(|_| lo + (hi - lo) * next()).collect());
    }
    cases.push((0..=510).map(|i| i as f32 * 0.5 - 127.5).collect()); // exact ties
    cases.push(vec![-0.0, 0.0, -0.0, 1.0, 0.0, -0.0, 0.0, -0.0, 2.0]);
    cases.push(vec![0.0; 17]);
    cases.push(vec![
        1.0,
        f32::NAN,
        -2.0,
        3.0,
        0.5,
        0.25,
        -1.0,
        4.0,
        f32::NAN,
        7.0,
    ]);
    cases.push(vec![
        1.0,
        f32::INFINITY,
        -2.0,
        3.0,
        0.5,
        0.25,
        -1.0,
        4.0,
        9.0,
    ]);
    cases.push(vec![
        1.0,
        f32::NEG_INFINITY,
        -2.0,
        3.0,
        0.5,
        0.25,
        -1.0,
        4.0,
        9.0,
    ]);
    for v in cases {
        let (q, s, z) = quantize(&v);
        let (rq, rs, rz) = spec(&v);
        assert_eq!(s.to_bits(), rs.to_bits(), "scale of {v:?}");
        assert_eq!(z, rz, "zero point of {v:?}");
        assert_eq!(q, rq, "codes of {v:?}");
    }
}
