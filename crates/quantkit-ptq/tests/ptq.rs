//! End-to-end tests of the post-training quantizer on a model built here and on the
//! committed Fashion-MNIST sample; ONNX Runtime cross-check; real models (ignored, slow).

use quantkit_data::{open_data, BatchOptions, OpenOptions};
use quantkit_graph::{execute, AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};
use quantkit_ptq::{fold_batch_norms, quantize_static, PtqConfig, PtqError};
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn shared() -> PathBuf {
    std::env::var_os("QUANTKIT_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared")))
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Deterministic pseudo-random values in [-a, a] (LCG, so the test needs no rand crate).
fn rand_vec(n: usize, a: f32, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a
        })
        .collect()
}

/// Conv(1→8, 3×3) → BN → Relu → MaxPool 2 → Conv(8→8, 3×3) → Clip(0,6) → Flatten → Gemm(→10)
/// → Softmax, on [N, 1, 28, 28].
fn small_model() -> Graph {
    let mut g = Graph {
        name: "small".into(),
        opset_imports: vec![(String::new(), 13)],
        ..Default::default()
    };
    g.meta.ir_version = 8;
    let mut vi = ValueInfo::new("x", DType::F32, &[1, 1, 28, 28]);
    vi.shape.as_mut().unwrap()[0] = quantkit_graph::Dim::Symbolic("N".into());
    g.inputs.push(vi);
    g.outputs.push(ValueInfo {
        name: "prob".into(),
        dtype: Some(DType::F32),
        onnx_elem_type: DType::F32.onnx_code(),
        shape: None,
    });
    let init = |g: &mut Graph, name: &str, shape: &[usize], v: Vec<f32>| {
        g.initializers
            .insert(name.into(), Tensor::from_f32(shape, v));
    };
    init(&mut g, "w1", &[8, 1, 3, 3], rand_vec(72, 0.6, 1));
    init(&mut g, "b1", &[8], rand_vec(8, 0.1, 2));
    init(
        &mut g,
        "gamma",
        &[8],
        rand_vec(8, 0.5, 3).iter().map(|v| v + 1.0).collect(),
    );
    init(&mut g, "beta", &[8], rand_vec(8, 0.2, 4));
    init(&mut g, "mean", &[8], rand_vec(8, 0.1, 5));
    init(
        &mut g,
        "var",
        &[8],
        rand_vec(8, 0.2, 6).iter().map(|v| v + 0.5).collect(),
    );
    init(&mut g, "w2", &[8, 8, 3, 3], rand_vec(576, 0.25, 7));
    init(&mut g, "b2", &[8], rand_vec(8, 0.1, 8));
    init(
        &mut g,
        "wf",
        &[8 * 11 * 11, 10],
        rand_vec(968 * 10, 0.08, 9),
    );
    init(&mut g, "bf", &[10], rand_vec(10, 0.1, 10));
    init(&mut g, "lo", &[], vec![0.0]);
    init(&mut g, "hi", &[], vec![6.0]);
    g.nodes = vec![
        Node::new("conv1", "Conv", &["x", "w1", "b1"], &["c1"]),
        Node::new(
            "bn1",
            "BatchNormalization",
            &["c1", "gamma", "beta", "mean", "var"],
            &["n1"],
        )
        .with_attr("epsilon", AttrValue::Float(1e-3)),
        Node::new("relu1", "Relu", &["n1"], &["r1"]),
        Node::new("pool1", "MaxPool", &["r1"], &["p1"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![2, 2]))
            .with_attr("strides", AttrValue::Ints(vec![2, 2])),
        Node::new("conv2", "Conv", &["p1", "w2", "b2"], &["c2"]),
        Node::new("clip2", "Clip", &["c2", "lo", "hi"], &["r2"]),
        Node::new("flat", "Flatten", &["r2"], &["f"]),
        Node::new("fc", "Gemm", &["f", "wf", "bf"], &["logits"]),
        Node::new("softmax", "Softmax", &["logits"], &["prob"]),
    ];
    g
}

fn sample_data() -> quantkit_data::DataSource {
    open_data(
        repo().join("data/fashion-mnist-sample"),
        &OpenOptions::default(),
    )
    .unwrap()
}

/// First `n` samples of the committed sample as one batch.
fn sample_batch(n: usize) -> Tensor {
    let mut d = sample_data();
    let b = d
        .batches(&BatchOptions {
            batch_size: n,
            limit: Some(n),
            ..Default::default()
        })
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    Tensor::from_f32(&b.shape, b.data)
}

fn run(g: &Graph, input: &str, x: &Tensor, out: usize) -> Tensor {
    execute(g, vec![(input.into(), x.clone())]).unwrap()[out]
        .1
        .clone()
}

fn argmax_rows(t: &Tensor) -> Vec<usize> {
    let v = t.to_f32_vec();
    let c = *t.shape.last().unwrap();
    v.chunks(c)
        .map(|r| {
            r.iter()
                .enumerate()
                .fold((0, f32::MIN), |m, (i, &x)| if x > m.1 { (i, x) } else { m })
                .0
        })
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += f64::from(x) * f64::from(y);
        aa += f64::from(x) * f64::from(x);
        bb += f64::from(y) * f64::from(y);
    }
    ab / (aa.sqrt() * bb.sqrt())
}

fn agreement(a: &[usize], b: &[usize]) -> f64 {
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / a.len() as f64
}

#[test]
fn batch_norm_folding_matches_unfolded_execution() {
    let g = small_model();
    let x = sample_batch(16);
    let want = run(&g, "x", &x, 0);
    let mut h = g.clone();
    // Expose the BN output to compare the folded conv directly too.
    let folded = fold_batch_norms(&mut h).unwrap();
    assert_eq!(folded, vec![("bn1".to_string(), "conv1".to_string())]);
    assert!(!h.nodes.iter().any(|n| n.op_type == "BatchNormalization"));
    let got = run(&h, "x", &x, 0);
    let (a, b) = (want.to_f32_vec(), got.to_f32_vec());
    let max = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(max < 1e-5, "folded vs unfolded max |diff| {max}");
    // Exact formula on the weights: w' = w·γ/√(var+ε), b' = (b−μ)·γ/√(var+ε)+β.
    let conv = h.nodes.iter().find(|n| n.name == "conv1").unwrap();
    let w2 = h.initializers[&conv.inputs[1]].to_f64_vec();
    let b2 = h.initializers[&conv.inputs[2]].to_f64_vec();
    let gi = |n: &str| g.initializers[n].to_f64_vec();
    let (w, b, ga, be, mu, var) = (
        gi("w1"),
        gi("b1"),
        gi("gamma"),
        gi("beta"),
        gi("mean"),
        gi("var"),
    );
    for c in 0..8 {
        let k = ga[c] / (var[c] + f64::from(1e-3f32)).sqrt();
        for j in 0..9 {
            assert_eq!(w2[c * 9 + j] as f32, (w[c * 9 + j] * k) as f32);
        }
        assert_eq!(b2[c] as f32, ((b[c] - mu[c]) * k + be[c]) as f32);
    }
}

fn quantize_small(config: &PtqConfig) -> (Graph, quantkit_ptq::Summary) {
    let mut data = sample_data();
    quantize_static(small_model(), &mut data, config, &mut |_, _| {}).unwrap()
}

#[test]
fn qdq_model_keeps_float_accuracy_and_has_ort_layout() {
    let (q, s) = quantize_small(&PtqConfig {
        calib_samples: Some(256),
        ..Default::default()
    });
    // Layout: int8 weights via DequantizeLinear, int32 biases, no Q/DQ between conv and relu.
    for n in q
        .nodes
        .iter()
        .filter(|n| n.op_type == "Conv" || n.op_type == "Gemm")
    {
        let wdq = q
            .nodes
            .iter()
            .find(|m| m.outputs[0] == n.inputs[1])
            .unwrap();
        assert_eq!(wdq.op_type, "DequantizeLinear");
        assert_eq!(q.initializers[&wdq.inputs[0]].dtype, DType::I8);
        let bdq = q
            .nodes
            .iter()
            .find(|m| m.outputs[0] == n.inputs[2])
            .unwrap();
        assert_eq!(q.initializers[&bdq.inputs[0]].dtype, DType::I32);
        let consumers: Vec<&Node> = q
            .nodes
            .iter()
            .filter(|m| m.inputs.contains(&n.outputs[0]))
            .collect();
        if n.name != "fc" {
            assert_eq!(consumers.len(), 1);
            assert!(
                matches!(consumers[0].op_type.as_str(), "Relu" | "Clip"),
                "{}",
                consumers[0].op_type
            );
        }
    }
    assert_eq!(s.fused.len(), 2);
    assert_eq!(s.prepare.batch_norms_folded.len(), 1);
    assert!(s.left_float.iter().any(|f| f.op_type == "Softmax"));
    assert!(
        (s.weight_bytes_after as f64) < 0.3 * s.weight_bytes_before as f64,
        "{} -> {}",
        s.weight_bytes_before,
        s.weight_bytes_after
    );
    // Accuracy: the QDQ graph (float-exact Q/DQ) vs the float graph on 500 samples.
    let x = sample_batch(500);
    let f = run(&small_model(), "x", &x, 0);
    let y = run(&q, "x", &x, 0);
    let agree = agreement(&argmax_rows(&f), &argmax_rows(&y));
    let cos = cosine(&f.to_f32_vec(), &y.to_f32_vec());
    eprintln!("small model: top-1 agreement {agree:.4}, prob cosine {cos:.5}");
    assert!(agree >= 0.97, "agreement {agree}");
    assert!(cos >= 0.995, "cosine {cos}");
}

#[test]
fn options_per_tensor_i8_and_weight_bits() {
    let (q, s) = quantize_small(&PtqConfig {
        calib_samples: Some(64),
        qdq: quantkit_ptq::QdqOptions {
            per_channel: false,
            weight_bits: 4,
            signed_activations: true,
        },
        ..Default::default()
    });
    assert_eq!(s.weights, "i4 symmetric per-tensor");
    for n in q.nodes.iter().filter(|n| n.op_type == "QuantizeLinear") {
        assert_eq!(q.initializers[&n.inputs[2]].dtype, DType::I8);
    }
    for n in q.nodes.iter().filter(|n| n.op_type == "Conv") {
        let wdq = q
            .nodes
            .iter()
            .find(|m| m.outputs[0] == n.inputs[1])
            .unwrap();
        assert_eq!(q.initializers[&wdq.inputs[1]].len(), 1);
        let Data::I8(v) = &q.initializers[&wdq.inputs[0]].data else {
            panic!()
        };
        assert!(v.iter().all(|&x| (-8..=7).contains(&x)));
    }
}

#[test]
fn zero_and_subnormal_weight_channels_get_normal_scales() {
    let mut g = small_model();
    let w = g.initializers.get_mut("w2").unwrap();
    let Data::F32(v) = &mut w.data else { panic!() };
    v[..72].iter_mut().for_each(|x| *x = 0.0); // channel 0 all zero
    v[72..144].iter_mut().for_each(|x| *x = 1e-42); // channel 1 subnormal
    let mut data = sample_data();
    let (q, _) = quantize_static(
        g,
        &mut data,
        &PtqConfig {
            calib_samples: Some(32),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    for n in q
        .nodes
        .iter()
        .filter(|n| n.op_type.ends_with("QuantizeLinear"))
    {
        for s in q.initializers[&n.inputs[1]].to_f32_vec() {
            assert!(s.is_normal() && s > 0.0, "{}: scale {s}", n.name);
        }
    }
}

#[test]
fn bad_inputs_give_clear_errors() {
    // --exclude naming a missing node.
    let mut data = sample_data();
    let e = quantize_static(
        small_model(),
        &mut data,
        &PtqConfig {
            exclude: vec!["nope".into()],
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(
        matches!(&e, PtqError::UnknownNode { name, .. } if name == "nope"),
        "{e}"
    );
    // Wrong input shape: a model expecting 3 channels.
    let mut g = small_model();
    g.inputs[0].shape.as_mut().unwrap()[1] = quantkit_graph::Dim::Known(3);
    let e =
        quantize_static(g, &mut sample_data(), &PtqConfig::default(), &mut |_, _| {}).unwrap_err();
    assert!(
        matches!(&e, PtqError::InputMismatch { input, .. } if input == "x"),
        "{e}"
    );
    assert!(e.to_string().contains("`x`"));
    // NaN in calibration data.
    let dir = std::env::temp_dir().join(format!("quantkit-ptq-nan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.npy");
    let mut vals = vec![0.5f32; 4 * 28 * 28];
    vals[2 * 784 + 5] = f32::NAN;
    write_npy_f32(&path, &[4, 1, 28, 28], &vals);
    let mut data = open_data(&path, &OpenOptions::default()).unwrap();
    let e = quantize_static(
        small_model(),
        &mut data,
        &PtqConfig::default(),
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(
        matches!(&e, PtqError::NonFiniteInput { sample: 2, .. }),
        "{e}"
    );
    // No quantizable op.
    let mut g = small_model();
    g.nodes.retain(|n| n.name == "relu1");
    g.nodes[0].inputs[0] = "x".into();
    g.nodes[0].outputs[0] = "prob".into();
    let e =
        quantize_static(g, &mut sample_data(), &PtqConfig::default(), &mut |_, _| {}).unwrap_err();
    assert!(matches!(e, PtqError::NothingToQuantize(_)), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

fn write_npy_f32(path: &std::path::Path, shape: &[usize], v: &[f32]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
        dims.join(", ")
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((header.len() as u16).to_le_bytes());
    b.extend(header.as_bytes());
    for x in v {
        b.extend(x.to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
}

/// Runs `model` in ONNX Runtime on `x` (via python3); `None` (with a printed reason) when
/// onnxruntime is missing outside CI.
fn run_ort(
    model: &std::path::Path,
    input: &str,
    x: &Tensor,
    out: usize,
    optimize: bool,
) -> Option<Vec<f32>> {
    let dir = model.parent().unwrap();
    let xin = dir.join("ort_in.npy");
    let xout = dir.join("ort_out.bin");
    write_npy_f32(&xin, &x.shape, &x.to_f32_vec());
    let script = format!(
        "import numpy as np, onnxruntime as ort\n\
         o = ort.SessionOptions(); o.intra_op_num_threads = 1\n\
         o.graph_optimization_level = ort.GraphOptimizationLevel.{}\n\
         s = ort.InferenceSession(r'{}', o, providers=['CPUExecutionProvider'])\n\
         y = s.run(None, {{'{}': np.load(r'{}')}})[{}]\n\
         y.astype(np.float32).tofile(r'{}')\n",
        if optimize {
            "ORT_ENABLE_ALL"
        } else {
            "ORT_DISABLE_ALL"
        },
        model.display(),
        input,
        xin.display(),
        out,
        xout.display()
    );
    let probe = std::process::Command::new("python3")
        .args(["-c", "import onnxruntime, numpy"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        assert!(
            !ci(),
            "CI=true but python3 with onnxruntime+numpy is not available"
        );
        eprintln!("skipping the ONNX Runtime check: python3 with onnxruntime+numpy not found");
        return None;
    }
    let o = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "onnxruntime failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let bytes = std::fs::read(&xout).unwrap();
    Some(
        bytes
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    )
}

#[test]
fn written_qdq_model_runs_in_onnx_runtime_and_agrees() {
    let (q, _) = quantize_small(&PtqConfig {
        calib_samples: Some(256),
        ..Default::default()
    });
    let dir = std::env::temp_dir().join(format!("quantkit-ptq-ort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("small.qdq.onnx");
    quantkit_graph::save_model(&q, &path).unwrap();
    // Re-import what was written: the file round-trips.
    let q2 = quantkit_graph::load_model(&path).unwrap();
    let x = sample_batch(500);
    let ours = run(&q2, "x", &x, 0);
    // Without graph optimisations ORT runs the Q/DQ nodes as written (float-exact), so
    // it must match quantkit's execution of the same graph.
    let Some(plain) = run_ort(&path, "x", &x, 0, false) else {
        return;
    };
    let t = Tensor::from_f32(&ours.shape, plain);
    let agree = agreement(&argmax_rows(&ours), &argmax_rows(&t));
    let max = ours
        .to_f32_vec()
        .iter()
        .zip(t.to_f32_vec())
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!(
        "ORT (no fusion) vs quantkit on the QDQ model: agreement {agree:.4}, max |diff| {max:e}"
    );
    assert!(agree >= 0.995, "agreement {agree}");
    // With all optimisations ORT fuses the QDQ pattern into its int8 kernels.
    let fused = run_ort(&path, "x", &x, 0, true).unwrap();
    let t = Tensor::from_f32(&ours.shape, fused);
    let agree = agreement(&argmax_rows(&ours), &argmax_rows(&t));
    let cos = cosine(&ours.to_f32_vec(), &t.to_f32_vec());
    eprintln!("ORT int8 (fused) vs quantkit on the QDQ model: top-1 agreement {agree:.4}, cosine {cos:.6}");
    assert!(agree >= 0.97, "agreement {agree}");
    // The integer engine on the re-imported file against both ORT runs: ORT without fusion
    // is the QDQ graph's exact meaning; ORT's fused int8 kernels saturate 16-bit pair sums
    // on AVX2 machines without VNNI, hence the looser bound there.
    let plan = quantkit_engine::compile(&q2, &quantkit_engine::EngineOptions::default())
        .expect("the engine compiles the written QDQ model");
    let engine = plan.run(vec![("x", x.clone())]).expect("engine runs")[0]
        .1
        .clone();
    let plain = Tensor::from_f32(&ours.shape, run_ort(&path, "x", &x, 0, false).unwrap());
    let agree_plain = agreement(&argmax_rows(&engine), &argmax_rows(&plain));
    let agree_fused = agreement(&argmax_rows(&engine), &argmax_rows(&t));
    eprintln!(
        "integer engine vs ORT: top-1 agreement {agree_plain:.4} (Q/DQ as written), \
         {agree_fused:.4} (ORT int8 kernels)"
    );
    assert!(
        agree_plain >= 0.995,
        "engine vs ORT agreement {agree_plain}"
    );
    assert!(
        agree_fused >= 0.97,
        "engine vs ORT int8 agreement {agree_fused}"
    );
    // 7-bit weights (ONNX Runtime's `reduce_range`): |u8·s7 + u8·s7| ≤ 255·63·2 < 2^15, so
    // ORT's saturating kernels are exact and its int8 run agrees with the engine.
    let mut config = PtqConfig {
        calib_samples: Some(256),
        ..Default::default()
    };
    config.qdq.weight_bits = 7;
    let (q7, _) = quantize_small(&config);
    let path7 = dir.join("small.qdq7.onnx");
    quantkit_graph::save_model(&q7, &path7).unwrap();
    let plan7 = quantkit_engine::compile(
        &quantkit_graph::load_model(&path7).unwrap(),
        &quantkit_engine::EngineOptions::default(),
    )
    .unwrap();
    let engine7 = plan7.run(vec![("x", x.clone())]).unwrap()[0].1.clone();
    let fused7 = Tensor::from_f32(&ours.shape, run_ort(&path7, "x", &x, 0, true).unwrap());
    let agree7 = agreement(&argmax_rows(&engine7), &argmax_rows(&fused7));
    eprintln!("7-bit weights: integer engine vs ORT int8 kernels: top-1 agreement {agree7:.4}");
    assert!(
        agree7 >= 0.995,
        "7-bit engine vs ORT int8 agreement {agree7}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Quantizes a real model from ../shared/models on its own inputs and checks the QDQ
/// model (run by quantkit's executor) against the float reference outputs.
/// Returns (accuracy of the QDQ model, accuracy of the float reference, cosine of the
/// checked output vs the reference).
fn real_model(
    dir: &str,
    model: &str,
    input: &str,
    reference: &str,
    labels: &str,
    out: usize,
    face: bool,
) -> Option<(f64, f64, f64)> {
    let d = shared().join("models").join(dir);
    if !d.join(model).is_file() {
        assert!(!ci(), "CI=true but {} is missing", d.display());
        eprintln!("skipping: {} not found", d.join(model).display());
        return None;
    }
    let g = quantkit_graph::load_model(d.join(model)).unwrap();
    let in_name = g.inputs[0].name.clone();
    let mut data = open_data(d.join(input), &OpenOptions::default()).unwrap();
    let (q, _) = quantize_static(g, &mut data, &PtqConfig::default(), &mut |_, _| {}).unwrap();
    let open = |f: &str| {
        let mut s = open_data(d.join(f), &OpenOptions::default()).unwrap();
        let n = s.len();
        let b = s
            .batches(&BatchOptions {
                batch_size: n,
                ..Default::default()
            })
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        Tensor::from_f32(&b.shape, b.data)
    };
    let x = open(input);
    let r = open(reference);
    let labels: Vec<i64> =
        quantkit_data::source::read_labels_npy(&d.join(labels), x.shape[0]).unwrap();
    let y = execute(&q, vec![(in_name, x)]).unwrap()[out].1.clone();
    let (yv, rv) = (y.to_f32_vec(), r.to_f32_vec());
    let pred = |v: &[f32]| -> Vec<i64> {
        if face {
            v.chunks(2).map(|c| i64::from(c[1] > 0.5)).collect()
        } else {
            v.chunks(2).map(|c| i64::from(c[1] > c[0])).collect()
        }
    };
    let acc = |p: Vec<i64>| {
        p.iter().zip(&labels).filter(|(a, b)| a == b).count() as f64 / labels.len() as f64
    };
    let cos = if face {
        let f = |v: &[f32]| v.chunks(2).map(|c| c[1]).collect::<Vec<_>>();
        cosine(&f(&yv), &f(&rv))
    } else {
        cosine(&yv, &rv)
    };
    Some((acc(pred(&yv)), acc(pred(&rv)), cos))
}

#[test]
#[ignore = "real models, several seconds in the dev profile: run with --release -- --ignored"]
fn mtcnn_rnet_onet_keep_accuracy() {
    for (m, inp, refo, out) in [
        ("rnet.onnx", "rnet_input.npy", "rnet_ref_output_1.npy", 1),
        ("onet.onnx", "onet_input.npy", "onet_ref_output_2.npy", 2),
    ] {
        let Some((acc, facc, cos)) = real_model("mtcnn", m, inp, refo, "labels.npy", out, true)
        else {
            return;
        };
        eprintln!("{m}: QDQ accuracy {acc:.3} (float {facc:.3}), face-probability cosine {cos:.5}");
        assert!(acc >= facc, "{m}: accuracy {acc} < float {facc}");
        assert!(cos >= 0.995, "{m}: cosine {cos}");
    }
}

#[test]
#[ignore = "real model, ~1 min in the dev profile: run with --release -- --ignored"]
fn ppocr_cls_keeps_accuracy() {
    let Some((acc, facc, cos)) = real_model(
        "ppocr-cls",
        "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "cls_input.npy",
        "cls_ref_output.npy",
        "cls_labels.npy",
        0,
        false,
    ) else {
        return;
    };
    eprintln!("ppocr-cls: QDQ accuracy {acc:.4} (float {facc:.4}), probability cosine {cos:.5}");
    assert!(acc >= facc - 0.01, "accuracy {acc} vs float {facc}");
}

/// Conv(1→6, 3×3/2) → Relu → ConvTranspose(6→4, 2×2/2) → Add(bias [1,4,1,1]) → BN → Relu →
/// ConvTranspose(4→4, group 2, 2×2/2) → Add(bias) → BN, on [N, 1, 28, 28]: the PP-OCR
/// detector head's shape (PaddlePaddle writes the transposed conv's bias as an Add).
fn deconv_model() -> Graph {
    let mut g = Graph {
        name: "deconv".into(),
        opset_imports: vec![(String::new(), 13)],
        ..Default::default()
    };
    g.meta.ir_version = 8;
    let mut vi = ValueInfo::new("x", DType::F32, &[1, 1, 28, 28]);
    vi.shape.as_mut().unwrap()[0] = quantkit_graph::Dim::Symbolic("N".into());
    g.inputs.push(vi);
    g.outputs.push(ValueInfo {
        name: "y".into(),
        dtype: Some(DType::F32),
        onnx_elem_type: DType::F32.onnx_code(),
        shape: None,
    });
    let init = |g: &mut Graph, name: &str, shape: &[usize], v: Vec<f32>| {
        g.initializers
            .insert(name.into(), Tensor::from_f32(shape, v));
    };
    init(&mut g, "w0", &[6, 1, 3, 3], rand_vec(54, 0.6, 11));
    init(&mut g, "b0", &[6], rand_vec(6, 0.1, 12));
    init(&mut g, "wt1", &[6, 4, 2, 2], rand_vec(96, 0.5, 13));
    init(&mut g, "bt1", &[1, 4, 1, 1], rand_vec(4, 0.3, 14));
    init(&mut g, "wt2", &[4, 2, 2, 2], rand_vec(32, 0.5, 15));
    init(&mut g, "bt2", &[1, 4, 1, 1], rand_vec(4, 0.3, 16));
    for (k, seed) in [("1", 20), ("2", 30)] {
        let gamma: Vec<f32> = rand_vec(4, 0.5, seed).iter().map(|v| 1.0 + v).collect();
        init(&mut g, &format!("gamma{k}"), &[4], gamma);
        init(
            &mut g,
            &format!("beta{k}"),
            &[4],
            rand_vec(4, 0.2, seed + 1),
        );
        init(
            &mut g,
            &format!("mean{k}"),
            &[4],
            rand_vec(4, 0.2, seed + 2),
        );
        let var: Vec<f32> = rand_vec(4, 0.3, seed + 3)
            .iter()
            .map(|v| 0.5 + v.abs())
            .collect();
        init(&mut g, &format!("var{k}"), &[4], var);
    }
    let bn = |k: &str, x: &str, y: &str| {
        Node::new(
            &format!("bn{k}"),
            "BatchNormalization",
            &[
                x,
                &format!("gamma{k}"),
                &format!("beta{k}"),
                &format!("mean{k}"),
                &format!("var{k}"),
            ],
            &[y],
        )
    };
    g.nodes = vec![
        Node::new("conv0", "Conv", &["x", "w0", "b0"], &["c0"])
            .with_attr("strides", AttrValue::Ints(vec![2, 2]))
            .with_attr("pads", AttrValue::Ints(vec![1, 1, 1, 1])),
        Node::new("relu0", "Relu", &["c0"], &["r0"]),
        Node::new("deconv1", "ConvTranspose", &["r0", "wt1"], &["d1"])
            .with_attr("strides", AttrValue::Ints(vec![2, 2])),
        Node::new("add1", "Add", &["d1", "bt1"], &["a1"]),
        bn("1", "a1", "n1"),
        Node::new("relu1", "Relu", &["n1"], &["r1"]),
        Node::new("deconv2", "ConvTranspose", &["r1", "wt2"], &["d2"])
            .with_attr("strides", AttrValue::Ints(vec![2, 2]))
            .with_attr("group", AttrValue::Int(2)),
        Node::new("add2", "Add", &["bt2", "d2"], &["a2"]),
        bn("2", "a2", "y"),
    ];
    g
}

/// The PP-OCR detector head (issue 19): the bias Adds and BatchNormalizations fold into
/// the ConvTransposes (the float function unchanged), the weights are quantized per output
/// channel on axis 1 (group 1; per tensor with groups, where ONNX's axis-1 parameters would
/// be shared by the groups), the quantized file runs in ONNX Runtime, and the integer
/// engine runs every ConvTranspose as an integer step and agrees with ONNX Runtime.
#[test]
fn conv_transpose_bias_and_batch_norm_fold_and_quantize() {
    let g = deconv_model();
    let x = sample_batch(32);
    let want = run(&g, "x", &x, 0);
    let mut h = g.clone();
    quantkit_ptq::prepare(&mut h).unwrap();
    let kinds: Vec<&str> = h.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(
        kinds,
        ["Conv", "Relu", "ConvTranspose", "Relu", "ConvTranspose"],
        "{kinds:?}"
    );
    let got = run(&h, "x", &x, 0);
    let (a, b) = (want.to_f32_vec(), got.to_f32_vec());
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    let max = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(
        max <= 1e-5 * scale.max(1.0),
        "folded vs unfolded max |diff| {max} (scale {scale})"
    );

    let mut data = sample_data();
    let (q, _) = quantize_static(
        g,
        &mut data,
        &PtqConfig {
            calib_samples: Some(128),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    assert!(!q
        .nodes
        .iter()
        .any(|n| n.op_type == "BatchNormalization" || n.op_type == "Add"));
    let axis_of = |deconv: &str| {
        let n = q.nodes.iter().find(|n| n.name == deconv).unwrap();
        let dq = q
            .nodes
            .iter()
            .find(|d| d.outputs[0] == n.inputs[1])
            .unwrap();
        (
            dq.attr_int("axis", 1).unwrap(),
            q.initializers[&dq.inputs[1]].len(),
        )
    };
    assert_eq!(axis_of("deconv1"), (1, 4));
    assert_eq!(axis_of("deconv2").1, 1);

    let plan = quantkit_engine::compile(&q, &quantkit_engine::EngineOptions::default()).unwrap();
    for name in ["deconv1", "deconv2"] {
        let r = plan.report().iter().find(|r| r.node == name).unwrap();
        assert!(r.is_integer(), "{name}: {:?}", r.placement);
    }
    let engine = plan.run(vec![("x", x.clone())]).unwrap()[0].1.clone();
    let qdq = run(&q, "x", &x, 0);
    let cos_qdq = cosine(&engine.to_f32_vec(), &qdq.to_f32_vec());
    let cos_float = cosine(&engine.to_f32_vec(), &want.to_f32_vec());
    eprintln!("deconv head: engine vs QDQ graph cosine {cos_qdq:.6}, vs float {cos_float:.6}");
    assert!(cos_qdq > 0.9999, "engine vs QDQ graph cosine {cos_qdq}");
    assert!(cos_float > 0.99, "engine vs float cosine {cos_float}");

    let dir = std::env::temp_dir().join(format!("quantkit-ptq-deconv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("deconv.qdq.onnx");
    quantkit_graph::save_model(&q, &path).unwrap();
    for optimize in [false, true] {
        let Some(o) = run_ort(&path, "x", &x, 0, optimize) else {
            return;
        };
        let cos = cosine(&engine.to_f32_vec(), &o);
        eprintln!("deconv head: engine vs ONNX Runtime (optimize {optimize}) cosine {cos:.6}");
        assert!(
            cos > 0.999,
            "engine vs ONNX Runtime (optimize {optimize}) cosine {cos}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
