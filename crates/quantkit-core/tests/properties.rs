//! Property tests of the quantization invariants (issue 2).

use proptest::prelude::*;
use quantkit_core::observer::{HistogramMethod, HistogramObserver, MinMaxObserver, Observer};
use quantkit_core::{
    dequantize_value, quantize_value, Granularity, QParams, QuantScheme, RoundingMode,
};

fn scheme() -> impl Strategy<Value = QuantScheme> {
    (2u8..=16, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(b, s, sym, n)| {
        QuantScheme::new(b, s)
            .unwrap()
            .with_symmetric(sym)
            .with_narrow_range(n)
    })
}

fn data() -> impl Strategy<Value = Vec<f32>> {
    (1usize..64, -20i32..20).prop_flat_map(|(n, e)| {
        let m = 2f32.powi(e);
        prop::collection::vec(-m..m, n)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Inside the range, |x − dequantize(quantize(x))| ≤ s/2 (plus f32 rounding of x/s and
    /// of the product, a few ulps).
    #[test]
    fn roundtrip_error_at_most_half_scale(x in data(), sch in scheme()) {
        let p = QParams::from_tensor("x", &x, &[x.len()], &sch).unwrap();
        let (s, z) = (p.scales[0], p.zero_points[0]);
        for &v in &x {
            let q = quantize_value(v, s, z, p.qmin, p.qmax, RoundingMode::HalfToEven);
            prop_assert!(q >= p.qmin && q <= p.qmax);
            let lo = dequantize_value(p.qmin, s, z);
            let hi = dequantize_value(p.qmax, s, z);
            if v >= lo && v <= hi {
                let err = (v - dequantize_value(q, s, z)).abs();
                let tol = s * 0.5 * (1.0 + 1e-5) + v.abs() * 1e-6;
                prop_assert!(err <= tol, "v={} q={} s={} z={} err={}", v, q, s, z, err);
            }
        }
    }

    /// Real 0 maps to the zero point and back to exactly 0.
    #[test]
    fn zero_is_exact(x in data(), sch in scheme()) {
        let p = QParams::from_tensor("x", &x, &[x.len()], &sch).unwrap();
        let q = quantize_value(0.0, p.scales[0], p.zero_points[0], p.qmin, p.qmax, RoundingMode::HalfToEven);
        prop_assert_eq!(q, p.zero_points[0]);
        prop_assert_eq!(dequantize_value(q, p.scales[0], p.zero_points[0]), 0.0);
    }

    /// Any input (including huge values) quantizes inside [qmin, qmax], both roundings.
    #[test]
    fn quantized_inside_range(v in prop::num::f32::ANY, s in 1e-30f32..1e30, z in -40000i32..40000, sch in scheme()) {
        for mode in [RoundingMode::HalfToEven, RoundingMode::HalfAwayFromZero] {
            let q = quantize_value(v, s, z, sch.qmin(), sch.qmax(), mode);
            prop_assert!(q >= sch.qmin() && q <= sch.qmax());
        }
    }

    /// Per-channel quantization equals per-tensor quantization of each channel slice.
    #[test]
    fn per_channel_equals_per_tensor_slices(
        rows in 1usize..6, cols in 1usize..9, axis in 0usize..2, sch in scheme(),
        seed in any::<u64>(),
    ) {
        let shape = [rows, cols];
        let mut s = seed | 1;
        let x: Vec<f32> = (0..rows * cols).map(|_| {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.3) * 10.0
        }).collect();
        let sch_c = sch.with_granularity(Granularity::PerChannel { axis });
        let p = QParams::from_tensor("x", &x, &shape, &sch_c).unwrap();
        let q = p.quantize(&x, &shape, RoundingMode::HalfToEven).unwrap();
        for c in 0..shape[axis] {
            let idx: Vec<usize> = (0..rows * cols)
                .filter(|i| if axis == 0 { i / cols == c } else { i % cols == c })
                .collect();
            let slice: Vec<f32> = idx.iter().map(|&i| x[i]).collect();
            let pt = QParams::from_tensor("x", &slice, &[slice.len()], &sch).unwrap();
            prop_assert_eq!(pt.scales[0], p.scales[c]);
            prop_assert_eq!(pt.zero_points[0], p.zero_points[c]);
            let qt = pt.quantize(&slice, &[slice.len()], RoundingMode::HalfToEven).unwrap();
            let qc: Vec<i32> = idx.iter().map(|&i| q[i]).collect();
            prop_assert_eq!(qt, qc);
        }
    }

    /// Merge law: observing two halves and merging equals observing the whole — exactly,
    /// both for min/max and for the power-of-two-grid histograms (hence for every
    /// histogram method's result).
    #[test]
    fn merge_law(a in data(), b in data()) {
        let whole: Vec<f32> = a.iter().chain(&b).copied().collect();
        let mut mm_a = MinMaxObserver::new("t", Granularity::PerTensor);
        let mut mm_b = MinMaxObserver::new("t", Granularity::PerTensor);
        let mut mm_w = MinMaxObserver::new("t", Granularity::PerTensor);
        mm_a.observe(&a, &[a.len()]).unwrap();
        mm_b.observe(&b, &[b.len()]).unwrap();
        mm_w.observe(&whole, &[whole.len()]).unwrap();
        mm_a.merge(&mm_b).unwrap();
        prop_assert_eq!(&mm_a, &mm_w);
        for method in [HistogramMethod::Percentile(99.0), HistogramMethod::Entropy, HistogramMethod::Mse] {
            let mut ha = HistogramObserver::with_bins("t", Granularity::PerTensor, method, 256);
            let mut hb = ha.clone();
            let mut hw = ha.clone();
            ha.observe(&a, &[a.len()]).unwrap();
            hb.observe(&b, &[b.len()]).unwrap();
            hw.observe(&whole, &[whole.len()]).unwrap();
            ha.merge(&hb).unwrap();
            prop_assert_eq!(&ha, &hw);
            let sch = QuantScheme::u8_affine();
            prop_assert_eq!(ha.ranges(&sch).unwrap(), hw.ranges(&sch).unwrap());
        }
    }
}

#[test]
fn nan_in_calibration_data_names_the_tensor() {
    let mut o = HistogramObserver::new(
        "conv1.out",
        Granularity::PerTensor,
        HistogramMethod::Entropy,
    );
    let e = o.observe(&[1.0, f32::NAN], &[2]).unwrap_err();
    assert!(e.to_string().contains("conv1.out"), "{e}");
    let mut o = MinMaxObserver::new("fc.w", Granularity::PerChannel { axis: 0 });
    let e = o.observe(&[1.0, f32::NEG_INFINITY], &[2, 1]).unwrap_err();
    assert!(e.to_string().contains("fc.w"), "{e}");
}

#[test]
fn per_channel_observers_with_all_zero_channel() {
    let x = [0.0, 0.0, 0.0, -1.0, 2.0, 3.0];
    for method in [
        quantkit_core::CalibrationMethod::MinMax,
        quantkit_core::CalibrationMethod::Percentile(99.9),
        quantkit_core::CalibrationMethod::Entropy,
        quantkit_core::CalibrationMethod::Mse,
        quantkit_core::CalibrationMethod::MovingAverage { momentum: 0.1 },
    ] {
        let mut o = method.observer("w", Granularity::PerChannel { axis: 0 });
        o.observe(&x, &[2, 3]).unwrap();
        o.observe(&x, &[2, 3]).unwrap();
        let p = o.qparams(&QuantScheme::i8_symmetric()).unwrap();
        assert_eq!(p.scales.len(), 2);
        assert!(p.scales.iter().all(|s| s.is_normal()), "{method:?} {p:?}");
        assert_eq!(p.scales[0], 1.0, "{method:?}: all-zero channel");
        // A different shape is rejected with a clear error.
        assert!(o.observe(&x, &[3, 2]).is_err());
    }
}

#[test]
fn per_channel_streaming_merge_is_exact() {
    // 3 channels along axis 1 of [rows, 3]; batches with growing ranges force re-binning.
    let batch = |k: usize| -> Vec<f32> {
        (0..30)
            .map(|i| {
                ((i * 37 + k * 11) % 23) as f32
                    * (1.0 + k as f32)
                    * if i % 2 == 0 { 1.0 } else { -0.3 }
            })
            .collect()
    };
    let g = Granularity::PerChannel { axis: 1 };
    for method in [
        HistogramMethod::Percentile(99.0),
        HistogramMethod::Entropy,
        HistogramMethod::Mse,
    ] {
        let mut whole = HistogramObserver::with_bins("t", g, method, 128);
        let mut a = whole.clone();
        let mut b = whole.clone();
        for k in 0..6 {
            let x = batch(k);
            whole.observe(&x, &[10, 3]).unwrap();
            if k % 2 == 0 {
                a.observe(&x, &[10, 3]).unwrap()
            } else {
                b.observe(&x, &[10, 3]).unwrap()
            }
        }
        a.merge(&b).unwrap();
        assert_eq!(a, whole, "{method:?}");
        let s = QuantScheme::u8_affine();
        assert_eq!(a.qparams(&s).unwrap(), whole.qparams(&s).unwrap());
        // Merging a different kind of observer is an error, not a panic.
        assert!(a.merge(&MinMaxObserver::new("t", g)).is_err());
    }
}
