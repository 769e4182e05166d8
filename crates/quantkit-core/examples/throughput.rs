//! Throughput of the scalar numeric core (elements per second), for the record:
//! `cargo run --release -p quantkit-core --example throughput`.
//!
//! These are the plain scalar reference paths; the SIMD kernels live in quantkit-kernels.

use std::hint::black_box;
use std::time::Instant;

use quantkit_core::fixed_point::{FixedPointRounding, QuantizedMultiplier};
use quantkit_core::observer::CalibrationMethod;
use quantkit_core::{Granularity, QParams, QuantScheme, RoundingMode};

fn time<T>(label: &str, elems: usize, reps: usize, mut f: impl FnMut() -> T) {
    black_box(f()); // warm-up
    let t = Instant::now();
    for _ in 0..reps {
        black_box(f());
    }
    let s = t.elapsed().as_secs_f64() / reps as f64;
    println!(
        "{label:<44} {:>9.3} ms  {:>8.1} M elem/s",
        s * 1e3,
        elems as f64 / s / 1e6
    );
}

fn main() {
    let n = 1 << 20;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let x: Vec<f32> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
        })
        .collect();
    let shape = [256, n / 256];

    let pt = QParams::from_tensor("x", &x, &shape, &QuantScheme::u8_affine()).unwrap();
    time("quantize_linear u8 per-tensor", n, 20, || {
        pt.quantize(&x, &shape, RoundingMode::HalfToEven).unwrap()
    });
    let sch = QuantScheme::i8_symmetric().with_granularity(Granularity::PerChannel { axis: 0 });
    let pc = QParams::from_tensor("x", &x, &shape, &sch).unwrap();
    time("quantize_linear i8 per-channel(axis 0)", n, 20, || {
        pc.quantize(&x, &shape, RoundingMode::HalfToEven).unwrap()
    });
    let q = pt.quantize(&x, &shape, RoundingMode::HalfToEven).unwrap();
    time("dequantize_linear u8 per-tensor", n, 20, || {
        pt.dequantize(&q, &shape).unwrap()
    });

    let acc: Vec<i32> = x.iter().map(|&v| (v * 1e6) as i32).collect();
    let m = QuantizedMultiplier::from_f64(0.000_731).unwrap();
    for mode in [
        FixedPointRounding::DoubleRounding,
        FixedPointRounding::SingleRounding,
    ] {
        time(
            &format!("QuantizedMultiplier::apply {mode:?}"),
            n,
            20,
            || {
                acc.iter()
                    .map(|&a| m.apply(a, mode))
                    .fold(0i64, |s, v| s + i64::from(v))
            },
        );
    }

    for method in ["minmax", "percentile=99.99", "entropy", "mse"] {
        let cm: CalibrationMethod = method.parse().unwrap();
        time(
            &format!("observe 1M values + qparams ({method})"),
            n,
            5,
            || {
                let mut o = cm.observer("x", Granularity::PerTensor);
                o.observe(&x, &shape).unwrap();
                o.qparams(&QuantScheme::i8_symmetric()).unwrap()
            },
        );
    }
}
