//! The machine's int8 multiply-accumulate peak, measured with register-only throughput
//! loops (see `x86_64/*/peak.rs`). Benchmarks report GEMM speed as a fraction of it.

use std::time::Instant;

/// One measured peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peak {
    /// The instruction sequence measured, e.g. `avx2 vpmaddwd`.
    pub sequence: &'static str,
    /// Integer operations per second in units of 10^9 (1 MAC = 2 ops), on the calling thread.
    pub gops: f64,
}

/// Measures every int8 MAC sequence this CPU has on the calling thread, each for about
/// `seconds` (best of several repetitions). Empty when no SIMD sequence is available.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub fn measure(seconds: f64) -> Vec<Peak> {
    #[allow(unused_mut)]
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    if crate::Isa::Avx512Vnni.is_supported() {
        use crate::x86_64::avx512vnni::peak::avx512vnni_peak_vpdpbusd;
        // SAFETY: AVX-512 F and VNNI detected just above.
        let dp = best_rate(seconds, 12 * 64, |n| unsafe { avx512vnni_peak_vpdpbusd(n) });
        out.push(Peak {
            sequence: "avx512vnni vpdpbusd zmm (exact, used by the kernels)",
            gops: 2.0 * dp / 1e9,
        });
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        use crate::x86_64::avx2::peak::{avx2_peak_vpmaddubsw, avx2_peak_vpmaddwd};
        // SAFETY: AVX2 detected just above.
        let wd = best_rate(seconds, 8 * 16, |n| unsafe { avx2_peak_vpmaddwd(n) });
        out.push(Peak {
            sequence: "avx2 vpmaddwd (exact, used by the kernels)",
            gops: 2.0 * wd / 1e9,
        });
        // SAFETY: AVX2 detected just above.
        let ubs = best_rate(seconds, 8 * 32, |n| unsafe { avx2_peak_vpmaddubsw(n) });
        out.push(Peak {
            sequence: "avx2 vpmaddubsw+vpmaddwd (saturating)",
            gops: 2.0 * ubs / 1e9,
        });
    }
    out
}

/// MACs per second of `f(iters)` which executes `macs_per_iter · iters` MACs.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn best_rate(seconds: f64, macs_per_iter: u64, f: impl Fn(u64)) -> f64 {
    // Calibrate an iteration count that takes ~1/5 of the budget, then keep the best of 5.
    let mut n = 1u64 << 16;
    loop {
        let t = Instant::now();
        f(n);
        let dt = t.elapsed().as_secs_f64();
        if dt > seconds / 20.0 || n > 1 << 40 {
            n = ((n as f64) * (seconds / 5.0) / dt.max(1e-9)).max(1.0) as u64;
            break;
        }
        n *= 4;
    }
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = Instant::now();
        f(n);
        let rate = (n * macs_per_iter) as f64 / t.elapsed().as_secs_f64();
        best = best.max(rate);
    }
    best
}
