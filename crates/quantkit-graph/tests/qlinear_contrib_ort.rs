//! The QLinear contrib operators against ONNX Runtime itself (python3 with onnxruntime and
//! numpy; skipped with a printed reason when absent, a failure under CI=true): one-node
//! models on u8 and i8 cases per operator, run by ORT on the same codes. ORT's kernels
//! (MLAS fixed ratios, lookup tables built with its own logistic function) may differ from
//! the float reference definition quantkit implements by one code; more is a failure, and
//! the test prints how many codes differ.

use quantkit_data::npy::{write_npy, NpyArray, NpyData};
use quantkit_graph::ops::{lookup, OpCtx};
use quantkit_graph::{AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};
use std::path::{Path, PathBuf};

const MS: &str = "com.microsoft";

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

fn range(dt: DType) -> (i64, i64) {
    match dt {
        DType::U8 => (0, 255),
        _ => (-128, 127),
    }
}

fn codes(dt: DType, shape: &[usize], v: &[i64]) -> Tensor {
    let data = match dt {
        DType::U8 => Data::U8(v.iter().map(|&x| x as u8).collect()),
        _ => Data::I8(v.iter().map(|&x| x as i8).collect()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

fn random_codes(dt: DType, shape: &[usize], seed: u64) -> Tensor {
    let (lo, hi) = range(dt);
    codes(dt, shape, &lcg(shape.iter().product(), seed, lo, hi))
}

fn have_ort() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import onnxruntime, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI=true but python3 with onnxruntime+numpy is not available"
        );
        eprintln!("skipping the ONNX Runtime comparison: python3 with onnxruntime+numpy not found");
    }
    ok
}

/// One operand of a case: a graph input (codes fed at run time) or an initializer.
enum Operand {
    Input(Tensor),
    Const(Tensor),
}

struct Case {
    what: String,
    op: &'static str,
    attrs: Vec<(&'static str, AttrValue)>,
    operands: Vec<Operand>,
}

fn scale(s: f32) -> Operand {
    Operand::Const(Tensor::from_f32(&[], vec![s]))
}

fn zp(dt: DType, z: i64) -> Operand {
    Operand::Const(codes(dt, &[], &[z]))
}

/// `x, x_scale, x_zp, y_scale, y_zp` with varied parameters.
fn unary_operands(x: Tensor, seed: u64, sy: f32) -> Vec<Operand> {
    let dt = x.dtype;
    let (lo, hi) = range(dt);
    let z = lcg(2, seed, lo, hi);
    vec![
        Operand::Input(x),
        scale(0.011 + seed as f32 * 1e-4),
        zp(dt, z[0]),
        scale(sy),
        zp(dt, z[1] / 2),
    ]
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (k, dt) in [DType::U8, DType::I8].into_iter().enumerate() {
        let seed = 10 * k as u64;
        let (lo, hi) = range(dt);
        let z = lcg(3, seed + 1, lo, hi);
        for op in ["QLinearAdd", "QLinearMul"] {
            let (ash, bsh): (&[usize], &[usize]) = if k == 0 {
                (&[2, 3, 4, 5], &[1, 3, 1, 1])
            } else {
                (&[4, 16], &[16])
            };
            let sc = if op == "QLinearMul" { 0.02 } else { 0.035 };
            v.push(Case {
                what: format!("{op} {dt} {ash:?}·{bsh:?}"),
                op,
                attrs: vec![],
                operands: vec![
                    Operand::Input(random_codes(dt, ash, seed + 2)),
                    scale(0.021),
                    // (ONNX Runtime 1.32's type inference rejects QLinearAdd with an
                    // omitted zero point, so every case gives them.)
                    zp(dt, z[0]),
                    Operand::Input(random_codes(dt, bsh, seed + 3)),
                    scale(0.017),
                    zp(dt, z[1]),
                    scale(sc),
                    zp(dt, z[2]),
                ],
            });
        }
        let cl = k as i64;
        let shape: &[usize] = if k == 0 { &[2, 8, 5, 5] } else { &[2, 5, 5, 8] };
        v.push(Case {
            what: format!("QLinearGlobalAveragePool {dt} channels_last {cl}"),
            op: "QLinearGlobalAveragePool",
            attrs: vec![("channels_last", AttrValue::Int(cl))],
            operands: unary_operands(random_codes(dt, shape, seed + 4), seed + 5, 0.004),
        });
        let shape: &[usize] = if k == 0 { &[2, 3, 7, 7] } else { &[2, 7, 6, 3] };
        v.push(Case {
            what: format!("QLinearAveragePool {dt} channels_last {cl}"),
            op: "QLinearAveragePool",
            attrs: vec![
                ("kernel_shape", AttrValue::Ints(vec![3, 3])),
                ("strides", AttrValue::Ints(vec![2, 2])),
                ("pads", AttrValue::Ints(vec![1, 1, 1, 1])),
                ("count_include_pad", AttrValue::Int(1 - cl)),
                ("channels_last", AttrValue::Int(cl)),
            ],
            operands: unary_operands(random_codes(dt, shape, seed + 6), seed + 7, 0.006),
        });
        let all = codes(dt, &[4, 64], &(lo..=hi).collect::<Vec<_>>());
        v.push(Case {
            what: format!("QLinearSigmoid {dt} (every code)"),
            op: "QLinearSigmoid",
            attrs: vec![],
            operands: {
                let mut o = unary_operands(all.clone(), seed + 8, 1.0 / 256.0);
                o[4] = zp(dt, lo);
                o
            },
        });
        v.push(Case {
            what: format!("QLinearLeakyRelu {dt} (every code)"),
            op: "QLinearLeakyRelu",
            attrs: vec![("alpha", AttrValue::Float(0.1))],
            operands: unary_operands(all, seed + 9, 0.013),
        });
        let axis: i64 = if k == 0 { 1 } else { -1 };
        let part = |c: usize| {
            if k == 0 {
                vec![2, c, 3, 3]
            } else {
                vec![2, 3, 3, c]
            }
        };
        let zc = lcg(4, seed + 11, lo, hi);
        v.push(Case {
            what: format!("QLinearConcat {dt} axis {axis}"),
            op: "QLinearConcat",
            attrs: vec![("axis", AttrValue::Int(axis))],
            operands: vec![
                scale(0.02),
                zp(dt, zc[0]),
                Operand::Input(random_codes(dt, &part(2), seed + 12)),
                scale(0.013),
                zp(dt, zc[1]),
                Operand::Input(random_codes(dt, &part(3), seed + 13)),
                scale(0.02),
                zp(dt, zc[0]),
                Operand::Input(random_codes(dt, &part(1), seed + 14)),
                scale(0.031),
                zp(dt, zc[2]),
            ],
        });
    }
    v
}

fn npy(t: &Tensor) -> NpyArray {
    let data = match &t.data {
        Data::U8(v) => NpyData::U8(v.clone()),
        Data::I8(v) => NpyData::I8(v.clone()),
        _ => unreachable!("codes"),
    };
    NpyArray::new(t.shape.clone(), data).unwrap()
}

/// Runs the one-node model in ONNX Runtime; returns the output codes.
fn run_ort(dir: &Path, name: &str, g: &Graph, feeds: &[(String, &Tensor)]) -> Vec<i64> {
    let model = dir.join(format!("{name}.onnx"));
    quantkit_graph::save_model(g, &model).unwrap();
    let mut feed_py = Vec::new();
    for (n, t) in feeds {
        let p = dir.join(format!("{name}.{n}.npy"));
        write_npy(&p, &npy(t)).unwrap();
        feed_py.push(format!("'{n}': np.load(r'{}')", p.display()));
    }
    let out = dir.join(format!("{name}.out.bin"));
    let script = format!(
        "import numpy as np, onnxruntime as ort\n\
         o = ort.SessionOptions(); o.intra_op_num_threads = 1\n\
         s = ort.InferenceSession(r'{}', o, providers=['CPUExecutionProvider'])\n\
         y = s.run(None, {{{}}})[0]\n\
         y.astype(np.int64).tofile(r'{}')\n",
        model.display(),
        feed_py.join(", "),
        out.display()
    );
    let o = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "onnxruntime failed on {name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::read(&out)
        .unwrap()
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn qlinear_contrib_ops_match_onnxruntime_within_one_code() {
    if !have_ort() {
        return;
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("quantkit-qlinear-ort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut total = (0usize, 0usize);
    for (ci, case) in cases().into_iter().enumerate() {
        let mut g = Graph {
            name: format!("case{ci}"),
            opset_imports: vec![(String::new(), 13), (MS.to_string(), 1)],
            ..Default::default()
        };
        g.meta.ir_version = 8;
        let mut node = Node::new("n", case.op, &[], &["y"]);
        node.domain = MS.into();
        for (k, v) in &case.attrs {
            node = node.with_attr(k, v.clone());
        }
        let mut ours_in: Vec<Option<&Tensor>> = Vec::new();
        let mut feeds = Vec::new();
        for (i, o) in case.operands.iter().enumerate() {
            let name = format!("in{i}");
            match o {
                Operand::Input(t) => {
                    g.inputs.push(ValueInfo::new(&name, t.dtype, &t.shape));
                    feeds.push((name.clone(), t));
                    ours_in.push(Some(t));
                }
                Operand::Const(t) => {
                    g.initializers.insert(name.clone(), t.clone());
                    ours_in.push(Some(t));
                }
            }
            node.inputs.push(name);
        }
        let f = lookup(MS, case.op).unwrap();
        let ours = f(
            &OpCtx {
                node: &node,
                opset: 13,
            },
            &ours_in,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", case.what))
        .remove(0);
        g.outputs.push(ValueInfo::new("y", ours.dtype, &ours.shape));
        g.nodes.push(node);
        let theirs = run_ort(&dir, &format!("case{ci}"), &g, &feeds);
        let ours = ours.to_i64_vec();
        assert_eq!(ours.len(), theirs.len(), "{}", case.what);
        let diff = ours.iter().zip(&theirs).filter(|(a, b)| a != b).count();
        let max = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a - b).abs())
            .max()
            .unwrap_or(0);
        eprintln!(
            "{}: {diff} of {} codes differ from ONNX Runtime (max {max})",
            case.what,
            ours.len()
        );
        assert!(max <= 1, "{}: codes differ by {max} from ORT", case.what);
        total.0 += diff;
        total.1 += ours.len();
    }
    eprintln!(
        "all cases: {} of {} codes differ from ONNX Runtime by one",
        total.0, total.1
    );
    std::fs::remove_dir_all(&dir).ok();
}
