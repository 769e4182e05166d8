//! float16 and bfloat16 operators against the ONNX reference evaluator, bit for bit.
//!
//! The reference computes float16 with numpy and bfloat16 with `ml_dtypes`, rounding after
//! every numpy operation; the node tests' expected outputs come from it, and their bfloat16
//! outputs are compared as codes. These cases pin quantkit's rules per operator family:
//!
//! - float16 `MatMul`/`Gemm`: f32 products in an f32 accumulator, ascending `k`, rounded
//!   once (`linalg::hgemm_f32_acc`); `Gemm`'s `alpha`/`beta` arithmetic in f32;
//! - float16 and bfloat16 `Softmax` and `Attention`: computed in the type, rounding where
//!   the reference does (`softmax::softmax_rounded`);
//! - bfloat16 layout operators move codes; bfloat16 arithmetic is its f32 result rounded
//!   once (`Bf16::Widen`), except `Elu`, which rounds twice as the reference does.
//!
//! Each case is a one-node model run by `execute` (so the executor's bfloat16 handling is
//! what is tested) and by `onnx.reference.ReferenceEvaluator` (python3 with numpy, onnx and
//! ml_dtypes). Without them the test skips, except under CI (`CI=true`), where it fails.

use quantkit_graph::ops::{mat_mul, OpCtx};
use quantkit_graph::{execute, AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};
use std::path::Path;
use std::process::Command;

/// Runs each `case_N.json` of the folder in the ONNX reference evaluator and writes
/// `case_N.out` (the output's bytes) and `case_N.dtype`.
const REFERENCE: &str = r#"
import json, sys, os, numpy as np, onnx, ml_dtypes
from onnx import helper as h, TensorProto as T
from onnx.reference import ReferenceEvaluator
d = sys.argv[1]
types = {'f16': (np.float16, T.FLOAT16), 'bf16': (ml_dtypes.bfloat16, T.BFLOAT16),
         'i64': (np.int64, T.INT64), 'bool': (np.bool_, T.BOOL), 'f32': (np.float32, T.FLOAT)}
for f in sorted(os.listdir(d)):
    if not f.endswith('.json'):
        continue
    c = json.load(open(os.path.join(d, f)))
    names = [f'x{i}' for i in range(len(c['shapes']))]
    ins = {}
    for i, (n, s, t) in enumerate(zip(names, c['shapes'], c['types'])):
        raw = np.fromfile(os.path.join(d, f[:-5] + f'.in{i}'), dtype=np.uint8)
        ins[n] = raw.view(types[t][0]).reshape(s)
    node = h.make_node(c['op'], names, ['y'], **c['attrs'])
    g = h.make_graph([node], 'g',
                     [h.make_tensor_value_info(n, types[t][1], None) for n, t in zip(names, c['types'])],
                     [h.make_tensor_value_info('y', 0, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid('', c['opset'])])
    y = np.ascontiguousarray(ReferenceEvaluator(m).run(None, ins)[0])
    y.tofile(os.path.join(d, f[:-5] + '.out'))
    open(os.path.join(d, f[:-5] + '.dtype'), 'w').write(str(y.dtype))
"#;

/// xorshift64*: deterministic inputs without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Roughly normal (sum of four uniforms, centred).
    fn normal(&mut self) -> f32 {
        let u: f32 = (0..4)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32)
            .sum();
        (u - 2.0) * 1.7
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Ty {
    F16,
    Bf16,
    I64,
    Bool,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::F16 => "f16",
            Ty::Bf16 => "bf16",
            Ty::I64 => "i64",
            Ty::Bool => "bool",
        }
    }
}

/// One input: its type, shape and (for integer and boolean inputs) values; float inputs
/// are drawn at random times `scale`.
struct In {
    ty: Ty,
    shape: Vec<usize>,
    ints: Option<Vec<i64>>,
    scale: f32,
}

fn fl(ty: Ty, shape: &[usize]) -> In {
    In {
        ty,
        shape: shape.to_vec(),
        ints: None,
        scale: 1.0,
    }
}

fn ints(ty: Ty, shape: &[usize], v: &[i64]) -> In {
    In {
        ty,
        shape: shape.to_vec(),
        ints: Some(v.to_vec()),
        scale: 1.0,
    }
}

struct Case {
    op: &'static str,
    ins: Vec<In>,
    attrs: Vec<(&'static str, AttrValue)>,
    opset: i64,
}

fn case(op: &'static str, ins: Vec<In>, attrs: Vec<(&'static str, AttrValue)>) -> Case {
    Case {
        op,
        ins,
        attrs,
        opset: 23,
    }
}

fn scaled(mut c: Case, s: f32) -> Case {
    for i in &mut c.ins {
        i.scale = s;
    }
    c
}

fn cases() -> Vec<Case> {
    use Ty::*;
    let f = AttrValue::Float;
    let i = AttrValue::Int;
    let ii = |v: &[i64]| AttrValue::Ints(v.to_vec());
    let mut c = Vec::new();
    // float16 products.
    for (a, b) in [
        (&[1, 1][..], &[1, 1][..]),
        (&[3, 5], &[5, 4]),
        (&[7, 300], &[300, 5]),
        (&[4, 2047], &[2047, 3]),
        (&[2, 3, 17, 9], &[9, 4]),
        (&[3, 1, 6, 33], &[2, 33, 5]),
        (&[65], &[65, 8]),
        (&[6, 65], &[65]),
    ] {
        c.push(case("MatMul", vec![fl(F16, a), fl(F16, b)], vec![]));
    }
    c.push(case(
        "Gemm",
        vec![fl(F16, &[7, 300]), fl(F16, &[300, 5])],
        vec![],
    ));
    c.push(case(
        "Gemm",
        vec![fl(F16, &[300, 7]), fl(F16, &[5, 300]), fl(F16, &[1, 5])],
        vec![
            ("alpha", f(0.3)),
            ("beta", f(0.7)),
            ("transA", i(1)),
            ("transB", i(1)),
        ],
    ));
    c.push(case(
        "Gemm",
        vec![fl(F16, &[9, 129]), fl(F16, &[129, 6]), fl(F16, &[9, 6])],
        vec![("alpha", f(1.7)), ("beta", f(0.0))],
    ));
    c.push(case(
        "Gemm",
        vec![fl(F16, &[9, 64]), fl(F16, &[6, 64]), fl(F16, &[6])],
        vec![("beta", f(3.3)), ("transB", i(1))],
    ));
    // Softmax in both types, along a contiguous and a strided axis.
    for ty in [F16, Bf16] {
        for (shape, axis) in [
            (&[2, 3, 4, 6][..], -1),
            (&[5, 70], 1),
            (&[3, 300], -1),
            (&[2, 1000], -1),
            (&[3, 40, 5], 1),
            (&[200, 2], 0),
            (&[5, 70, 1, 1], 1),
        ] {
            c.push(scaled(
                case("Softmax", vec![fl(ty, shape)], vec![("axis", i(axis))]),
                3.0,
            ));
        }
        // Opset 11 coerces to 2-D at axis 1; the reference evaluator ignores that rule
        // (it runs along axis 1 only), so a 2-D input, where both agree.
        let mut old = scaled(case("Softmax", vec![fl(ty, &[6, 20])], vec![]), 3.0);
        old.opset = 11;
        c.push(old);
    }
    // Attention in both types: 4-D causal, 3-D with heads, a float mask, GQA with a cache,
    // a given scale, softmax_precision float.
    for ty in [F16, Bf16] {
        let qkv = |q: &[usize], k: &[usize]| vec![fl(ty, q), fl(ty, k), fl(ty, k)];
        c.push(case(
            "Attention",
            qkv(&[2, 3, 4, 8], &[2, 3, 6, 8]),
            vec![("is_causal", i(1))],
        ));
        c.push(case(
            "Attention",
            qkv(&[2, 4, 24], &[2, 6, 24]),
            vec![
                ("is_causal", i(1)),
                ("q_num_heads", i(3)),
                ("kv_num_heads", i(3)),
            ],
        ));
        let mut m = qkv(&[2, 3, 4, 8], &[2, 3, 6, 8]);
        m.push(fl(ty, &[2, 1, 4, 6]));
        c.push(case("Attention", m, vec![("scale", f(0.3))]));
        let mut m = qkv(&[2, 6, 3, 16], &[2, 2, 5, 16]);
        m.push(fl(ty, &[3, 7]));
        m.push(fl(ty, &[2, 2, 2, 16]));
        m.push(fl(ty, &[2, 2, 2, 16]));
        c.push(case("Attention", m, vec![]));
        c.push(case(
            "Attention",
            qkv(&[1, 2, 5, 8], &[1, 2, 9, 8]),
            vec![("softmax_precision", i(1))],
        ));
    }
    // bfloat16 layout: codes move unchanged.
    c.push(case(
        "Transpose",
        vec![fl(Bf16, &[2, 3, 4])],
        vec![("perm", ii(&[2, 0, 1]))],
    ));
    c.push(case(
        "Expand",
        vec![fl(Bf16, &[3, 1]), ints(I64, &[3], &[2, 3, 4])],
        vec![],
    ));
    c.push(case(
        "Concat",
        vec![fl(Bf16, &[2, 3]), fl(Bf16, &[2, 5])],
        vec![("axis", i(1))],
    ));
    c.push(case(
        "Gather",
        vec![fl(Bf16, &[5, 3]), ints(I64, &[4], &[4, 0, -1, 2])],
        vec![],
    ));
    c.push(case(
        "Pad",
        vec![
            fl(Bf16, &[2, 3]),
            ints(I64, &[4], &[1, 0, 0, 2]),
            fl(Bf16, &[]),
        ],
        vec![],
    ));
    c.push(case(
        "Where",
        vec![
            ints(Bool, &[2, 3], &[1, 0, 1, 1, 0, 0]),
            fl(Bf16, &[2, 3]),
            fl(Bf16, &[1, 3]),
        ],
        vec![],
    ));
    c.push(case(
        "Unique",
        vec![ints(Bf16, &[8], &[3, -1, 2, -1, 0, 3, -7, 2])],
        vec![],
    ));
    // bfloat16 arithmetic: the f32 result rounded once.
    for op in ["Add", "Sub", "Mul", "Div", "Equal", "Less"] {
        c.push(case(op, vec![fl(Bf16, &[4, 5]), fl(Bf16, &[5])], vec![]));
    }
    c.push(case(
        "ReduceMax",
        vec![fl(Bf16, &[3, 4, 5]), ints(I64, &[1], &[1])],
        vec![],
    ));
    c.push(case(
        "MatMul",
        vec![fl(Bf16, &[2, 7, 300]), fl(Bf16, &[2, 300, 9])],
        vec![],
    ));
    c.push(case(
        "Einsum",
        vec![fl(Bf16, &[5, 2, 3]), fl(Bf16, &[5, 3, 4])],
        vec![("equation", AttrValue::String("bij,bjk->bik".into()))],
    ));
    for alpha in [1.0, 0.7, 2.5] {
        c.push(scaled(
            case("Celu", vec![fl(Bf16, &[500])], vec![("alpha", f(alpha))]),
            3.0,
        ));
        c.push(scaled(
            case("Elu", vec![fl(Bf16, &[500])], vec![("alpha", f(alpha))]),
            3.0,
        ));
    }
    c
}

fn reference_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import numpy, ml_dtypes, onnx.reference"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "python3 with numpy, ml_dtypes and onnx is required under CI"
        );
        eprintln!("skipping: python3 with numpy, ml_dtypes and onnx not found");
    }
    ok
}

/// The input tensors of a case.
fn tensors(c: &Case, rng: &mut Rng) -> Vec<Tensor> {
    c.ins
        .iter()
        .map(|i| {
            let n: usize = i.shape.iter().product();
            let vals: Vec<f32> = match &i.ints {
                Some(v) => v.iter().map(|&x| x as f32).collect(),
                None => (0..n).map(|_| rng.normal() * i.scale).collect(),
            };
            let data = match i.ty {
                Ty::F16 => Data::F16(vals.iter().map(|&v| half::f16::from_f32(v)).collect()),
                Ty::Bf16 => {
                    return Tensor::from_f32(&i.shape, vals).cast(DType::BF16);
                }
                Ty::I64 => Data::I64(i.ints.clone().expect("integer values")),
                Ty::Bool => Data::Bool(vals.iter().map(|&v| v != 0.0).collect()),
            };
            Tensor::new(i.shape.clone(), data).expect("shape matches")
        })
        .collect()
}

/// The bytes numpy would write for `t` (`tofile`, little-endian).
fn bytes(t: &Tensor) -> Vec<u8> {
    match &t.data {
        Data::F16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        Data::U16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::Bool(v) => v.iter().map(|&x| u8::from(x)).collect(),
        other => panic!("unexpected output storage {other:?}"),
    }
}

fn write_case(dir: &Path, n: usize, c: &Case, inputs: &[Tensor]) {
    let shapes: Vec<String> = c.ins.iter().map(|i| format!("{:?}", i.shape)).collect();
    let types: Vec<String> = c
        .ins
        .iter()
        .map(|i| format!("\"{}\"", i.ty.name()))
        .collect();
    let attrs: Vec<String> = c
        .attrs
        .iter()
        .map(|(k, v)| match v {
            AttrValue::Float(x) => format!("\"{k}\": {x:?}"),
            AttrValue::Int(x) => format!("\"{k}\": {x}"),
            AttrValue::Ints(x) => format!("\"{k}\": {x:?}"),
            AttrValue::String(x) => format!("\"{k}\": \"{}\"", String::from_utf8_lossy(x)),
            _ => unreachable!("test attributes are ints, floats and strings"),
        })
        .collect();
    let json = format!(
        "{{\"op\": \"{}\", \"shapes\": [{}], \"types\": [{}], \"attrs\": {{{}}}, \"opset\": {}}}",
        c.op,
        shapes.join(", "),
        types.join(", "),
        attrs.join(", "),
        c.opset
    );
    std::fs::write(dir.join(format!("case_{n:03}.json")), json).unwrap();
    for (i, t) in inputs.iter().enumerate() {
        std::fs::write(dir.join(format!("case_{n:03}.in{i}")), bytes(t)).unwrap();
    }
}

fn quantkit(c: &Case, inputs: &[Tensor]) -> Result<Tensor, String> {
    let names: Vec<String> = (0..inputs.len()).map(|i| format!("x{i}")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut node = Node::new("n", c.op, &name_refs, &["y"]);
    for (k, v) in &c.attrs {
        node = node.with_attr(k, v.clone());
    }
    let g = Graph {
        nodes: vec![node],
        inputs: names
            .iter()
            .zip(inputs)
            .map(|(n, t)| ValueInfo::new(n, t.dtype, &t.shape))
            .collect(),
        outputs: vec![ValueInfo {
            name: "y".into(),
            dtype: None,
            onnx_elem_type: 0,
            shape: None,
        }],
        opset_imports: vec![(String::new(), c.opset)],
        ..Default::default()
    };
    let feeds = names.iter().cloned().zip(inputs.iter().cloned()).collect();
    let mut out = execute(&g, feeds).map_err(|e| e.to_string())?;
    Ok(out.remove(0).1)
}

#[test]
fn half_types_match_the_reference_bit_for_bit() {
    if !reference_available() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("half_types_reference");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let cases = cases();
    let inputs: Vec<Vec<Tensor>> = cases.iter().map(|c| tensors(c, &mut rng)).collect();
    for (n, (c, x)) in cases.iter().zip(&inputs).enumerate() {
        write_case(&dir, n, c, x);
    }
    let out = Command::new("python3")
        .args(["-c", REFERENCE])
        .arg(&dir)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut failures = Vec::new();
    for (n, (c, x)) in cases.iter().zip(&inputs).enumerate() {
        let want = std::fs::read(dir.join(format!("case_{n:03}.out"))).unwrap();
        let want_type = std::fs::read_to_string(dir.join(format!("case_{n:03}.dtype"))).unwrap();
        let what = format!(
            "{} {} {:?}",
            c.op,
            c.ins
                .iter()
                .map(|i| format!("{}{:?}", i.ty.name(), i.shape))
                .collect::<Vec<_>>()
                .join(" "),
            c.attrs
        );
        let got = match quantkit(c, x) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{what}: {e}"));
                continue;
            }
        };
        let type_ok = matches!(
            (want_type.as_str(), got.dtype),
            ("float16", DType::F16)
                | ("bfloat16", DType::BF16)
                | ("bool", DType::Bool)
                | ("int64", DType::I64)
        );
        let g = bytes(&got);
        let width = (want.len() / got.len().max(1)).max(1);
        let differ = g
            .chunks(width)
            .zip(want.chunks(width))
            .filter(|(a, b)| a != b)
            .count();
        if !type_ok || g.len() != want.len() || differ > 0 {
            failures.push(format!(
                "{what}: {} vs reference {want_type}, {differ} of {} elements differ",
                got.dtype,
                got.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The accumulator is f32, not f16: pins the rule without Python. 2048 + 1 + 1 + ...:
/// with f16 partial sums every +1 is lost (ulp(2048) = 2); in f32 all are kept.
#[test]
fn float16_matmul_accumulates_in_f32() {
    let k = 9;
    let mut a = vec![half::f16::from_f32(1.0); k];
    a[0] = half::f16::from_f32(2048.0);
    let b = vec![half::f16::from_f32(1.0); k];
    let node = Node::new("m", "MatMul", &["a", "b"], &["y"]);
    let ta = Tensor::new(vec![1, k], Data::F16(a)).unwrap();
    let tb = Tensor::new(vec![k, 1], Data::F16(b)).unwrap();
    let y = mat_mul::eval(
        &OpCtx {
            node: &node,
            opset: 13,
        },
        &[Some(&ta), Some(&tb)],
    )
    .unwrap();
    assert_eq!(y[0].to_f32_vec(), vec![2056.0]);
}

/// Bad bfloat16 input is an error naming the node, on the three paths (codes, widened to
/// f32, own arithmetic), never a panic.
#[test]
fn bad_bfloat16_input_names_the_node() {
    let bf = |shape: &[usize]| {
        let n = shape.iter().product();
        Tensor::from_f32(shape, vec![0.5; n]).cast(DType::BF16)
    };
    let run = |op: &str, attrs: Vec<(&str, AttrValue)>, ins: Vec<Tensor>| -> String {
        let names: Vec<String> = (0..ins.len()).map(|i| format!("x{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut node = Node::new("bad_node", op, &refs, &["y"]);
        for (k, v) in attrs {
            node = node.with_attr(k, v);
        }
        let g = Graph {
            nodes: vec![node],
            inputs: names
                .iter()
                .zip(&ins)
                .map(|(n, t)| ValueInfo::new(n, t.dtype, &t.shape))
                .collect(),
            outputs: vec![ValueInfo {
                name: "y".into(),
                dtype: None,
                onnx_elem_type: 0,
                shape: None,
            }],
            opset_imports: vec![(String::new(), 23)],
            ..Default::default()
        };
        let feeds = names.into_iter().zip(ins).collect();
        match execute(&g, feeds) {
            Ok(_) => panic!("{op}: expected an error"),
            Err(e) => e.to_string(),
        }
    };
    let f32t = Tensor::from_f32(&[2, 3], vec![0.0; 6]);
    let errors = [
        run("Softmax", vec![], vec![bf(&[])]),
        run(
            "Celu",
            vec![("alpha", AttrValue::Float(0.0))],
            vec![bf(&[3])],
        ),
        run(
            "Pad",
            vec![],
            vec![bf(&[2, 3]), Tensor::from_i64(&[3], vec![1, 0, 0]), bf(&[])],
        ),
        run("Add", vec![], vec![bf(&[2, 3]), bf(&[4])]),
        run("MatMul", vec![], vec![bf(&[2, 3]), bf(&[4, 2])]),
        run(
            "Transpose",
            vec![("perm", AttrValue::Ints(vec![0, 0]))],
            vec![bf(&[2, 3])],
        ),
        run(
            "Where",
            vec![],
            vec![
                Tensor::new(vec![2, 3], Data::Bool(vec![true; 6])).unwrap(),
                bf(&[2, 3]),
                f32t,
            ],
        ),
        run(
            "Attention",
            vec![],
            vec![bf(&[2, 8]), bf(&[2, 8]), bf(&[2, 8])],
        ),
        run("Sin", vec![], vec![bf(&[2])]),
    ];
    for e in errors {
        assert!(e.contains("bad_node"), "{e}");
    }
}
