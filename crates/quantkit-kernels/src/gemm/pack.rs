//! Packing activations into the row panels the micro-kernels read, with their row sums.

use rayon::prelude::*;

use super::activations::{ActData, Activations};
use super::geometry::PanelGeometry;
use crate::dispatch::Mmm;

thread_local! {
    /// Rows of one gathered panel (see [`ActData::Gather`]), reused across calls.
    static GATHERED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A packed copy of A: row panels of `mr` rows, `[g][mr]` 32-bit words holding the `kgroup`
/// stored values `a[kgroup·g + i]` of one row (pairs: zero-extended to 16 bits each, low half
/// first; quads: one byte each, lowest byte first), and the row sums `Σ_k a` of the stored
/// values.
pub(super) struct PackedA {
    pub(super) data: Vec<u32>,
    pub(super) rowsums: Vec<i32>,
}

impl PackedA {
    pub(super) fn new(a: &Activations<'_>, mmm: &Mmm, parallel: bool) -> Self {
        let geom = mmm.geometry;
        let kgroups = a.k.div_ceil(geom.kgroup);
        let panels = a.m.div_ceil(geom.mr);
        let mut data = vec![0u32; panels * kgroups * geom.mr];
        let mut rowsums = vec![0i32; panels * geom.mr];
        let chunks = data
            .chunks_mut(kgroups * geom.mr)
            .zip(rowsums.chunks_mut(geom.mr))
            .enumerate();
        if parallel {
            chunks
                .par_bridge()
                .for_each(|(p, (dst, sums))| pack_a_panel(a, mmm, p, dst, sums));
        } else {
            chunks.for_each(|(p, (dst, sums))| pack_a_panel(a, mmm, p, dst, sums));
        }
        PackedA { data, rowsums }
    }
}

/// Packs row panel `p` of `a` (rows `p·mr..`, zero rows past the end) into `dst`
/// (`kgroups·mr` words, k-group major) and the rows' sums of stored values into `sums`.
/// The stored row is u8 as is, i8 with the sign bit flipped (a + 128). The packer is the
/// table's (`mmm.pack`, for `mmm`'s geometry; the AVX2 one writes the same words as the
/// scalar one, tested).
pub(crate) fn pack_a_panel(
    a: &Activations<'_>,
    mmm: &Mmm,
    p: usize,
    dst: &mut [u32],
    sums: &mut [i32],
) {
    let geom = mmm.geometry;
    let rows = geom.mr.min(a.m - p * geom.mr);
    let k = a.k;
    let (bytes, flip): (&[u8], u8) = match a.data {
        ActData::U8(d) => (d, 0),
        // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
        ActData::I8(d) => (
            unsafe { std::slice::from_raw_parts(d.as_ptr() as *const u8, d.len()) },
            0x80,
        ),
        ActData::Gather { f, signed, panel } => {
            if let Some(panel) = panel {
                if rows == geom.mr && geom == PanelGeometry::PAIRS {
                    panel(p, dst, sums);
                    return;
                }
            }
            GATHERED.with_borrow_mut(|buf| {
                buf.resize(rows * k, 0);
                f(p * geom.mr, &mut buf[..rows * k]);
                pack_rows(
                    &buf[..rows * k],
                    rows,
                    k,
                    if signed { 0x80 } else { 0 },
                    mmm,
                    dst,
                    sums,
                )
            });
            return;
        }
    };
    let panel = &bytes[p * geom.mr * k..(p * geom.mr + rows) * k];
    pack_rows(panel, rows, k, flip, mmm, dst, sums);
}

/// Packs `rows ≤ mr` rows of `k` stored bytes (`panel[r·k..]`, XORed with `flip`) into a
/// panel with the table's packer: the body of [`pack_a_panel`].
fn pack_rows(
    panel: &[u8],
    rows: usize,
    k: usize,
    flip: u8,
    mmm: &Mmm,
    dst: &mut [u32],
    sums: &mut [i32],
) {
    let mr = mmm.geometry.mr;
    // A reused buffer holds the previous block's values: clear the padding rows.
    if rows < mr {
        for g in 0..dst.len() / mr {
            dst[g * mr + rows..(g + 1) * mr].fill(0);
        }
        sums[rows..].fill(0);
    }
    (mmm.pack)(panel, rows, k, flip, dst, sums);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::{table_for, Isa};
    use crate::gemm::MR;

    /// The AVX-512 VNNI quad packer writes exactly the scalar quad packer's words and row
    /// sums: every k from 1 to 80 plus conv-sized ones, every panel height, u8 and i8, into
    /// buffers that start out holding garbage.
    #[test]
    fn vnni_pack_equals_scalar_quads_pack() {
        if !Isa::Avx512Vnni.is_supported() {
            eprintln!("skipping avx512vnni: this CPU lacks its instructions");
            return;
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut byte = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        };
        let vnni = &table_for(Isa::Avx512Vnni).unwrap().mmm;
        assert_eq!(vnni.geometry, PanelGeometry::QUADS);
        let scalar = crate::dispatch::Mmm {
            pack: crate::generic::pack::generic_pack_a_quads,
            ..*vnni
        };
        let mr = PanelGeometry::QUADS.mr;
        let ks: Vec<usize> = (1..=80)
            .chain([127, 128, 129, 288, 1152, 3136, 4099])
            .collect();
        for &k in &ks {
            for m in [1, 5, 7, 8, 9, 17] {
                let u: Vec<u8> = (0..m * k).map(|_| byte()).collect();
                let i: Vec<i8> = u.iter().map(|&v| v as i8).collect();
                for a in [Activations::u8(&u, m, k, 3), Activations::i8(&i, m, k, -5)] {
                    let kgroups = k.div_ceil(4);
                    for p in 0..m.div_ceil(mr) {
                        let garbage: Vec<u32> = (0..kgroups * mr)
                            .map(|g| (g as u32).wrapping_mul(2_654_435_761))
                            .collect();
                        let (mut d0, mut d1) = (garbage.clone(), garbage);
                        let (mut s0, mut s1) = ([-7i32; 8], [-7i32; 8]);
                        pack_a_panel(&a, &scalar, p, &mut d0, &mut s0);
                        pack_a_panel(&a, vnni, p, &mut d1, &mut s1);
                        assert_eq!(d0, d1, "words: k {k}, m {m}, panel {p}");
                        assert_eq!(s0, s1, "row sums: k {k}, m {m}, panel {p}");
                    }
                }
            }
        }
    }

    /// The AVX2 activation packer writes exactly the scalar packer's words and row sums:
    /// every k from 1 to 80 plus conv-sized ones, every panel height, u8 and i8, into buffers
    /// that start out holding garbage (as a reused per-worker buffer does).
    #[test]
    fn avx2_pack_equals_scalar_pack() {
        if !Isa::Avx2.is_supported() {
            eprintln!("skipped: the CPU has no AVX2");
            return;
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut byte = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        };
        let scalar = &table_for(Isa::Scalar).unwrap().mmm;
        let avx2 = &table_for(Isa::Avx2).unwrap().mmm;
        assert_eq!(avx2.geometry, PanelGeometry::PAIRS);
        let ks: Vec<usize> = (1..=80).chain([127, 128, 129, 288, 1152, 4099]).collect();
        for &k in &ks {
            for m in [1, 5, 6, 7, 12, 17] {
                let u: Vec<u8> = (0..m * k).map(|_| byte()).collect();
                let i: Vec<i8> = u.iter().map(|&v| v as i8).collect();
                for a in [Activations::u8(&u, m, k, 3), Activations::i8(&i, m, k, -5)] {
                    let kgroups = k.div_ceil(2);
                    for p in 0..m.div_ceil(MR) {
                        let garbage: Vec<u32> = (0..kgroups * MR)
                            .map(|g| (g as u32).wrapping_mul(2_654_435_761))
                            .collect();
                        let (mut d0, mut d1) = (garbage.clone(), garbage);
                        let (mut s0, mut s1) = ([-7i32; MR], [-7i32; MR]);
                        pack_a_panel(&a, scalar, p, &mut d0, &mut s0);
                        pack_a_panel(&a, avx2, p, &mut d1, &mut s1);
                        assert_eq!(d0, d1, "words: k {k}, m {m}, panel {p}");
                        assert_eq!(s0, s1, "row sums: k {k}, m {m}, panel {p}");
                    }
                }
            }
        }
    }
}
