//! Throughput of the AVX-512 VNNI GEMM microkernel alone (8×32 tile, data in L1), for
//! comparing with the `vpdpbusd` peak of `quantkit bench gemm`. Exits with a message on a
//! CPU without AVX-512 VNNI.
#[cfg(not(target_arch = "x86_64"))]
fn main() {
    eprintln!("AVX-512 VNNI exists only on x86-64: nothing to measure");
}

#[cfg(target_arch = "x86_64")]
fn main() {
    use quantkit_kernels::x86_64::avx512vnni::gemm::avx512vnni_gemm_u8i8_i32_8x32 as kernel;
    use quantkit_kernels::Isa;
    use std::time::Instant;

    if !Isa::Avx512Vnni.is_supported() {
        eprintln!("this CPU has no AVX-512 VNNI: nothing to measure");
        return;
    }
    for &kg in &[16usize, 64, 256, 1024] {
        let a = vec![0x01020304u32; kg * 8];
        let b = vec![3i8; kg * 128];
        let mut out = [0i32; 256];
        let reps = (1 << 24) / kg;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..reps {
                // SAFETY: AVX-512 VNNI checked above; `a` holds kg·8 words and `b` kg·128 bytes.
                unsafe {
                    kernel::<8>(
                        kg,
                        std::hint::black_box(&a),
                        std::hint::black_box(&b),
                        &mut out,
                    )
                };
                std::hint::black_box(&out);
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        let macs = (reps * kg * 4 * 8 * 32) as f64;
        println!("kg {kg}: {:.1} GOP/s", 2.0 * macs / best / 1e9);
    }
}
