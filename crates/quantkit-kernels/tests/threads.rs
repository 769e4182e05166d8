//! Batch-1 parallelism inside one kernel call (issue 19): every conv path (im2col GEMM,
//! Winograd split by bands and by column panels, the direct conv, the few-channel conv
//! fused with its pool, im2col fused with its pool, depthwise) and max pooling give
//! bit-identical outputs in rayon pools of 1, 2 and 3 threads on every ISA the CPU has,
//! and the split they rely on happened (`par::split_calls`, so the test fails if a path
//! silently stays on one thread). Layers large enough to pass the default threshold
//! (`par::MIN_TASK_NS`) are run under it; small ones also under a threshold of 0, which
//! splits every call with more than one unit of work.

use std::sync::Mutex;

use quantkit_kernels::conv::{
    conv2d_output_shape, conv2d_quant_max_pool_with, conv2d_quant_with, ConvAlgorithm, ConvParams,
    ConvWeights, NhwcInput,
};
use quantkit_kernels::output::OutputStage;
use quantkit_kernels::par::{self, SplitKind};
use quantkit_kernels::pool::max_pool;
use quantkit_kernels::Isa;

mod common;
use common::supported;

/// The threshold and the counters are process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

fn k3(stride: usize) -> ConvParams {
    ConvParams {
        pads: [1; 4],
        stride: [stride; 2],
        ..ConvParams::new(3, 3)
    }
}

/// One batch-1 layer: `[h, w, c_in] → c_out`, its params, the algorithm forced, whether a
/// 2×2 max pool is fused, and the split kind it must show.
struct Layer {
    name: &'static str,
    hwc: [usize; 3],
    c_out: usize,
    params: ConvParams,
    algo: ConvAlgorithm,
    pooled: bool,
    kind: SplitKind,
}

/// Runs `layer` on `isa` in a pool of each thread count and checks every output equals
/// the 1-thread output, and that the multi-thread runs raised the split counter of the
/// layer's kind (and the 1-thread run raised none).
fn check_layer(layer: &Layer, isa: Isa, method: &str) {
    let [h, w, c] = layer.hwc;
    let mut rng = Rng(0x5eed ^ (h * 131 + c) as u64);
    let x: Vec<u8> = (0..h * w * c).map(|_| rng.next() as u8).collect();
    let cin_g = c / layer.params.groups;
    let [kh, kw] = layer.params.kernel;
    let wt: Vec<i8> = (0..layer.c_out * cin_g * kh * kw)
        .map(|_| rng.next() as i8)
        .collect();
    let cw =
        ConvWeights::for_isa(&wt, layer.c_out, c, layer.params, &[0], layer.algo, isa).unwrap();
    assert_eq!(cw.method(), method, "{}: path", layer.name);
    let input = NhwcInput {
        data: &x,
        shape: [1, h, w, c],
        zero_point: 117,
    };
    let scales: Vec<f32> = (0..layer.c_out)
        .map(|i| 2e-4 * (1 + i % 7) as f32)
        .collect();
    let bias: Vec<i32> = (0..layer.c_out)
        .map(|_| (rng.next() % 20001) as i32 - 10000)
        .collect();
    let stage = OutputStage::float(scales, 9).with_bias(bias);
    let [n, oh, ow, co] = conv2d_output_shape(input.shape, &cw).unwrap();
    let run = || {
        if layer.pooled {
            let mut out = vec![0u8; n * (oh / 2) * (ow / 2) * co];
            let p = ConvParams {
                stride: [2, 2],
                ..ConvParams::new(2, 2)
            };
            conv2d_quant_max_pool_with(isa, &input, &cw, &stage, &p, &mut out).unwrap();
            out
        } else {
            let mut out = vec![0u8; n * oh * ow * co];
            conv2d_quant_with(isa, &input, &cw, &stage, &mut out).unwrap();
            out
        }
    };
    let before = par::split_calls(layer.kind);
    let one = pool(1).install(run);
    assert_eq!(
        par::split_calls(layer.kind),
        before,
        "{} on {isa}: a 1-thread pool split",
        layer.name
    );
    for threads in [2, 3] {
        let before = par::split_calls(layer.kind);
        let got = pool(threads).install(run);
        assert!(
            got == one,
            "{} on {isa}: {threads} threads differ from 1",
            layer.name
        );
        assert!(
            par::split_calls(layer.kind) > before,
            "{} on {isa}: {threads} threads did not split ({:?})",
            layer.name,
            layer.kind
        );
    }
}

/// Layers as large as a real network's at batch 1 split under the default threshold.
#[test]
fn batch_one_layers_split_under_the_default_threshold_and_stay_bit_identical() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    par::set_min_task_ns(None);
    if par::min_task_ns() > par::MIN_TASK_NS {
        eprintln!(
            "skipping: QUANTKIT_MIN_TASK_NS={} is above the default {}",
            par::min_task_ns(),
            par::MIN_TASK_NS
        );
        return;
    }
    let layers = [
        Layer {
            name: "resnet conv2_x 56x56x64->64 winograd",
            hwc: [56, 56, 64],
            c_out: 64,
            params: k3(1),
            algo: ConvAlgorithm::Winograd,
            pooled: false,
            kind: SplitKind::Winograd,
        },
        Layer {
            name: "resnet 3x3 stride 2 56x56x64->128 im2col",
            hwc: [56, 56, 64],
            c_out: 128,
            params: k3(2),
            algo: ConvAlgorithm::Im2col,
            pooled: false,
            kind: SplitKind::Gemm,
        },
        Layer {
            name: "convnet conv0 64x64x3->32 direct",
            hwc: [64, 64, 3],
            c_out: 32,
            params: k3(1),
            algo: ConvAlgorithm::Direct,
            pooled: false,
            kind: SplitKind::Direct,
        },
        Layer {
            name: "mobilenet dw 112x112x32",
            hwc: [112, 112, 32],
            c_out: 32,
            params: ConvParams {
                groups: 32,
                ..k3(1)
            },
            algo: ConvAlgorithm::Auto,
            pooled: false,
            kind: SplitKind::Depthwise,
        },
    ];
    for isa in supported() {
        for l in &layers {
            let method = match (l.algo, l.kind) {
                (_, SplitKind::Depthwise) => "depthwise",
                (ConvAlgorithm::Winograd, _) => "winograd",
                (ConvAlgorithm::Direct, _) => "direct",
                _ => "gemm",
            };
            check_layer(l, isa, method);
        }
    }
}

/// Every split path, including the small-image ones (Winograd split by column panels,
/// the fused pools), with a threshold of 0.
#[test]
fn every_split_path_is_bit_identical_when_forced() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    par::set_min_task_ns(Some(0.0));
    let layers = [
        // 2 bands of 2 tiles, 16 column panels: more tasks than bands.
        (
            Layer {
                name: "4x4x128->256 winograd (panel split)",
                hwc: [4, 4, 128],
                c_out: 256,
                params: k3(1),
                algo: ConvAlgorithm::Winograd,
                pooled: false,
                kind: SplitKind::Winograd,
            },
            "winograd",
        ),
        (
            Layer {
                name: "14x14x32->64 winograd + pool",
                hwc: [14, 14, 32],
                c_out: 64,
                params: k3(1),
                algo: ConvAlgorithm::Winograd,
                pooled: true,
                kind: SplitKind::Winograd,
            },
            "winograd",
        ),
        (
            Layer {
                name: "28x28x1->32 pairs + pool",
                hwc: [28, 28, 1],
                c_out: 32,
                params: k3(1),
                algo: ConvAlgorithm::Pairs,
                pooled: true,
                kind: SplitKind::PooledRows,
            },
            "gemm-pairs",
        ),
        (
            Layer {
                name: "15x13x8->24 im2col + pool",
                hwc: [15, 13, 8],
                c_out: 24,
                params: k3(1),
                algo: ConvAlgorithm::Im2col,
                pooled: true,
                kind: SplitKind::PooledRows,
            },
            "gemm",
        ),
        (
            Layer {
                name: "17x9x5->40 direct + pool",
                hwc: [17, 9, 5],
                c_out: 40,
                params: k3(1),
                algo: ConvAlgorithm::Direct,
                pooled: true,
                kind: SplitKind::Direct,
            },
            "direct",
        ),
        (
            Layer {
                name: "9x7x16 depthwise",
                hwc: [9, 7, 16],
                c_out: 16,
                params: ConvParams {
                    groups: 16,
                    ..k3(1)
                },
                algo: ConvAlgorithm::Auto,
                pooled: false,
                kind: SplitKind::Depthwise,
            },
            "depthwise",
        ),
        (
            Layer {
                name: "7x7x16->10 1x1",
                hwc: [7, 7, 16],
                c_out: 10,
                params: ConvParams::new(1, 1),
                algo: ConvAlgorithm::Im2col,
                pooled: false,
                kind: SplitKind::Gemm,
            },
            "gemm",
        ),
    ];
    for isa in supported() {
        for (l, method) in &layers {
            check_layer(l, isa, method);
        }
    }
    par::set_min_task_ns(None);
}

/// Max pooling at batch 1 splits output rows; the result does not depend on the split.
#[test]
fn max_pool_rows_split_and_stay_bit_identical() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng(7);
    for (threshold, shape) in [(None, [1, 112, 112, 64]), (Some(0.0), [2, 9, 11, 3])] {
        par::set_min_task_ns(threshold);
        let [n, h, w, c] = shape;
        let x: Vec<u8> = (0..n * h * w * c).map(|_| rng.next() as u8).collect();
        for p in [
            ConvParams {
                stride: [2, 2],
                pads: [1, 1, 1, 1],
                ..ConvParams::new(3, 3)
            },
            ConvParams {
                stride: [2, 2],
                ..ConvParams::new(2, 2)
            },
        ] {
            let [oh, ow] = p.output_size(h, w).unwrap();
            let run = || {
                let mut out = vec![0u8; n * oh * ow * c];
                max_pool(&x, shape, &p, &mut out).unwrap();
                out
            };
            let one = pool(1).install(run);
            for threads in [2, 3] {
                let before = par::split_calls(SplitKind::Pool);
                assert!(
                    pool(threads).install(run) == one,
                    "{shape:?} {threads} threads"
                );
                assert!(
                    par::split_calls(SplitKind::Pool) > before,
                    "{shape:?}: {threads} threads did not split"
                );
            }
        }
    }
    par::set_min_task_ns(None);
}

/// The non-overlapping transposed conv (`deconv` blocks) at batch 1 splits input rows into
/// disjoint bands of output rows; the bytes do not depend on the split, on any ISA.
#[test]
fn deconv_blocks_split_input_rows_and_stay_bit_identical() {
    use quantkit_kernels::deconv::{deconv2d_quant_padded_with, DeconvAlgorithm, DeconvWeights};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = Rng(19);
    // (threshold, input NHWC, c_out, params, pads): the PP-OCRv4 detector's first deconv
    // under the default threshold; small odd shapes (crop, gaps, groups) under 0.
    let k2s2 = ConvParams {
        stride: [2, 2],
        ..ConvParams::new(2, 2)
    };
    let cases = [
        (None, [1, 120, 120, 24], 24, k2s2, [0; 4]),
        (Some(0.0), [2, 7, 5, 6], 4, k2s2, [1, 0, 1, 1]),
        (
            Some(0.0),
            [1, 9, 4, 4],
            6,
            ConvParams {
                stride: [3, 2],
                groups: 2,
                ..ConvParams::new(2, 1)
            },
            [2, 0, 0, 0],
        ),
    ];
    for (threshold, shape, c_out, p, pads) in cases {
        par::set_min_task_ns(threshold);
        let [n, h, w, c] = shape;
        let x: Vec<u8> = (0..n * h * w * c).map(|_| rng.next() as u8).collect();
        let wt: Vec<i8> = (0..c * (c_out / p.groups) * p.kernel[0] * p.kernel[1])
            .map(|_| rng.next() as i8)
            .collect();
        let dw = DeconvWeights::new(&wt, c, c_out, p, [0, 0], &[0])
            .unwrap()
            .with_algorithm(DeconvAlgorithm::Blocks);
        assert_eq!(dw.algorithm(), DeconvAlgorithm::Blocks);
        let stage = OutputStage::float((0..c_out).map(|i| 0.01 + 0.001 * i as f32).collect(), 9)
            .with_bias((0..c_out as i32).map(|i| 50 - 20 * i).collect());
        let input = NhwcInput {
            data: &x,
            shape,
            zero_point: 100,
        };
        let len: usize = dw
            .output_shape_padded(shape, pads)
            .unwrap()
            .iter()
            .product();
        for isa in supported() {
            let run = || {
                let mut out = vec![0u8; len];
                deconv2d_quant_padded_with(isa, &input, &dw, pads, &stage, &mut out).unwrap();
                out
            };
            let before = par::split_calls(SplitKind::Deconv);
            let one = pool(1).install(run);
            assert_eq!(
                par::split_calls(SplitKind::Deconv),
                before,
                "1 thread split"
            );
            for threads in [2, 3] {
                let before = par::split_calls(SplitKind::Deconv);
                assert!(
                    pool(threads).install(run) == one,
                    "{isa} {shape:?} {threads} threads"
                );
                assert!(
                    par::split_calls(SplitKind::Deconv) > before,
                    "{isa} {shape:?}: {threads} threads did not split"
                );
            }
        }
    }
    par::set_min_task_ns(None);
}
