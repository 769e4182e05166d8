//! A batch run in chunks of whole images (`batch.rs`, issue 19: 2-thread scaling at large
//! batches) gives the same bytes as the whole batch run by the kernels, for any thread
//! count and any chunk size: on a detector-like QDQ model (the PP-OCRv4 detector's ops:
//! strided conv + HardSwish, depthwise conv, squeeze-and-excite with GlobalAveragePool,
//! nearest Resize ×2, Add, Concat, ConvTranspose, Sigmoid) and on the zoo models (Flatten →
//! Gemm heads). A plan with a step that mixes images (Reshape of the batch away) is not
//! chunked.

mod common;

use common::Lcg;
use quantkit_data::source::ArrayDataset;
use quantkit_data::DataSource;
use quantkit_engine::{chunked_runs, compile, set_batch_chunk, BatchChunk, EngineOptions};
use quantkit_graph::{load_model, AttrValue, DType, Dim, Graph, Node, Tensor, ValueInfo};
use quantkit_ptq::{quantize_static, PtqConfig};
use std::sync::Mutex;

/// The chunk override and the counters are process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn weights(rng: &mut Lcg, shape: &[usize], scale: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, (0..n).map(|_| rng.float(-scale, scale)).collect())
}

/// Conv `[x, w, b] → y` with square strides and pads.
fn conv(name: &str, io: [&str; 4], stride: i64, pad: i64, group: i64) -> Node {
    let [x, w, b, y] = io;
    Node::new(name, "Conv", &[x, w, b], &[y])
        .with_attr("strides", AttrValue::Ints(vec![stride, stride]))
        .with_attr("pads", AttrValue::Ints(vec![pad; 4]))
        .with_attr("group", AttrValue::Int(group))
}

/// `x · HardSigmoid(x)` as PP-OCRv4 exports HardSwish.
fn hardswish(name: &str, x: &str, y: &str) -> Vec<Node> {
    let h = format!("{name}_hs");
    vec![
        Node::new(&format!("{name}_hsig"), "HardSigmoid", &[x], &[&h])
            .with_attr("alpha", AttrValue::Float(1.0 / 6.0))
            .with_attr("beta", AttrValue::Float(0.5)),
        Node::new(&format!("{name}_mul"), "Mul", &[x, &h], &[y]),
    ]
}

/// The detector-like float model on `[N, 3, side, side]` (batch symbolic).
fn detector_like(side: usize) -> Graph {
    let mut rng = Lcg(19);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    let mut x = ValueInfo::new("x", DType::F32, &[1, 3, side, side]);
    x.shape.as_mut().unwrap()[0] = Dim::Symbolic("N".into());
    g.inputs = vec![x];
    let mut y = ValueInfo::new("y", DType::F32, &[1, 1, side, side]);
    y.shape.as_mut().unwrap()[0] = Dim::Symbolic("N".into());
    g.outputs = vec![y];
    let gi = &mut g.initializers;
    // (name, [c_out, c_in/group, k, k])
    for (name, shape) in [
        ("w1", [8, 3, 3, 3]),
        ("wd", [8, 1, 3, 3]),
        ("ws1", [4, 8, 1, 1]),
        ("ws2", [8, 4, 1, 1]),
        ("w2", [16, 8, 1, 1]),
        ("w3", [8, 16, 3, 3]),
        ("wl", [8, 8, 1, 1]),
    ] {
        let fan: usize = shape[1..].iter().product();
        gi.insert(
            name.into(),
            weights(&mut rng, &shape, 1.5 / (fan as f32).sqrt()),
        );
        gi.insert(format!("{name}b"), weights(&mut rng, &[shape[0]], 0.1));
    }
    // ConvTranspose 16 → 1, kernel 2, stride 2: weights [c_in, c_out, 2, 2].
    gi.insert("wt".into(), weights(&mut rng, &[16, 1, 2, 2], 0.3));
    gi.insert("wtb".into(), weights(&mut rng, &[1], 0.1));
    gi.insert("roi".into(), Tensor::from_f32(&[0], vec![]));
    gi.insert(
        "scales".into(),
        Tensor::from_f32(&[4], vec![1.0, 1.0, 2.0, 2.0]),
    );
    let mut nodes = vec![conv("c1", ["x", "w1", "w1b", "c1o"], 2, 1, 1)];
    nodes.extend(hardswish("a1", "c1o", "a1o"));
    nodes.push(conv("dw", ["a1o", "wd", "wdb", "dwo"], 1, 1, 8));
    nodes.push(Node::new("dwr", "Relu", &["dwo"], &["dwr"]));
    // Squeeze and excite.
    nodes.push(Node::new("gap", "GlobalAveragePool", &["dwr"], &["gap"]));
    nodes.push(conv("se1", ["gap", "ws1", "ws1b", "se1o"], 1, 0, 1));
    nodes.push(Node::new("se1r", "Relu", &["se1o"], &["se1r"]));
    nodes.push(conv("se2", ["se1r", "ws2", "ws2b", "se2o"], 1, 0, 1));
    nodes.push(
        Node::new("sehs", "HardSigmoid", &["se2o"], &["seg"])
            .with_attr("alpha", AttrValue::Float(0.2))
            .with_attr("beta", AttrValue::Float(0.5)),
    );
    nodes.push(Node::new("se", "Mul", &["dwr", "seg"], &["seo"]));
    // Down, 1×1 up, back at the first resolution by nearest Resize ×2, then FPN-style add
    // and concat.
    nodes.push(conv("c2", ["seo", "w2", "w2b", "c2o"], 1, 0, 1));
    nodes.extend(hardswish("a2", "c2o", "a2o"));
    nodes.push(conv("c3", ["a2o", "w3", "w3b", "c3o"], 2, 1, 1));
    nodes.push(
        Node::new("up", "Resize", &["c3o", "roi", "scales"], &["upo"])
            .with_attr("mode", AttrValue::String(b"nearest".to_vec()))
            .with_attr(
                "coordinate_transformation_mode",
                AttrValue::String(b"asymmetric".to_vec()),
            )
            .with_attr("nearest_mode", AttrValue::String(b"floor".to_vec())),
    );
    nodes.push(conv("lat", ["seo", "wl", "wlb", "lato"], 1, 0, 1));
    nodes.push(Node::new("add", "Add", &["upo", "lato"], &["addo"]));
    nodes.push(
        Node::new("cat", "Concat", &["addo", "upo"], &["cato"])
            .with_attr("axis", AttrValue::Int(1)),
    );
    nodes.push(
        Node::new("deconv", "ConvTranspose", &["cato", "wt", "wtb"], &["dco"])
            .with_attr("strides", AttrValue::Ints(vec![2, 2])),
    );
    nodes.push(Node::new("sig", "Sigmoid", &["dco"], &["y"]));
    g.nodes = nodes;
    g
}

fn batch(n: usize, side: usize, seed: u64) -> Tensor {
    let mut rng = Lcg(seed);
    let len = n * 3 * side * side;
    Tensor::from_f32(
        &[n, 3, side, side],
        (0..len).map(|_| rng.float(-1.0, 1.0)).collect(),
    )
}

fn quantize(g: Graph, calib: Tensor) -> Graph {
    let sample = calib.shape[1..].to_vec();
    let mut data = DataSource::Samples(Box::new(
        ArrayDataset::new("synthetic", calib.to_f32_vec(), sample, None).unwrap(),
    ));
    let config = PtqConfig {
        calib_samples: Some(8),
        ..Default::default()
    };
    quantize_static(g, &mut data, &config, &mut |_, _| {})
        .unwrap()
        .0
}

fn bits(out: &[(String, Tensor)]) -> Vec<(String, Vec<usize>, Vec<u32>)> {
    out.iter()
        .map(|(n, t)| {
            (
                n.clone(),
                t.shape.clone(),
                t.to_f32_vec().iter().map(|v| v.to_bits()).collect(),
            )
        })
        .collect()
}

fn in_pool<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

/// Runs `plan` on `x` whole (chunks off, 1 thread) and under every chunking on 1, 2 and 3
/// threads: every run must give the whole run's bytes; returns how many runs were chunked
/// (in parallel, in sequence).
fn chunkings_agree(name: &str, g: &Graph, x: &Tensor, chunkings: &[BatchChunk]) -> (usize, usize) {
    let plan = compile(g, &EngineOptions::default()).unwrap();
    assert!(plan.image_separable(), "{name}: plan not image-separable");
    let input = g.inputs[0].name.clone();
    let run = || plan.run(vec![(input.clone(), x.clone())]).unwrap();
    set_batch_chunk(Some(BatchChunk::Off));
    let before = chunked_runs();
    let whole = bits(&in_pool(1, run));
    assert_eq!(chunked_runs(), before, "{name}: chunks off still chunked");
    assert!(whole.iter().all(|(_, _, v)| !v.is_empty()));
    for &c in chunkings {
        set_batch_chunk(Some(c));
        for threads in [1, 2, 3] {
            assert_eq!(
                bits(&in_pool(threads, run)),
                whole,
                "{name}: {c:?} on {threads} threads differs from the whole batch"
            );
        }
    }
    set_batch_chunk(None);
    let after = chunked_runs();
    (after.0 - before.0, after.1 - before.1)
}

#[test]
fn detector_like_model_in_chunks_equals_the_whole_batch_on_any_thread_count() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let side = 32;
    let q = quantize(detector_like(side), batch(8, side, 1));
    // Every op of the detector-like model runs on codes: no float island hides a
    // difference.
    let plan = compile(&q, &EngineOptions::default()).unwrap();
    let floats: Vec<_> = plan
        .report()
        .iter()
        .filter(|r| matches!(r.placement, quantkit_engine::Placement::Float { .. }))
        .map(|r| (r.node.clone(), r.op_type.clone()))
        .collect();
    assert!(floats.is_empty(), "float islands: {floats:?}");
    let x = batch(6, side, 2);
    let (par, seq) = chunkings_agree(
        "detector-like",
        &q,
        &x,
        &[
            BatchChunk::Images(1),
            BatchChunk::Images(2),
            BatchChunk::Images(4),
            BatchChunk::Auto,
        ],
    );
    // 6 chunks of 1 (parallel on 2 and 3 threads), 3 chunks of 2 (parallel on 3 threads,
    // in sequence on 1 and 2), 2 chunks of 3 and 3 (parallel on 2): at least these.
    assert!(par >= 4, "parallel chunked runs: {par}");
    assert!(seq >= 3, "sequential chunked runs: {seq}");
}

#[test]
fn auto_chunks_large_images_one_per_chunk() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 3×300×300 = 270,000 input elements per image > CHUNK_INPUT_ELEMS: one image per
    // chunk, 2 chunks on 2 threads run in parallel.
    let side = 300;
    assert!(3 * side * side > quantkit_engine::CHUNK_INPUT_ELEMS);
    let q = quantize(detector_like(side), batch(2, side, 3));
    let plan = compile(&q, &EngineOptions::default()).unwrap();
    let x = batch(2, side, 4);
    let run = || plan.run(vec![("x".to_string(), x.clone())]).unwrap();
    set_batch_chunk(Some(BatchChunk::Off));
    let whole = bits(&in_pool(1, run));
    set_batch_chunk(Some(BatchChunk::Auto));
    let before = chunked_runs();
    let two = bits(&in_pool(2, run));
    let after = chunked_runs();
    set_batch_chunk(None);
    assert_eq!(
        two, whole,
        "auto chunks on 2 threads differ from the whole batch"
    );
    assert_eq!(
        after.0 - before.0,
        1,
        "the 2-image batch did not run as 2 parallel chunks"
    );
}

#[test]
fn zoo_models_in_chunks_equal_the_whole_batch() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let repo = common::repo();
    let mut d = quantkit_data::open_data(
        repo.join("data/fashion-mnist-sample"),
        &quantkit_data::OpenOptions::default(),
    )
    .unwrap();
    let b = d
        .batches(&quantkit_data::BatchOptions {
            batch_size: 9,
            limit: Some(9),
            ..Default::default()
        })
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let x = Tensor::from_f32(&b.shape, b.data);
    for m in ["lenet", "resnet8", "mobilenet"] {
        let float = load_model(repo.join(format!("models/{m}.onnx"))).unwrap();
        let q = quantize(float, x.clone());
        let (par, seq) =
            chunkings_agree(m, &q, &x, &[BatchChunk::Images(1), BatchChunk::Images(4)]);
        assert!(
            par > 0 && seq > 0,
            "{m}: chunked runs {par} parallel, {seq} sequential"
        );
    }
}

#[test]
fn a_plan_that_reshapes_the_batch_away_is_not_chunked() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // x [N, 4] → Reshape [1, 4N] → Relu: one output row mixes every image.
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    let mut x = ValueInfo::new("x", DType::F32, &[1, 4]);
    x.shape.as_mut().unwrap()[0] = Dim::Symbolic("N".into());
    g.inputs = vec![x];
    g.outputs = vec![ValueInfo::new("y", DType::F32, &[])];
    g.initializers
        .insert("shape".into(), Tensor::from_i64(&[2], vec![1, -1]));
    g.nodes = vec![
        Node::new("r", "Reshape", &["x", "shape"], &["xr"]),
        Node::new("relu", "Relu", &["xr"], &["y"]),
    ];
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    assert!(!plan.image_separable());
    set_batch_chunk(Some(BatchChunk::Images(1)));
    let before = chunked_runs();
    let x = Tensor::from_f32(&[3, 4], (0..12).map(|i| i as f32 - 6.0).collect());
    let y = in_pool(2, || plan.run(vec![("x", x)]).unwrap()).remove(0).1;
    set_batch_chunk(None);
    assert_eq!(chunked_runs(), before);
    assert_eq!(y.shape, vec![1, 12]);
}

#[test]
fn a_batch_the_model_does_not_declare_is_refused_not_chunked() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The detector-like model with its batch fixed to 1: 2 images must fail as they do
    // unchunked, even though each one-image chunk would fit.
    let side = 32;
    let mut q = quantize(detector_like(side), batch(2, side, 5));
    q.inputs[0].shape.as_mut().unwrap()[0] = Dim::Known(1);
    let plan = compile(&q, &EngineOptions::default()).unwrap();
    set_batch_chunk(Some(BatchChunk::Images(1)));
    let got = in_pool(2, || plan.run(vec![("x", batch(2, side, 6))]));
    set_batch_chunk(None);
    let err = got.expect_err("batch 2 accepted by a model declaring batch 1");
    assert!(err.to_string().contains('x'), "{err}");
}
