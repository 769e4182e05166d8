//! The in-place code table (`lut::apply_codes`): the scalar kernel against a plain
//! reference, and every ISA the CPU has against scalar, byte for byte, on lengths around
//! the 32- and 64-byte vectors (0..=200, powers of two ± 1) and tables that use all 256
//! entries (both halves of the `vpermi2b` lookup, bit 7 set and clear; all 16 `vpshufb`
//! rows of the AVX2 kernel).

use quantkit_kernels::dispatch::Isa;
use quantkit_kernels::eltwise::QParams;
use quantkit_kernels::lut::{apply_codes, apply_codes_with, Function, Lut8};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 32) as u8).collect()
    }
}

fn lengths() -> Vec<usize> {
    let mut v: Vec<usize> = (0..=200).collect();
    for p in [256usize, 512, 1024, 4096] {
        v.extend([p - 1, p, p + 1]);
    }
    v.push(10_007);
    v
}

fn supported() -> Vec<Isa> {
    Isa::ALL
        .iter()
        .copied()
        .filter(|i| i.is_supported())
        .collect()
}

#[test]
fn scalar_equals_the_reference_and_every_isa_equals_scalar() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let isas = supported();
    for (t, len) in lengths().into_iter().enumerate() {
        let table: [u8; 256] = rng.bytes(256).try_into().unwrap();
        let data = rng.bytes(len);
        let reference: Vec<u8> = data.iter().map(|&b| table[b as usize]).collect();
        let mut scalar = data.clone();
        apply_codes_with(Isa::Scalar, &table, &mut scalar).unwrap();
        assert_eq!(scalar, reference, "scalar, length {len}, table {t}");
        for &isa in &isas {
            let mut got = data.clone();
            apply_codes_with(isa, &table, &mut got).unwrap();
            assert_eq!(got, scalar, "{isa} vs scalar, length {len}");
        }
        let mut dispatched = data.clone();
        apply_codes(&table, &mut dispatched);
        assert_eq!(dispatched, scalar, "dispatched, length {len}");
    }
}

/// Every code once, at every offset of a vector: each entry of the table is reachable.
#[test]
fn every_code_at_every_lane_maps_through_its_entry() {
    let table: [u8; 256] = std::array::from_fn(|i| (255 - i as u8).rotate_left(3));
    for isa in supported() {
        for shift in 0..64 {
            let data: Vec<u8> = (0..256 + shift)
                .map(|i| (i as u8).wrapping_sub(shift as u8))
                .collect();
            let mut got = data.clone();
            apply_codes_with(isa, &table, &mut got).unwrap();
            for (i, (&x, &y)) in data.iter().zip(&got).enumerate() {
                assert_eq!(
                    y, table[x as usize],
                    "{isa}: byte {i} (code {x}), shift {shift}"
                );
            }
        }
    }
}

/// A real table (HardSwish, u8 → u8) through the in-place kernel equals `Lut8::apply`.
#[test]
fn a_function_table_matches_lut8() {
    let qi = QParams {
        scale: 0.05,
        zero_point: 128,
    };
    let qo = QParams {
        scale: 0.03,
        zero_point: 20,
    };
    let lut = Lut8::function::<u8, u8>(Function::HardSwish, qi, qo);
    let table: [u8; 256] = std::array::from_fn(|q| lut.lookup::<u8, u8>(q as u8));
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 37 % 256) as u8).collect();
    let mut want = vec![0u8; data.len()];
    lut.apply::<u8, u8>(&data, &mut want);
    for isa in supported() {
        let mut got = data.clone();
        apply_codes_with(isa, &table, &mut got).unwrap();
        assert_eq!(got, want, "{isa}");
    }
}
