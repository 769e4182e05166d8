//! Throughput loop that measures the machine's int8 multiply-accumulate peak with
//! `vpdpbusd` on 512-bit registers: twelve independent accumulators (enough to cover the
//! instruction's latency at two per cycle), no memory traffic. Inline assembly, so that the
//! compiler cannot hoist or fold the loop-invariant products.

use std::arch::asm;

/// Runs `iters` (≥ 1) iterations of 12 independent `vpdpbusd zmm` (64 u8×i8 MACs each).
/// MACs executed: `iters · 12 · 64`.
///
/// # Safety
/// The CPU must support AVX-512 F and VNNI.
#[target_feature(enable = "avx512f,avx512vnni")]
pub unsafe fn avx512vnni_peak_vpdpbusd(iters: u64) {
    let n = iters.max(1);
    // SAFETY: register-only AVX-512 code (the caller guarantees the features); all clobbered
    // registers are declared as outputs; no memory is touched.
    unsafe {
        asm!(
            "vpxord {a0}, {a0}, {a0}", "vpxord {a1}, {a1}, {a1}", "vpxord {a2}, {a2}, {a2}",
            "vpxord {a3}, {a3}, {a3}", "vpxord {a4}, {a4}, {a4}", "vpxord {a5}, {a5}, {a5}",
            "vpxord {a6}, {a6}, {a6}", "vpxord {a7}, {a7}, {a7}", "vpxord {a8}, {a8}, {a8}",
            "vpxord {a9}, {a9}, {a9}", "vpxord {a10}, {a10}, {a10}", "vpxord {a11}, {a11}, {a11}",
            "vpxord {x}, {x}, {x}", "vpxord {y}, {y}, {y}",
            "2:",
            "vpdpbusd {a0}, {x}, {y}", "vpdpbusd {a1}, {x}, {y}", "vpdpbusd {a2}, {x}, {y}",
            "vpdpbusd {a3}, {x}, {y}", "vpdpbusd {a4}, {x}, {y}", "vpdpbusd {a5}, {x}, {y}",
            "vpdpbusd {a6}, {x}, {y}", "vpdpbusd {a7}, {x}, {y}", "vpdpbusd {a8}, {x}, {y}",
            "vpdpbusd {a9}, {x}, {y}", "vpdpbusd {a10}, {x}, {y}", "vpdpbusd {a11}, {x}, {y}",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) n => _,
            x = out(zmm_reg) _, y = out(zmm_reg) _,
            a0 = out(zmm_reg) _, a1 = out(zmm_reg) _, a2 = out(zmm_reg) _, a3 = out(zmm_reg) _,
            a4 = out(zmm_reg) _, a5 = out(zmm_reg) _, a6 = out(zmm_reg) _, a7 = out(zmm_reg) _,
            a8 = out(zmm_reg) _, a9 = out(zmm_reg) _, a10 = out(zmm_reg) _, a11 = out(zmm_reg) _,
            options(nomem, nostack),
        );
    }
}
