//! Run-time choice of the instruction set, made once per process.
//!
//! The best implementation this CPU supports is detected with `is_x86_feature_detected!`
//! the first time [`isa`] is called. The environment variable `QUANTKIT_ISA`
//! (`scalar`, `avx2`, `avx512vnni`, `avxvnni`) forces a path so that tests and benchmarks
//! can compare implementations on one machine. A forced ISA that the CPU lacks, or that
//! this build has no kernels for, falls back to the best available one and says so once
//! on stderr — it never executes an illegal instruction.
//!
//! The kernels themselves are reached through one table per ISA ([`Kernels`], built by
//! [`table_for`]; [`kernels`] is the dispatched one): the generic table of `generic/` with
//! each ISA module's `plug` applied. [`simd_calls`] counts the kernel calls that went to a
//! non-scalar entry, so a test can check that `QUANTKIT_ISA=scalar` keeps the process
//! scalar.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

mod table;

pub use table::{kernels, table_for, Kernels};
pub(crate) use table::{
    Body, DirectFn, DwFn, I16RowsFn, I16WindowFn, Mmm, StoreFloatFn, StoreI32Fn, Stores, TileFn,
    VectorBody, Winograd, I16,
};

use crate::error::{KernelError, Result};

/// An instruction set with its own kernel implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable scalar code (`generic/`): the reference every SIMD path must equal.
    Scalar,
    /// x86-64 AVX2 (`x86_64/avx2/`): exact int8 products via i16 widening and `vpmaddwd`.
    Avx2,
    /// x86-64 AVX-512 with VNNI (`x86_64/avx512vnni/`): u8×i8 dot products of four with
    /// `vpdpbusd` (exact, no intermediate saturation), 512-bit epilogues with masked stores.
    /// Needs AVX-512 F, BW, VL and VNNI.
    Avx512Vnni,
}

/// Names accepted by `QUANTKIT_ISA`, including ones this build has no kernels for yet.
pub const ISA_NAMES: [&str; 4] = ["scalar", "avx2", "avx512vnni", "avxvnni"];

impl Isa {
    /// Every implemented ISA, slowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni];

    /// Lower-case name as accepted by `QUANTKIT_ISA`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }

    /// Whether the running CPU can execute this ISA's kernels.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                use std::arch::is_x86_feature_detected as has;
                // AVX2 too: the VNNI table keeps AVX2's entries and its packer uses AVX2.
                has!("avx2")
                    && has!("avx512f")
                    && has!("avx512bw")
                    && has!("avx512vl")
                    && has!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512Vnni => false,
        }
    }

    /// Parses a `QUANTKIT_ISA` value. Known names without kernels in this build (or
    /// without support on this CPU) give [`KernelError::UnsupportedIsa`].
    pub fn parse(name: &str) -> Result<Isa> {
        let lower = name.trim().to_ascii_lowercase();
        let isa = match lower.as_str() {
            "scalar" | "generic" => Isa::Scalar,
            "avx2" => Isa::Avx2,
            "avx512vnni" => Isa::Avx512Vnni,
            "avxvnni" => return Err(KernelError::UnsupportedIsa { isa: "avxvnni" }),
            _ => {
                return Err(KernelError::InvalidArgument {
                    op: "dispatch",
                    arg: "QUANTKIT_ISA",
                    reason: format!("unknown ISA `{name}`; expected one of {ISA_NAMES:?}"),
                })
            }
        };
        if isa.is_supported() {
            Ok(isa)
        } else {
            Err(KernelError::UnsupportedIsa { isa: isa.name() })
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The fastest implemented ISA the running CPU supports.
pub fn detect_best() -> Isa {
    Isa::ALL
        .iter()
        .rev()
        .copied()
        .find(|isa| isa.is_supported())
        .unwrap_or(Isa::Scalar)
}

/// CPU features relevant to the int8 kernels, for reports (`quantkit bench --isa`).
pub fn cpu_features() -> Vec<(&'static str, bool)> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        vec![
            ("avx2", has!("avx2")),
            ("fma", has!("fma")),
            ("avx512f", has!("avx512f")),
            ("avx512bw", has!("avx512bw")),
            ("avx512vl", has!("avx512vl")),
            ("avx512vnni", has!("avx512vnni")),
            ("avxvnni", has!("avxvnni")),
        ]
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Vec::new()
    }
}

static CHOSEN: OnceLock<Isa> = OnceLock::new();

/// The ISA used by default for this process: `QUANTKIT_ISA` if set and usable, otherwise
/// [`detect_best`]. Decided on first call and fixed afterwards.
pub fn isa() -> Isa {
    *CHOSEN.get_or_init(|| match std::env::var("QUANTKIT_ISA") {
        Ok(v) if !v.trim().is_empty() => match Isa::parse(&v) {
            Ok(isa) => isa,
            Err(e) => {
                let best = detect_best();
                eprintln!("quantkit-kernels: {e}; using `{best}` instead");
                best
            }
        },
        _ => detect_best(),
    })
}

/// Kernel calls that went through a non-scalar table entry.
static SIMD_CALLS: AtomicU64 = AtomicU64::new(0);

/// Counts one kernel call through an entry family when it is SIMD code. Relaxed: the count
/// orders nothing, and it is taken once per call (a GEMM, a conv, a pool), not per tile.
#[inline]
pub(crate) fn note_use(simd: bool) {
    if simd {
        SIMD_CALLS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Number of kernel calls since the process started that used a SIMD entry of a kernel
/// table (GEMM micro-kernels, packers, output stages, Winograd transforms, depthwise and
/// pooling loops). It stays 0 under `QUANTKIT_ISA=scalar` as long as only the dispatched
/// entry points are used (the `*_with(isa, …)` ones use `isa`'s table).
pub fn simd_calls() -> u64 {
    SIMD_CALLS.load(Ordering::Relaxed)
}
