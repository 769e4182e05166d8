//! Throughput loops that measure the machine's int8 multiply-accumulate peak on AVX2:
//! eight independent accumulators, no memory traffic, so only the execution ports limit
//! them. Written in inline assembly so that the compiler cannot hoist or fold the
//! loop-invariant multiplies.

use std::arch::asm;

/// Runs `iters` (≥ 1) iterations of 8 independent `vpmaddwd`+`vpaddd` chains (16 i16 MACs
/// each, the instruction the exact AVX2 kernels use). MACs executed: `iters · 8 · 16`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn avx2_peak_vpmaddwd(iters: u64) {
    let n = iters.max(1);
    // SAFETY: register-only AVX2 code (the caller guarantees AVX2); all clobbered registers
    // are declared as outputs; no memory is touched.
    unsafe {
        asm!(
            "vpxor {a0}, {a0}, {a0}", "vpxor {a1}, {a1}, {a1}", "vpxor {a2}, {a2}, {a2}",
            "vpxor {a3}, {a3}, {a3}", "vpxor {a4}, {a4}, {a4}", "vpxor {a5}, {a5}, {a5}",
            "vpxor {a6}, {a6}, {a6}", "vpxor {a7}, {a7}, {a7}",
            "2:",
            "vpmaddwd {t0}, {x}, {y}", "vpaddd {a0}, {a0}, {t0}",
            "vpmaddwd {t1}, {x}, {y}", "vpaddd {a1}, {a1}, {t1}",
            "vpmaddwd {t2}, {x}, {y}", "vpaddd {a2}, {a2}, {t2}",
            "vpmaddwd {t3}, {x}, {y}", "vpaddd {a3}, {a3}, {t3}",
            "vpmaddwd {t0}, {x}, {y}", "vpaddd {a4}, {a4}, {t0}",
            "vpmaddwd {t1}, {x}, {y}", "vpaddd {a5}, {a5}, {t1}",
            "vpmaddwd {t2}, {x}, {y}", "vpaddd {a6}, {a6}, {t2}",
            "vpmaddwd {t3}, {x}, {y}", "vpaddd {a7}, {a7}, {t3}",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) n => _,
            x = out(ymm_reg) _, y = out(ymm_reg) _,
            t0 = out(ymm_reg) _, t1 = out(ymm_reg) _, t2 = out(ymm_reg) _, t3 = out(ymm_reg) _,
            a0 = out(ymm_reg) _, a1 = out(ymm_reg) _, a2 = out(ymm_reg) _, a3 = out(ymm_reg) _,
            a4 = out(ymm_reg) _, a5 = out(ymm_reg) _, a6 = out(ymm_reg) _, a7 = out(ymm_reg) _,
            options(nomem, nostack),
        );
    }
}

/// Like [`avx2_peak_vpmaddwd`] with the classic `vpmaddubsw`+`vpmaddwd`+`vpaddd` sequence
/// (32 u8×i8 MACs per step; it saturates, so the exact kernels do not use it, but it is the
/// other candidate for "int8 peak" on AVX2). MACs executed: `iters · 8 · 32`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn avx2_peak_vpmaddubsw(iters: u64) {
    let n = iters.max(1);
    // SAFETY: as in `avx2_peak_vpmaddwd`.
    unsafe {
        asm!(
            "vpxor {a0}, {a0}, {a0}", "vpxor {a1}, {a1}, {a1}", "vpxor {a2}, {a2}, {a2}",
            "vpxor {a3}, {a3}, {a3}", "vpxor {a4}, {a4}, {a4}", "vpxor {a5}, {a5}, {a5}",
            "vpxor {a6}, {a6}, {a6}", "vpxor {a7}, {a7}, {a7}",
            "2:",
            "vpmaddubsw {t0}, {x}, {y}", "vpmaddwd {t0}, {t0}, {one}", "vpaddd {a0}, {a0}, {t0}",
            "vpmaddubsw {t1}, {x}, {y}", "vpmaddwd {t1}, {t1}, {one}", "vpaddd {a1}, {a1}, {t1}",
            "vpmaddubsw {t2}, {x}, {y}", "vpmaddwd {t2}, {t2}, {one}", "vpaddd {a2}, {a2}, {t2}",
            "vpmaddubsw {t0}, {x}, {y}", "vpmaddwd {t0}, {t0}, {one}", "vpaddd {a3}, {a3}, {t0}",
            "vpmaddubsw {t1}, {x}, {y}", "vpmaddwd {t1}, {t1}, {one}", "vpaddd {a4}, {a4}, {t1}",
            "vpmaddubsw {t2}, {x}, {y}", "vpmaddwd {t2}, {t2}, {one}", "vpaddd {a5}, {a5}, {t2}",
            "vpmaddubsw {t0}, {x}, {y}", "vpmaddwd {t0}, {t0}, {one}", "vpaddd {a6}, {a6}, {t0}",
            "vpmaddubsw {t1}, {x}, {y}", "vpmaddwd {t1}, {t1}, {one}", "vpaddd {a7}, {a7}, {t1}",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) n => _,
            x = out(ymm_reg) _, y = out(ymm_reg) _, one = out(ymm_reg) _,
            t0 = out(ymm_reg) _, t1 = out(ymm_reg) _, t2 = out(ymm_reg) _,
            a0 = out(ymm_reg) _, a1 = out(ymm_reg) _, a2 = out(ymm_reg) _, a3 = out(ymm_reg) _,
            a4 = out(ymm_reg) _, a5 = out(ymm_reg) _, a6 = out(ymm_reg) _, a7 = out(ymm_reg) _,
            options(nomem, nostack),
        );
    }
}
