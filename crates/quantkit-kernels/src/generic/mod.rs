//! Portable scalar kernels: the reference every SIMD path must equal bit for bit, and
//! `generic()`, the kernel table they fill before an ISA's `plug` overrides entries.

pub mod depthwise;
pub mod gemm;
pub mod lut;
pub mod pack;
pub mod store;
pub mod winograd;

use crate::dispatch::{Kernels, Mmm, Stores, VectorBody, Winograd, I16};
use crate::gemm::{PanelGeometry, Tile, NR};
use crate::Isa;

/// The stores of scalar tiles `NR` wide.
pub(crate) const STORES_16: Stores = Stores {
    isa: Isa::Scalar,
    i32: store::generic_store_i32::<NR>,
    u8: store::generic_store_float::<u8, NR>,
    i8: store::generic_store_float::<i8, NR>,
};

/// The table of portable kernels: pairs geometry (6×16 tiles, k in pairs), scalar
/// micro-kernels, packers, stores and transforms, loops compiled for the baseline target.
pub(crate) fn generic() -> Kernels {
    let pairs = Mmm {
        isa: Isa::Scalar,
        geometry: PanelGeometry::PAIRS,
        tile: gemm::generic_tile_u8i8_6x16,
        pack: pack::generic_pack_a_pairs,
        store: STORES_16,
    };
    Kernels {
        isa: Isa::Scalar,
        mmm: pairs,
        pairs,
        store16: STORES_16,
        i16: I16 {
            isa: Isa::Scalar,
            tile: gemm::generic_tile_i16_6x16,
            window: gemm::generic_gemm_i16_window_4x16,
            rows: gemm::generic_gemm_i16_rows_6x16,
        },
        winograd: Winograd {
            body: VectorBody::Generic,
            input_isa: Isa::Scalar,
            input: winograd::generic_winograd_input_16,
        },
        direct: (Isa::Scalar, direct_tile),
        depthwise: VectorBody::Generic,
        dw_blocks: (Isa::Scalar, depthwise::generic_dw_u8i16_16),
        pooling: VectorBody::Generic,
        elementwise: VectorBody::Generic,
        lut: (Isa::Scalar, lut::generic_lut_u8),
    }
}

/// The table entry of [`gemm::generic_conv_u8i8_i32_8x32_indirect`] (which checks bounds
/// by indexing).
fn direct_tile(x: &[u8], rows: &[usize; 8], koff: &[usize], b: &[i8], out: &mut [Tile; 2]) {
    gemm::generic_conv_u8i8_i32_8x32_indirect(x, rows, koff, b, out)
}
