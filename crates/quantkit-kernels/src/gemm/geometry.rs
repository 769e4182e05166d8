//! Register tile and panel shapes, and the tile buffer every micro-kernel writes.

use crate::Isa;

/// Rows of the register tile of the scalar and AVX2 kernels.
pub const MR: usize = 6;
/// Columns of the register tile and of a packed weight panel (scalar, AVX2).
pub const NR: usize = 16;
/// Consecutive k-values packed together (one i32 lane of `vpmaddwd`; scalar, AVX2).
pub const KGROUP: usize = 2;
/// Rows of the AVX-512 VNNI register tile.
pub const VNNI_MR: usize = 8;
/// Columns of the AVX-512 VNNI register tile and weight panel (two zmm registers).
pub const VNNI_NR: usize = 32;
/// Consecutive k-values of one `vpdpbusd` lane.
pub const VNNI_KGROUP: usize = 4;
/// Largest supported reduction length (see "Exactness").
pub const MAX_K: usize = 33_025;
/// Elements of the largest register tile, the size of the tile buffer.
pub(crate) const TILE: usize = VNNI_MR * VNNI_NR;

// One k-group of an AVX2 weight panel is exactly two 128-bit loads, of a VNNI panel two
// 512-bit loads.
const _: () = assert!(NR * KGROUP == 32 && VNNI_NR * VNNI_KGROUP == 128 && MR * NR <= TILE);

/// Shape of the packed panels and register tile of one kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PanelGeometry {
    /// Rows of the register tile (and of a packed activation panel).
    pub mr: usize,
    /// Columns of the register tile and of a packed weight panel.
    pub nr: usize,
    /// Consecutive k-values in one 32-bit lane.
    pub kgroup: usize,
}

impl PanelGeometry {
    /// Pairs of k in panels of 16 columns, 6-row tiles: scalar and AVX2.
    pub const PAIRS: PanelGeometry = PanelGeometry {
        mr: MR,
        nr: NR,
        kgroup: KGROUP,
    };
    /// Quads of k in panels of 32 columns, 8-row tiles: AVX-512 VNNI.
    pub const QUADS: PanelGeometry = PanelGeometry {
        mr: VNNI_MR,
        nr: VNNI_NR,
        kgroup: VNNI_KGROUP,
    };

    /// The geometry of `isa`'s kernels: the one its plug installs in the kernel table
    /// ([`crate::dispatch::Kernels::geometry`]), known without the CPU supporting `isa` (so
    /// that weights can be packed for any ISA).
    pub fn of(isa: Isa) -> PanelGeometry {
        match isa {
            Isa::Scalar | Isa::Avx2 => Self::PAIRS,
            Isa::Avx512Vnni => Self::QUADS,
        }
    }
}

/// A register tile's raw sums, row-major with the geometry's `nr` as row stride.
#[repr(C, align(64))]
pub(crate) struct Tile(pub(crate) [i32; TILE]);
