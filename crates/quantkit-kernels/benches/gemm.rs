//! Criterion benchmarks of the int8 GEMM on every supported ISA (throughput in MACs).
//! The headline comparison against f32 and the int8 peak is `quantkit bench gemm`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use quantkit_kernels::gemm::{gemm_quant_with, Activations, PackedWeights, WeightLayout};
use quantkit_kernels::output::OutputStage;
use quantkit_kernels::Isa;

fn bench_gemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemm_u8i8_u8");
    for &(m, n, k) in &[
        (256usize, 256usize, 256usize),
        (512, 512, 512),
        (1, 4096, 4096),
    ] {
        let a: Vec<u8> = (0..m * k).map(|i| (i * 7 % 251) as u8).collect();
        let w: Vec<i8> = (0..k * n).map(|i| (i * 13 % 255) as u8 as i8).collect();
        let stage = OutputStage::float(vec![1e-4], 128);
        let mut out = vec![0u8; m * n];
        group.throughput(Throughput::Elements((m * n * k) as u64));
        for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
            if isa == Isa::Scalar && m * n * k > 1 << 26 {
                continue;
            }
            let packed =
                PackedWeights::from_i8_for(isa, &w, k, n, WeightLayout::KxN, &[0]).unwrap();
            group.bench_with_input(
                BenchmarkId::new(isa.name(), format!("{m}x{n}x{k}")),
                &isa,
                |b, &isa| {
                    b.iter(|| {
                        gemm_quant_with(
                            isa,
                            &Activations::u8(&a, m, k, 3),
                            &packed,
                            &stage,
                            &mut out,
                        )
                        .unwrap()
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench_gemm);
criterion_main!(benches);
