//! GEMM kernels against the i64 reference, every SIMD path against scalar, and thread-count
//! invariance.

use proptest::prelude::*;
use quantkit_core::fixed_point::{FixedPointRounding, QuantizedMultiplier};
use quantkit_kernels::gemm::{
    gemm_i32_with, gemm_quant_with, Activations, PackedWeights, WeightLayout,
};
use quantkit_kernels::output::{OutputStage, QuantType};
use quantkit_kernels::{reference, Isa, KernelError};

mod common;
use common::{supported, Rng};

#[derive(Clone, Copy, Debug)]
enum AType {
    U8,
    I8,
}
#[derive(Clone, Copy, Debug)]
enum WType {
    I8,
    U8,
}

/// One random problem: raw integer values, zero points, and packed weights.
struct Case {
    m: usize,
    n: usize,
    k: usize,
    at: AType,
    a_u8: Vec<u8>,
    a_i8: Vec<i8>,
    za: i32,
    w: Vec<i32>, // [K,N] as plain integers
    zw: Vec<i32>,
    packed: PackedWeights,
}

impl Case {
    fn new(
        rng: &mut Rng,
        m: usize,
        n: usize,
        k: usize,
        at: AType,
        wt: WType,
        extreme: bool,
    ) -> Case {
        let (alo, ahi) = match at {
            AType::U8 => (0, 255),
            AType::I8 => (-128, 127),
        };
        let (wlo, whi) = match wt {
            WType::I8 => (-128, 127),
            WType::U8 => (0, 255),
        };
        // Extreme cases: values and zero points at the ends of the ranges, which maximise
        // |a − za|·|w − zw| and catch saturation (e.g. of vpmaddubsw) and overflow.
        let pick = |rng: &mut Rng, lo: i32, hi: i32| {
            if extreme {
                if rng.next().is_multiple_of(2) {
                    lo
                } else {
                    hi
                }
            } else {
                rng.range(lo, hi)
            }
        };
        let a: Vec<i32> = (0..m * k).map(|_| pick(rng, alo, ahi)).collect();
        let za = if extreme {
            if rng.next().is_multiple_of(2) {
                alo
            } else {
                ahi
            }
        } else {
            rng.range(alo, ahi)
        };
        let w: Vec<i32> = (0..k * n).map(|_| pick(rng, wlo, whi)).collect();
        let per_col = rng.next().is_multiple_of(2);
        let zw: Vec<i32> = if per_col {
            (0..n).map(|_| pick(rng, wlo, whi)).collect()
        } else {
            let z = match (extreme, wt) {
                (true, _) => pick(rng, wlo, whi),
                (false, WType::I8) => 0,
                (false, WType::U8) => rng.range(wlo, whi),
            };
            vec![z; n]
        };
        let zp_arg: Vec<i32> = if per_col { zw.clone() } else { vec![zw[0]] };
        let layout = if rng.next().is_multiple_of(2) {
            WeightLayout::KxN
        } else {
            WeightLayout::NxK
        };
        let idx = |kk: usize, j: usize| match layout {
            WeightLayout::KxN => kk * n + j,
            WeightLayout::NxK => j * k + kk,
        };
        let mut laid = vec![0i32; k * n];
        for kk in 0..k {
            for j in 0..n {
                laid[idx(kk, j)] = w[kk * n + j];
            }
        }
        let packed = match wt {
            WType::I8 => {
                let v: Vec<i8> = laid.iter().map(|&x| x as i8).collect();
                PackedWeights::from_i8(&v, k, n, layout, &zp_arg).unwrap()
            }
            WType::U8 => {
                let v: Vec<u8> = laid.iter().map(|&x| x as u8).collect();
                PackedWeights::from_u8(&v, k, n, layout, &zp_arg).unwrap()
            }
        };
        Case {
            m,
            n,
            k,
            at,
            a_u8: a.iter().map(|&x| x as u8).collect(),
            a_i8: a.iter().map(|&x| x as i8).collect(),
            za,
            w,
            zw,
            packed,
        }
    }

    fn acts(&self) -> Activations<'_> {
        match self.at {
            AType::U8 => Activations::u8(&self.a_u8, self.m, self.k, self.za),
            AType::I8 => Activations::i8(&self.a_i8, self.m, self.k, self.za),
        }
    }

    fn a_ints(&self) -> Vec<i32> {
        match self.at {
            AType::U8 => self.a_u8.iter().map(|&x| x as i32).collect(),
            AType::I8 => self.a_i8.iter().map(|&x| x as i32).collect(),
        }
    }

    fn reference(&self) -> Vec<i64> {
        reference::gemm_i64(
            &self.a_ints(),
            self.m,
            self.k,
            self.za,
            &self.w,
            self.n,
            &self.zw,
        )
    }
}

fn check_i32(case: &Case) {
    let want = case.reference();
    for isa in supported() {
        let mut got = vec![0i32; case.m * case.n];
        gemm_i32_with(isa, &case.acts(), &case.packed, &mut got).unwrap();
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g as i64, w,
                "{isa} m={} n={} k={} idx {i} ({:?})",
                case.m, case.n, case.k, case.at
            );
        }
    }
}

fn random_float_stage(rng: &mut Rng, n: usize, big: bool) -> OutputStage {
    let per_channel = rng.next().is_multiple_of(2);
    let count = if per_channel { n } else { 1 };
    let scales: Vec<f32> = (0..count)
        .map(|_| {
            // Multipliers from 2^-20 up to 4 (≥ 1 included on purpose).
            let e = if big {
                rng.range(-3, 2)
            } else {
                rng.range(-20, -8)
            };
            (1.0 + (rng.next() % 1000) as f32 / 1000.0) * (e as f32).exp2()
        })
        .collect();
    let z = rng.range(-10, 300);
    let mut st = OutputStage::float(scales, z);
    if rng.next().is_multiple_of(2) {
        st = st.with_bias((0..n).map(|_| rng.range(-100_000, 100_000)).collect());
    }
    if rng.next().is_multiple_of(3) {
        let lo = rng.range(-130, 100);
        st = st.with_clamp(lo, lo + rng.range(0, 200));
    }
    st
}

fn check_quant<T: QuantType + PartialEq + std::fmt::Debug>(case: &Case, stage: &OutputStage) {
    let acc = case.reference();
    let (lo, hi) = stage.range::<T>();
    let want: Vec<i32> = (0..case.m * case.n)
        .map(|idx| {
            let j = idx % case.n;
            let bias = stage.bias.as_ref().map_or(0, |b| b[j]) as i64;
            match &stage.requant {
                quantkit_kernels::output::Requant::Float(s) => {
                    let s = if s.len() == 1 { s[0] } else { s[j] };
                    reference::float_output_i64(acc[idx], bias, s, stage.zero_point, lo, hi)
                }
                quantkit_kernels::output::Requant::FixedPoint {
                    multipliers,
                    rounding,
                } => {
                    let q = if multipliers.len() == 1 {
                        multipliers[0]
                    } else {
                        multipliers[j]
                    };
                    let t = i32::try_from(acc[idx] + bias).unwrap();
                    (q.apply(t, *rounding) as i64 + stage.zero_point as i64)
                        .clamp(lo as i64, hi as i64) as i32
                }
            }
        })
        .collect();
    for isa in supported() {
        let mut got = vec![T::default(); case.m * case.n];
        gemm_quant_with(isa, &case.acts(), &case.packed, stage, &mut got).unwrap();
        for (i, (g, &w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_i32(),
                w,
                "{isa} m={} n={} k={} idx {i} stage {stage:?}",
                case.m,
                case.n,
                case.k
            );
        }
    }
}

const SIZES: [usize; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 16, 17, 31, 33, 65];

#[test]
fn i32_output_matches_reference_on_small_shapes() {
    let mut rng = Rng(1);
    for (t, &m) in SIZES.iter().enumerate() {
        for &n in &SIZES[t % 4..] {
            let k = SIZES[(t * 7 + n) % SIZES.len()];
            let at = if (m + n) % 2 == 0 {
                AType::U8
            } else {
                AType::I8
            };
            let wt = if (m + k).is_multiple_of(3) {
                WType::U8
            } else {
                WType::I8
            };
            check_i32(&Case::new(&mut rng, m, n, k, at, wt, false));
        }
    }
}

#[test]
fn extreme_values_and_zero_points_are_exact() {
    // All values and zero points at the ends of their ranges: the largest products, the
    // pattern that breaks a saturating vpmaddubsw scheme.
    let mut rng = Rng(2);
    for &(m, n, k) in &[
        (1, 1, 1),
        (7, 17, 33),
        (6, 16, 64),
        (13, 31, 129),
        (2, 40, 1000),
    ] {
        for at in [AType::U8, AType::I8] {
            for wt in [WType::I8, WType::U8] {
                check_i32(&Case::new(&mut rng, m, n, k, at, wt, true));
            }
        }
    }
}

#[test]
fn large_k_is_exact() {
    let mut rng = Rng(3);
    for &k in &[255, 257, 1023, 4097, 8192] {
        check_i32(&Case::new(&mut rng, 3, 19, k, AType::U8, WType::I8, true));
        check_i32(&Case::new(&mut rng, 7, 5, k, AType::I8, WType::I8, false));
    }
}

#[test]
fn float_output_stage_matches_reference() {
    let mut rng = Rng(4);
    for t in 0..40 {
        let m = SIZES[t % SIZES.len()];
        let n = SIZES[(t * 5 + 3) % SIZES.len()];
        let k = [1usize, 2, 17, 64, 300][t % 5];
        let at = if t % 2 == 0 { AType::U8 } else { AType::I8 };
        let case = Case::new(&mut rng, m, n, k, at, WType::I8, t % 7 == 0);
        let stage = random_float_stage(&mut rng, n, t % 3 == 0);
        check_quant::<u8>(&case, &stage);
        check_quant::<i8>(&case, &stage);
    }
}

#[test]
fn fixed_point_output_stage_matches_reference() {
    let mut rng = Rng(5);
    for t in 0..30 {
        let m = SIZES[(t * 3) % SIZES.len()];
        let n = SIZES[(t * 5 + 1) % SIZES.len()];
        let k = [1usize, 3, 33, 200][t % 4];
        let case = Case::new(&mut rng, m, n, k, AType::U8, WType::I8, t % 5 == 0);
        let count = if t % 2 == 0 { n } else { 1 };
        let mults: Vec<QuantizedMultiplier> = (0..count)
            .map(|_| {
                let e = rng.range(-18, 1);
                QuantizedMultiplier::from_f64(
                    (1.0 + (rng.next() % 1000) as f64 / 999.0) * (e as f64).exp2(),
                )
                .unwrap()
            })
            .collect();
        let rounding = if t % 3 == 0 {
            FixedPointRounding::SingleRounding
        } else {
            FixedPointRounding::DoubleRounding
        };
        let stage = OutputStage::fixed_point(mults, rounding, rng.range(-5, 130))
            .with_bias((0..n).map(|_| rng.range(-5000, 5000)).collect());
        check_quant::<u8>(&case, &stage);
        check_quant::<i8>(&case, &stage);
    }
}

#[test]
fn one_and_two_threads_agree() {
    let mut rng = Rng(6);
    let case = Case::new(&mut rng, 70, 300, 257, AType::I8, WType::I8, false);
    let stage = random_float_stage(&mut rng, 300, false);
    let run = |threads: usize, isa: Isa| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut o32 = vec![0i32; case.m * case.n];
            gemm_i32_with(isa, &case.acts(), &case.packed, &mut o32).unwrap();
            let mut o8 = vec![0u8; case.m * case.n];
            gemm_quant_with(isa, &case.acts(), &case.packed, &stage, &mut o8).unwrap();
            (o32, o8)
        })
    };
    for isa in supported() {
        assert_eq!(run(1, isa), run(2, isa), "{isa}");
    }
    // And the GEMV split (one row, many column panels).
    let gemv = Case::new(&mut rng, 1, 4000, 300, AType::U8, WType::I8, false);
    for isa in supported() {
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut o = vec![0i32; gemv.n];
                gemm_i32_with(isa, &gemv.acts(), &gemv.packed, &mut o).unwrap();
                o
            })
        };
        assert_eq!(run(1), run(2), "{isa}");
    }
}

#[test]
fn bad_shapes_are_typed_errors() {
    let w = vec![0i8; 12];
    assert!(matches!(
        PackedWeights::from_i8(&w, 3, 5, WeightLayout::KxN, &[0]),
        Err(KernelError::BufferLength { arg: "weights", .. })
    ));
    assert!(matches!(
        PackedWeights::from_i8(&w, 3, 4, WeightLayout::KxN, &[0, 0]),
        Err(KernelError::ChannelCount {
            arg: "zero_points",
            ..
        })
    ));
    let p = PackedWeights::from_i8(&w, 3, 4, WeightLayout::KxN, &[0]).unwrap();
    let a = vec![0u8; 6];
    let mut out = vec![0i32; 7];
    assert!(matches!(
        gemm_i32_with(Isa::Scalar, &Activations::u8(&a, 2, 3, 0), &p, &mut out),
        Err(KernelError::BufferLength { arg: "out", .. })
    ));
    let mut out = [0i32; 8];
    assert!(matches!(
        gemm_i32_with(
            Isa::Scalar,
            &Activations::u8(&a, 3, 2, 0),
            &p,
            &mut out[..6]
        ),
        Err(KernelError::InvalidArgument { arg: "a", .. })
    ));
    let stage = OutputStage::float(vec![1.0; 3], 0);
    let mut o8 = vec![0u8; 8];
    assert!(matches!(
        gemm_quant_with(
            Isa::Scalar,
            &Activations::u8(&a, 2, 3, 0),
            &p,
            &stage,
            &mut o8
        ),
        Err(KernelError::ChannelCount { arg: "requant", .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn simd_equals_scalar(m in 1usize..20, n in 1usize..40, k in 1usize..70, seed in any::<u64>(), signed in any::<bool>()) {
        let mut rng = Rng(seed);
        let at = if signed { AType::I8 } else { AType::U8 };
        let case = Case::new(&mut rng, m, n, k, at, WType::I8, seed % 4 == 0);
        let stage = random_float_stage(&mut rng, n, seed % 3 == 0);
        let mut base32 = vec![0i32; m * n];
        gemm_i32_with(Isa::Scalar, &case.acts(), &case.packed, &mut base32).unwrap();
        let mut base8 = vec![0i8; m * n];
        gemm_quant_with(Isa::Scalar, &case.acts(), &case.packed, &stage, &mut base8).unwrap();
        for isa in supported() {
            let mut o32 = vec![0i32; m * n];
            gemm_i32_with(isa, &case.acts(), &case.packed, &mut o32).unwrap();
            prop_assert_eq!(&o32, &base32);
            let mut o8 = vec![0i8; m * n];
            gemm_quant_with(isa, &case.acts(), &case.packed, &stage, &mut o8).unwrap();
            prop_assert_eq!(&o8, &base8);
        }
    }
}
