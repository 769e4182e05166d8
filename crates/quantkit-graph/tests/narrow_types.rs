//! The narrow element types (bfloat16, float8, float4, int4/int2) in the IR: their ONNX
//! storage (packing order), Cast/CastLike/BitCast/QuantizeLinear/DequantizeLinear on them
//! beyond what the node suite covers, errors on bad attributes, and the executor refusing
//! them to operators that do not handle them.

use quantkit_graph::conformance::compare;
use quantkit_graph::onnx::{tensor_from_proto, tensor_to_proto};
use quantkit_graph::ops::{bit_cast, cast, cast_like, dequantize_linear, quantize_linear, OpCtx};
use quantkit_graph::{
    execute, AttrValue, DType, Data, Graph, GraphError, Node, OpError, Tensor, ValueInfo,
};

fn t(dtype: DType, shape: &[usize], data: Data) -> Tensor {
    Tensor::new(shape.to_vec(), data).unwrap().with_dtype(dtype)
}

fn ctx(node: &Node) -> OpCtx<'_> {
    OpCtx { node, opset: 25 }
}

fn cast_node(to: DType) -> Node {
    Node::new("c", "Cast", &["x"], &["y"]).with_attr("to", AttrValue::Int(to.onnx_code().into()))
}

#[test]
fn sub_byte_types_pack_low_bits_first() {
    // onnx.numpy_helper.from_array(np.array([1, -2, -1, 0, 1], ml_dtypes.int2)).raw_data
    let i2 = t(DType::I2, &[5], Data::I8(vec![1, -2, -1, 0, 1]));
    let p = tensor_to_proto("x", &i2);
    assert_eq!(p.raw_data.as_deref(), Some(&[0x39u8, 0x01][..]));
    assert_eq!(tensor_from_proto(&p).unwrap(), i2);
    let u4 = t(DType::U4, &[3], Data::U8(vec![1, 15, 7]));
    let p = tensor_to_proto("x", &u4);
    assert_eq!(p.raw_data.as_deref(), Some(&[0xF1u8, 0x07][..]));
    assert_eq!(tensor_from_proto(&p).unwrap(), u4);
    // Every type, odd lengths, every code.
    let cases = [
        t(DType::U2, &[7], Data::U8(vec![0, 1, 2, 3, 3, 2, 1])),
        t(DType::I4, &[3], Data::I8(vec![-8, 7, -1])),
        t(DType::F4E2M1, &[16], Data::U8((0..16).collect())),
        t(DType::F8E4M3FN, &[256], Data::U8((0..=255).collect())),
        t(DType::F8E5M2FNUZ, &[2, 2], Data::U8(vec![0, 0x80, 0x7F, 1])),
        t(DType::F8E8M0, &[2], Data::U8(vec![127, 0xFF])),
        t(DType::BF16, &[2], Data::U16(vec![0x3F80, 0xC000])),
    ];
    for c in cases {
        let back = tensor_from_proto(&tensor_to_proto("x", &c)).unwrap();
        assert_eq!(back, c, "{}", c.dtype);
    }
    // A wrong byte count is an error naming the tensor, not a panic.
    let mut p = tensor_to_proto("w", &t(DType::I2, &[5], Data::I8(vec![0; 5])));
    p.raw_data = Some(vec![0]);
    let e = tensor_from_proto(&p).unwrap_err().to_string();
    assert!(e.contains('w') && e.contains("2-bit"), "{e}");
}

#[test]
fn narrow_float_outputs_compare_bit_for_bit() {
    let a = t(DType::F8E4M3FN, &[3], Data::U8(vec![0x38, 0x7F, 0x00]));
    let nan_other_sign = t(DType::F8E4M3FN, &[3], Data::U8(vec![0x38, 0xFF, 0x00]));
    let neg_zero = t(DType::F8E4M3FN, &[3], Data::U8(vec![0x38, 0x7F, 0x80]));
    let one_step = t(DType::F8E4M3FN, &[3], Data::U8(vec![0x39, 0x7F, 0x00]));
    assert!(compare(&a, &nan_other_sign).0);
    assert!(!compare(&a, &neg_zero).0, "-0 and +0 are different codes");
    assert!(!compare(&a, &one_step).0);
}

#[test]
fn cast_to_sub_byte_integers_wraps() {
    let x = Tensor::from_f32(
        &[7],
        vec![9.0, -9.5, 7.9, -3.0, f32::NAN, f32::INFINITY, 100.0],
    );
    let y = cast::eval(&ctx(&cast_node(DType::I4)), &[Some(&x)]).unwrap();
    assert_eq!(y[0].dtype, DType::I4);
    assert_eq!(y[0].to_i64_vec(), vec![-7, 7, 7, -3, 0, 0, 4]);
    let y = cast::eval(&ctx(&cast_node(DType::U2)), &[Some(&x)]).unwrap();
    assert_eq!(y[0].to_i64_vec(), vec![1, 3, 3, 1, 0, 0, 0]);
    let big = Tensor::from_i64(&[3], vec![200, -129, i64::MIN + 3]);
    let y = cast::eval(&ctx(&cast_node(DType::I2)), &[Some(&big)]).unwrap();
    assert_eq!(y[0].to_i64_vec(), vec![0, -1, -1]);
}

#[test]
fn cast_attributes_reach_the_conversion_and_bad_ones_are_errors() {
    let x = Tensor::from_f32(&[3], vec![1000.0, f32::INFINITY, 1.5]);
    let sat = cast::eval(&ctx(&cast_node(DType::F8E4M3FN)), &[Some(&x)]).unwrap();
    assert_eq!(sat[0].to_f32_vec(), vec![448.0, 448.0, 1.5]);
    let node = cast_node(DType::F8E5M2).with_attr("saturate", AttrValue::Int(0));
    let y = cast::eval(&ctx(&node), &[Some(&x)]).unwrap();
    assert_eq!(y[0].to_f32_vec(), vec![1024.0, f32::INFINITY, 1.5]);
    let x = Tensor::from_f32(&[2], vec![3.0, 5.0]);
    for (mode, want) in [
        ("up", [4.0, 8.0]),
        ("down", [2.0, 4.0]),
        ("nearest", [4.0, 4.0]),
    ] {
        let node = cast_node(DType::F8E8M0)
            .with_attr("round_mode", AttrValue::String(mode.as_bytes().to_vec()));
        let y = cast::eval(&ctx(&node), &[Some(&x)]).unwrap();
        assert_eq!(y[0].to_f32_vec(), want, "{mode}");
    }
    let bad =
        cast_node(DType::F8E8M0).with_attr("round_mode", AttrValue::String(b"sideways".to_vec()));
    assert!(matches!(
        cast::eval(&ctx(&bad), &[Some(&x)]),
        Err(OpError::Attribute { .. })
    ));
    let bad = cast_node(DType::F8E4M3FN).with_attr("saturate", AttrValue::Int(2));
    assert!(cast::eval(&ctx(&bad), &[Some(&x)]).is_err());
    let bad = Node::new("c", "Cast", &["x"], &["y"]).with_attr("to", AttrValue::Int(1 << 40));
    assert!(cast::eval(&ctx(&bad), &[Some(&x)]).is_err());
}

#[test]
fn cast_like_takes_the_type_of_its_second_input() {
    let x = Tensor::from_f32(&[2], vec![0.3, -2.6]);
    let like = t(DType::BF16, &[0], Data::U16(vec![]));
    let node = Node::new("c", "CastLike", &["x", "l"], &["y"]);
    let y = cast_like::eval(&ctx(&node), &[Some(&x), Some(&like)]).unwrap();
    assert_eq!(y[0].dtype, DType::BF16);
    assert_eq!(y[0].to_f32_vec(), vec![0.30078125, -2.59375]);
    assert!(cast_like::eval(&ctx(&node), &[Some(&x)]).is_err());
}

#[test]
fn bit_cast_reinterprets_and_checks_widths() {
    let node = |to: DType| {
        Node::new("b", "BitCast", &["x"], &["y"])
            .with_attr("to", AttrValue::Int(to.onnx_code().into()))
    };
    let x = Tensor::from_f32(&[2], vec![1.0, -2.0]);
    let y = bit_cast::eval(&ctx(&node(DType::I32)), &[Some(&x)]).unwrap();
    assert_eq!(
        y[0].to_i64_vec(),
        vec![0x3F80_0000, 0xC000_0000u32 as i32 as i64]
    );
    let codes = t(DType::U8, &[2], Data::U8(vec![0x38, 0xC0]));
    let y = bit_cast::eval(&ctx(&node(DType::F8E4M3FN)), &[Some(&codes)]).unwrap();
    assert_eq!(y[0].to_f32_vec(), vec![1.0, -2.0]);
    let nib = t(DType::I4, &[3], Data::I8(vec![-1, 2, -8]));
    let y = bit_cast::eval(&ctx(&node(DType::U4)), &[Some(&nib)]).unwrap();
    assert_eq!(y[0].to_i64_vec(), vec![15, 2, 8]);
    assert!(bit_cast::eval(&ctx(&node(DType::I16)), &[Some(&x)]).is_err());
    let two = t(DType::U8, &[1], Data::U8(vec![2]));
    assert!(bit_cast::eval(&ctx(&node(DType::Bool)), &[Some(&two)]).is_err());
}

#[test]
fn quantize_and_dequantize_float8_with_blocks_and_saturation() {
    // Blocked float8 quantization: 2 blocks of 2 along axis 1, saturate off.
    let x = Tensor::from_f32(&[1, 4], vec![1.0, 1000.0, -0.3, 3.0]);
    let s = Tensor::from_f32(&[1, 2], vec![1.0, 0.5]);
    let z = t(DType::F8E4M3FN, &[1, 2], Data::U8(vec![0, 0]));
    let node = Node::new("q", "QuantizeLinear", &["x", "s", "z"], &["y"])
        .with_attr("axis", AttrValue::Int(1))
        .with_attr("block_size", AttrValue::Int(2))
        .with_attr("saturate", AttrValue::Int(0));
    let q = quantize_linear::eval(&ctx(&node), &[Some(&x), Some(&s), Some(&z)]).unwrap();
    assert_eq!(q[0].dtype, DType::F8E4M3FN);
    let v = q[0].to_f32_vec();
    assert_eq!(v[0], 1.0);
    assert!(v[1].is_nan(), "1000 does not fit E4M3FN without saturation");
    assert_eq!(&v[2..], &[-0.625, 6.0]);
    let dq = Node::new("d", "DequantizeLinear", &["q", "s", "z"], &["y"])
        .with_attr("axis", AttrValue::Int(1))
        .with_attr("block_size", AttrValue::Int(2))
        .with_attr(
            "output_dtype",
            AttrValue::Int(DType::BF16.onnx_code().into()),
        );
    let y = dequantize_linear::eval(&ctx(&dq), &[Some(&q[0]), Some(&s), Some(&z)]).unwrap();
    assert_eq!(y[0].dtype, DType::BF16);
    let y = y[0].to_f32_vec();
    assert_eq!((y[0], y[2], y[3]), (1.0, -0.3125, 3.0));
    // output_dtype must agree with the zero point's type.
    let bad = node
        .clone()
        .with_attr("output_dtype", AttrValue::Int(DType::U8.onnx_code().into()));
    assert!(quantize_linear::eval(&ctx(&bad), &[Some(&x), Some(&s), Some(&z)]).is_err());
    // A zero point of another type than x is an error in DequantizeLinear.
    let z8 = t(DType::F8E5M2, &[1, 2], Data::U8(vec![0, 0]));
    assert!(dequantize_linear::eval(&ctx(&dq), &[Some(&q[0]), Some(&s), Some(&z8)]).is_err());
}

#[test]
fn executor_refuses_narrow_inputs_to_operators_that_do_not_handle_them() {
    let g = Graph {
        nodes: vec![Node::new("sin", "Sin", &["x"], &["y"])],
        inputs: vec![ValueInfo::new("x", DType::BF16, &[2])],
        outputs: vec![ValueInfo::new("y", DType::BF16, &[2])],
        opset_imports: vec![(String::new(), 21)],
        ..Default::default()
    };
    let x = t(DType::BF16, &[2], Data::U16(vec![0x3F80, 0x4000]));
    match execute(&g, vec![("x".into(), x.clone())]) {
        Err(GraphError::Op {
            node,
            source: OpError::Unsupported(why),
            ..
        }) => {
            assert_eq!(node, "sin");
            assert!(why.contains("bfloat16"), "{why}");
        }
        other => panic!("expected an unsupported-type error, got {other:?}"),
    }
    // Cast handles them.
    let g = Graph {
        nodes: vec![cast_node(DType::F32)],
        inputs: vec![ValueInfo::new("x", DType::BF16, &[2])],
        outputs: vec![ValueInfo::new("y", DType::F32, &[2])],
        opset_imports: vec![(String::new(), 21)],
        ..Default::default()
    };
    let out = execute(&g, vec![("x".into(), x)]).unwrap();
    assert_eq!(out[0].1.to_f32_vec(), vec![1.0, 2.0]);
}

#[test]
fn quantize_linear_divides_in_the_precision_of_the_reference() {
    // Expected codes from onnx.reference.ReferenceEvaluator (opset 25).
    let node = |precision: Option<DType>| {
        let n = Node::new("q", "QuantizeLinear", &["x", "s"], &["y"]);
        match precision {
            Some(p) => n.with_attr("precision", AttrValue::Int(p.onnx_code().into())),
            None => n,
        }
    };
    let run = |n: &Node, x: &Tensor, s: &Tensor| {
        quantize_linear::eval(&ctx(n), &[Some(x), Some(s)]).map(|y| y[0].to_i64_vec())
    };
    // precision = float16: 2.5009766 becomes 2.5 in f16 and rounds to 2 (3 in f32).
    let x = Tensor::from_f32(&[3], vec![2.500_976_6, 3.5, 100.7]);
    let one = Tensor::from_f32(&[], vec![1.0]);
    assert_eq!(run(&node(Some(DType::F16)), &x, &one).unwrap(), [2, 4, 101]);
    assert_eq!(run(&node(None), &x, &one).unwrap(), [3, 4, 101]);
    assert_eq!(run(&node(Some(DType::F32)), &x, &one).unwrap(), [3, 4, 101]);
    // bfloat16 x and scale divide in bfloat16: 18.625 / 0.73046875 = 25.497 (f32) is 25.5
    // in bfloat16, which rounds to 26.
    let bf = |v: &[f32]| {
        let bits = v
            .iter()
            .map(|&f| quantkit_core::formats::bf16_encode(f))
            .collect();
        t(DType::BF16, &[v.len()], Data::U16(bits))
    };
    let (bx, bs) = (bf(&[18.625, 16.875, 10.25]), bf(&[0.730_468_75]));
    assert_eq!(run(&node(None), &bx, &bs).unwrap(), [26, 23, 14]);
    assert_eq!(
        run(&node(Some(DType::F32)), &bx, &bs).unwrap(),
        [25, 23, 14]
    );
    // double is not computed (it would need an f64 rule); an integer type is no precision.
    assert!(matches!(
        run(&node(Some(DType::F64)), &x, &one),
        Err(OpError::Unsupported(_))
    ));
    assert!(matches!(
        run(&node(Some(DType::I8)), &x, &one),
        Err(OpError::Attribute { .. })
    ));
}

#[test]
fn mx_style_blocks_float4_codes_with_e8m0_scales() {
    // Expected values from onnx.reference.ReferenceEvaluator (opset 25): 3.3/0.5 saturates
    // to 6, −20/4 = −5 is a tie between −4 and −6 and goes to the even significand (−4).
    let x = Tensor::from_f32(&[1, 4], vec![1.0, 3.3, -20.0, 0.7]);
    let s = t(DType::F8E8M0, &[1, 2], Data::U8(vec![126, 129]));
    let node = Node::new("q", "QuantizeLinear", &["x", "s"], &["y"])
        .with_attr("axis", AttrValue::Int(1))
        .with_attr("block_size", AttrValue::Int(2))
        .with_attr(
            "output_dtype",
            AttrValue::Int(DType::F4E2M1.onnx_code().into()),
        );
    let y = quantize_linear::eval(&ctx(&node), &[Some(&x), Some(&s)]).unwrap();
    assert_eq!(y[0].dtype, DType::F4E2M1);
    assert_eq!(y[0].to_f32_vec(), vec![2.0, 6.0, -4.0, 0.0]);
}
