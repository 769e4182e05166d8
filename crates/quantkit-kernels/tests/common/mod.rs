//! Helpers shared by the kernel tests: a seeded generator and the ISAs this CPU runs.

#![allow(dead_code)]

use quantkit_kernels::Isa;

/// SplitMix64: a seeded generator so failures reproduce.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn range(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next() % (hi - lo + 1) as u64) as i32
    }
}

/// The ISAs this CPU has (scalar always); the others are named on stderr as skipped.
pub fn supported() -> Vec<Isa> {
    let (run, skip): (Vec<Isa>, Vec<Isa>) = Isa::ALL.into_iter().partition(|i| i.is_supported());
    for isa in &skip {
        eprintln!("skipping {}: this CPU lacks its instructions", isa.name());
    }
    run
}
