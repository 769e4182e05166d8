//! The kernel table is the only way to SIMD code: under `QUANTKIT_ISA=scalar` the whole
//! workload (GEMM, every conv path, conv + max pool, max pool, deconv) takes no SIMD entry
//! (`dispatch::simd_calls()` stays 0), and under every SIMD ISA of the machine (forced, or
//! chosen by default) every path takes one.
//!
//! The ISA is chosen once per process, so each case runs in a child process of this test
//! binary with the environment variable set before anything calls `dispatch::isa()`.

use std::process::Command;

use quantkit_kernels::conv::{
    conv2d_i32, conv2d_quant, conv2d_quant_max_pool, ConvAlgorithm, ConvParams, ConvWeights,
    NhwcInput,
};
use quantkit_kernels::deconv::{deconv2d_quant, DeconvWeights};
use quantkit_kernels::dispatch::{self, simd_calls, Isa};
use quantkit_kernels::gemm::{gemm_i32, gemm_quant, Activations, PackedWeights, WeightLayout};
use quantkit_kernels::output::OutputStage;
use quantkit_kernels::pool::max_pool;

/// Set in the child processes.
const CHILD: &str = "QUANTKIT_DISPATCH_TEST_CHILD";

/// Runs test `name` of this binary again in a child process with `QUANTKIT_ISA=isa` (unset
/// for `None`) and checks that it passed.
fn in_child(name: &str, isa: Option<&str>) {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary path"));
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    match isa {
        Some(isa) => cmd.env("QUANTKIT_ISA", isa),
        None => cmd.env_remove("QUANTKIT_ISA"),
    };
    let out = cmd.output().expect("spawn the test binary");
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child `{name}` failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "child `{name}` ran no test:\n{text}"
    );
}

fn bytes(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

fn weights(n: usize, seed: u32) -> Vec<i8> {
    bytes(n, seed).into_iter().map(|b| b as i8).collect()
}

/// One call of every kernel family on the dispatched entry points, each followed by the
/// number of SIMD calls it added.
fn workload() -> Vec<(&'static str, u64)> {
    let mut seen = Vec::new();
    let mut last = simd_calls();
    let mut note = |name: &'static str| {
        let now = simd_calls();
        seen.push((name, now - last));
        last = now;
    };

    // GEMM, i32 and quantized.
    let (m, k, n) = (13, 37, 21);
    let a = bytes(m * k, 1);
    let w = PackedWeights::from_i8(&weights(k * n, 2), k, n, WeightLayout::KxN, &[3]).unwrap();
    let mut c32 = vec![0i32; m * n];
    gemm_i32(&Activations::u8(&a, m, k, 5), &w, &mut c32).unwrap();
    note("gemm_i32");
    let stage = OutputStage::float(vec![0.01], 3);
    let mut c8 = vec![0u8; m * n];
    gemm_quant(&Activations::u8(&a, m, k, 5), &w, &stage, &mut c8).unwrap();
    note("gemm_quant");

    // Convs: Winograd (3×3, C_in ≥ 8), im2col (stride 2), few channels, depthwise.
    // Each path forced (the cost model's choice depends on the ISA).
    let conv = |c_in: usize, c_out: usize, p: ConvParams, groups: usize, algo: ConvAlgorithm| {
        let p = ConvParams { groups, ..p };
        let len = c_out * (c_in / groups) * p.kernel[0] * p.kernel[1];
        ConvWeights::with_algorithm(&weights(len, 7), c_out, c_in, p, &[0], algo).unwrap()
    };
    let strided = ConvParams {
        stride: [2, 2],
        pads: [1, 1, 1, 1],
        ..ConvParams::new(3, 3)
    };
    let cases = [
        (
            "conv winograd",
            16,
            conv(16, 16, ConvParams::new(3, 3), 1, ConvAlgorithm::Winograd),
        ),
        (
            "conv im2col",
            16,
            conv(16, 24, strided, 1, ConvAlgorithm::Im2col),
        ),
        (
            "conv direct",
            16,
            conv(16, 24, strided, 1, ConvAlgorithm::Direct),
        ),
        (
            "conv few channels",
            3,
            conv(3, 16, ConvParams::new(3, 3), 1, ConvAlgorithm::Pairs),
        ),
        (
            "conv depthwise",
            16,
            conv(16, 16, ConvParams::new(3, 3), 16, ConvAlgorithm::Auto),
        ),
    ];
    let pool = ConvParams {
        stride: [2, 2],
        ..ConvParams::new(2, 2)
    };
    let cstage = |c: usize| OutputStage::float(vec![0.002; c], 128);
    for (name, c_in, cw) in &cases {
        assert_eq!(cw.method(), expected_method(name), "{name}");
        let shape = [2, 10, 10, *c_in];
        let x = bytes(shape.iter().product(), 11);
        let input = NhwcInput {
            data: &x,
            shape,
            zero_point: 120,
        };
        let os = quantkit_kernels::conv::conv2d_output_shape(shape, cw).unwrap();
        let mut y32 = vec![0i32; os.iter().product()];
        conv2d_i32(&input, cw, &mut y32).unwrap();
        if cw.is_depthwise() {
            // i32 sums take the row kernel, a float stage the 16-channel-block kernel.
            note("conv depthwise rows");
        }
        let mut y = vec![0u8; os.iter().product()];
        conv2d_quant(&input, cw, &cstage(cw.c_out()), &mut y).unwrap();
        note(name);
        let [b, oh, ow, c] = os;
        let mut pooled = vec![0u8; b * (oh / 2) * (ow / 2) * c];
        conv2d_quant_max_pool(&input, cw, &cstage(c), &pool, &mut pooled).unwrap();
        note("conv + max pool");
    }

    let x = bytes(2 * 8 * 8 * 16, 3);
    let mut y = vec![0u8; 2 * 4 * 4 * 16];
    max_pool(&x, [2, 8, 8, 16], &pool, &mut y).unwrap();
    note("max pool");

    let dw = DeconvWeights::new(&weights(8 * 8 * 4, 5), 8, 8, pool, [0, 0], &[0]).unwrap();
    let xs = bytes(4 * 4 * 8, 9);
    let input = NhwcInput {
        data: &xs,
        shape: [1, 4, 4, 8],
        zero_point: 100,
    };
    let os = dw.output_shape(input.shape).unwrap();
    let mut yd = vec![0u8; os.iter().product()];
    deconv2d_quant(&input, &dw, &OutputStage::float(vec![0.01; 8], 0), &mut yd).unwrap();
    note("deconv");

    // Element-wise passes at a plan's edges: quantize, dequantize, the input prologue and
    // the NCHW↔NHWC transpose of codes.
    let xf: Vec<f32> = (0..300).map(|i| i as f32 * 0.37 - 40.0).collect();
    let mut q = vec![0u8; xf.len()];
    quantkit_kernels::quantize::quantize(&xf, 0.5, 128, &mut q);
    note("quantize");
    let mut back = vec![0f32; q.len()];
    quantkit_kernels::quantize::dequantize(&q, 0.5, 128, &mut back);
    note("dequantize");
    let codes = bytes(2 * 40 * 48, 13);
    let t = quantkit_kernels::transpose::transpose_images(&codes, 40, 48);
    assert_eq!(t.len(), codes.len());
    note("transpose codes");
    seen
}

fn expected_method(case: &str) -> &'static str {
    match case {
        "conv winograd" => "winograd",
        "conv few channels" => "gemm-pairs",
        "conv depthwise" => "depthwise",
        "conv direct" => "direct",
        _ => "gemm",
    }
}

#[test]
fn scalar_process_takes_no_simd_entry() {
    if std::env::var_os(CHILD).is_none() {
        return in_child("scalar_process_takes_no_simd_entry", Some("scalar"));
    }
    assert_eq!(dispatch::isa(), Isa::Scalar);
    assert_eq!(dispatch::kernels().isa(), Isa::Scalar);
    let seen = workload();
    assert_eq!(
        simd_calls(),
        0,
        "SIMD entries taken under QUANTKIT_ISA=scalar: {seen:?}"
    );
}

/// Every SIMD ISA this CPU has, forced with `QUANTKIT_ISA`, and the default choice.
#[test]
fn simd_isas_take_simd_entries_on_every_path() {
    if std::env::var_os(CHILD).is_none() {
        let name = "simd_isas_take_simd_entries_on_every_path";
        in_child(name, None);
        for isa in Isa::ALL.into_iter().filter(|&i| i != Isa::Scalar) {
            if isa.is_supported() {
                in_child(name, Some(isa.name()));
            } else {
                eprintln!("skipping {isa}: this CPU lacks its instructions");
            }
        }
        return;
    }
    let isa = dispatch::isa();
    match std::env::var("QUANTKIT_ISA") {
        Ok(forced) => assert_eq!(isa.name(), forced),
        Err(_) => assert_eq!(isa, dispatch::detect_best()),
    }
    if isa == Isa::Scalar {
        eprintln!("skipped: this CPU has no SIMD ISA with kernels");
        return;
    }
    let seen = workload();
    for (name, calls) in &seen {
        assert!(*calls > 0, "`{name}` took no SIMD entry on {isa}: {seen:?}");
    }
}

/// Each ISA's table has the geometry the packers assume for it, and unsupported ISAs have
/// no table.
#[test]
fn tables_carry_their_isa_and_geometry() {
    for isa in Isa::ALL {
        match dispatch::table_for(isa) {
            Ok(k) => {
                assert_eq!(k.isa(), isa);
                assert_eq!(k.geometry(), quantkit_kernels::gemm::PanelGeometry::of(isa));
            }
            Err(e) => {
                assert!(!isa.is_supported(), "{isa}: {e}");
                eprintln!("skipping {isa}: this CPU lacks its instructions");
            }
        }
    }
}
