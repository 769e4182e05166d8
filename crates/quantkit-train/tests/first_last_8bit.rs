//! `QatOptions::first_last_8bit` on the committed LeNet at W4A4: the first conv and the
//! last Gemm keep 8-bit weights (codes beyond [-8, 7] in int8 storage, the scale rescaled
//! from PTQ's 4-bit one) and 8-bit input activations, every other weight is int4 and
//! every other activation 4-bit;
//! the export compiles on the engine, and exact mode equals it on held-out images.

use quantkit_graph::{DType, Graph, OpKind, Tensor as GTensor};
use quantkit_train::qat::{Qat, QatOptions};

mod common;
use common::root;

fn weight_of<'g>(g: &'g Graph, node: &quantkit_graph::Node) -> &'g GTensor {
    let dq = g
        .nodes
        .iter()
        .find(|d| d.outputs[0] == node.inputs[1])
        .expect("weight DequantizeLinear");
    &g.initializers[&dq.inputs[0]]
}

#[test]
fn first_and_last_layer_stay_at_8_bits() {
    let mut float = quantkit_graph::load_model(root().join("models/lenet.onnx")).unwrap();
    quantkit_ptq::prepare(&mut float).unwrap();
    let opts = quantkit_data::OpenOptions::default();
    let mut calib =
        quantkit_data::open_data(root().join("data/fashion-mnist-sample"), &opts).unwrap();
    let mut cfg = quantkit_ptq::PtqConfig {
        calib_samples: Some(128),
        ..Default::default()
    };
    cfg.qdq.weight_bits = 4;
    let (qdq, _) =
        quantkit_ptq::quantize_static(float.clone(), &mut calib, &cfg, &mut |_, _| {}).unwrap();
    let qat = Qat::from_ptq(
        &float,
        &qdq,
        &QatOptions {
            weight_bits: 4,
            activation_bits: 4,
            first_last_8bit: true,
            ..Default::default()
        },
    )
    .unwrap();
    let out = qat.export().unwrap();
    let weighted: Vec<&quantkit_graph::Node> = out
        .nodes
        .iter()
        .filter(|n| matches!(n.kind(), Some(OpKind::Conv | OpKind::Gemm | OpKind::MatMul)))
        .collect();
    assert_eq!(weighted.len(), 4);
    for (i, n) in weighted.iter().enumerate() {
        let w = weight_of(&out, n);
        let top = w.to_i64_vec().iter().map(|v| v.abs()).max().unwrap();
        if i == 0 || i == 3 {
            assert_eq!(w.dtype, DType::I8, "`{}`", n.name);
            assert!(top > 8, "`{}`: 8-bit codes reach {top}", n.name);
        } else {
            assert_eq!(w.dtype, DType::I4, "`{}`", n.name);
            assert!(top <= 8, "`{}`", n.name);
        }
    }
    // Activations: conv1's input and fc2's input keep 8-bit codes;
    // every other one (conv outputs, the pooled/flattened codes tied to them, the logits)
    // is 4-bit.
    let acts: Vec<(String, i32)> = qat
        .net
        .fake_quants()
        .filter(|(_, f, _, _)| !f.is_weight)
        .map(|(_, f, _, _)| (f.tensor.clone(), f.qmax))
        .collect();
    let wide: Vec<&String> = acts.iter().filter(|a| a.1 == 255).map(|a| &a.0).collect();
    // LeNet: the input normalisation (`normalize`, a Div) feeds conv1, `relu3` feeds fc2.
    assert_eq!(wide, ["normalize", "relu3"], "{acts:?}");
    assert!(acts.iter().all(|a| a.1 == 255 || a.1 == 15), "{acts:?}");
    let plan = quantkit_engine::compile(&out, &Default::default()).unwrap();
    let exact = qat
        .exact_plan(&out, &plan, quantkit_engine::RequantMode::Float)
        .unwrap();
    let b = calib
        .batches(&quantkit_data::BatchOptions {
            batch_size: 200,
            limit: Some(200),
            ..Default::default()
        })
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let x = GTensor::from_f32(&b.shape, b.data);
    let name = out.inputs[0].name.clone();
    let ey = plan
        .run(vec![(name.as_str(), x.clone())])
        .unwrap()
        .remove(0)
        .1;
    let xy = qat.predict_exact(x, &exact).unwrap();
    assert_eq!(xy.to_f32_vec(), ey.to_f32_vec(), "exact mode = engine");
}
