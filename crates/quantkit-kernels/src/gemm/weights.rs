//! Weights packed once into column panels of the kernel's geometry, with their column sums.

use super::geometry::{PanelGeometry, MAX_K};
use crate::dispatch::{self, Isa};
use crate::error::{KernelError, Result};

/// 64 bytes aligned to 64, so that every 512-bit load of a weight panel is one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Line([i8; 64]);

/// Memory order of the unpacked weights handed to [`PackedWeights`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    /// Row-major `[K, N]`: element `(k, n)` at `k·N + n` (ONNX MatMul B).
    KxN,
    /// Row-major `[N, K]`: element `(k, n)` at `n·K + k` (conv weights, Gemm with transB).
    NxK,
}

/// Weights packed once for the GEMM kernels, with column sums precomputed.
#[derive(Debug, Clone)]
pub struct PackedWeights {
    pub(super) k: usize,
    pub(super) n: usize,
    pub(super) geom: PanelGeometry,
    pub(super) kgroups: usize,
    pub(super) n_panels: usize,
    data: Vec<Line>,
    /// `Σ_k w[k][j]` of the stored (i8) values, padded to `n_panels·NR`.
    pub(super) col_sums: Vec<i32>,
    /// Weight zero point per column in the stored domain, padded.
    pub(super) zero_points: Vec<i32>,
    pub(super) zw_all_zero: bool,
}

impl PackedWeights {
    /// Packs i8 weights `w` of shape `[K, N]` or `[N, K]` (see [`WeightLayout`]) with zero
    /// point(s) `zero_points` (1 entry, or N for per-column).
    pub fn from_i8(
        w: &[i8],
        k: usize,
        n: usize,
        layout: WeightLayout,
        zero_points: &[i32],
    ) -> Result<Self> {
        Self::from_i8_for(dispatch::isa(), w, k, n, layout, zero_points)
    }

    /// [`PackedWeights::from_i8`] in the layout of `isa`'s kernels instead of the
    /// dispatched ISA's.
    pub fn from_i8_for(
        isa: Isa,
        w: &[i8],
        k: usize,
        n: usize,
        layout: WeightLayout,
        zero_points: &[i32],
    ) -> Result<Self> {
        let geom = PanelGeometry::of(isa);
        Self::pack(geom, k, n, zero_points, 0, w.len(), |kk, nn| {
            let idx = match layout {
                WeightLayout::KxN => kk * n + nn,
                WeightLayout::NxK => nn * k + kk,
            };
            w[idx]
        })
    }

    /// Packs u8 weights (ONNX MatMulInteger with u8 B); stored as `w − 128`, zero points as
    /// `zw − 128`, which leaves every product `(a−za)(w−zw)` unchanged.
    pub fn from_u8(
        w: &[u8],
        k: usize,
        n: usize,
        layout: WeightLayout,
        zero_points: &[i32],
    ) -> Result<Self> {
        let geom = dispatch::kernels().geometry();
        Self::pack(geom, k, n, zero_points, -128, w.len(), |kk, nn| {
            let idx = match layout {
                WeightLayout::KxN => kk * n + nn,
                WeightLayout::NxK => nn * k + kk,
            };
            (w[idx] ^ 0x80) as i8
        })
    }

    /// Packs weights given by `get(k, n)` (already in the stored i8 domain) for the conv
    /// kernels, in geometry `geom`; zero points in the stored domain.
    pub(crate) fn from_fn(
        geom: PanelGeometry,
        k: usize,
        n: usize,
        zero_points: &[i32],
        get: impl Fn(usize, usize) -> i8,
    ) -> Result<Self> {
        Self::pack(geom, k, n, zero_points, 0, k * n, get)
    }

    /// These weights in the layout of `isa`'s kernels: borrowed when they already are,
    /// otherwise repacked (same stored values, zero points and column sums).
    pub fn for_isa(&self, isa: Isa) -> std::borrow::Cow<'_, PackedWeights> {
        self.for_geometry(PanelGeometry::of(isa))
    }

    /// These weights in geometry `geom`: borrowed when they already are, otherwise
    /// repacked.
    pub(crate) fn for_geometry(&self, geom: PanelGeometry) -> std::borrow::Cow<'_, PackedWeights> {
        if geom == self.geom {
            return std::borrow::Cow::Borrowed(self);
        }
        let repacked = Self::pack(
            geom,
            self.k,
            self.n,
            &self.zero_points[..self.n],
            0,
            self.k * self.n,
            |kk, j| self.stored(kk, j),
        )
        .expect("repacking valid packed weights cannot fail");
        std::borrow::Cow::Owned(repacked)
    }

    /// The stored (i8 domain) weight `(k, j)`.
    pub(super) fn stored(&self, kk: usize, j: usize) -> i8 {
        let g = self.geom;
        let (p, c) = (j / g.nr, j % g.nr);
        self.panel(p)[(kk / g.kgroup) * g.nr * g.kgroup + c * g.kgroup + kk % g.kgroup]
    }

    /// The panel geometry these weights are packed in.
    pub fn geometry(&self) -> PanelGeometry {
        self.geom
    }

    pub(super) fn pack(
        geom: PanelGeometry,
        k: usize,
        n: usize,
        zero_points: &[i32],
        zp_shift: i32,
        len: usize,
        get: impl Fn(usize, usize) -> i8,
    ) -> Result<Self> {
        const OP: &str = "PackedWeights";
        if k == 0 || n == 0 {
            return Err(KernelError::InvalidArgument {
                op: OP,
                arg: "k/n",
                reason: format!("empty weight matrix {k}×{n}"),
            });
        }
        if k > MAX_K {
            return Err(KernelError::InvalidArgument {
                op: OP,
                arg: "k",
                reason: format!(
                    "K = {k} exceeds {MAX_K}, beyond which i32 accumulation is not exact"
                ),
            });
        }
        if len != k * n {
            return Err(KernelError::BufferLength {
                op: OP,
                arg: "weights",
                expected: k * n,
                got: len,
            });
        }
        if zero_points.len() != 1 && zero_points.len() != n {
            return Err(KernelError::ChannelCount {
                op: OP,
                arg: "zero_points",
                channels: n,
                got: zero_points.len(),
            });
        }
        let PanelGeometry { nr, kgroup, .. } = geom;
        let kgroups = k.div_ceil(kgroup);
        let n_panels = n.div_ceil(nr);
        let npad = n_panels * nr;
        let panel_len = kgroups * nr * kgroup;
        let mut data = vec![Line([0; 64]); (n_panels * panel_len).div_ceil(64)];
        let bytes = lines_as_bytes_mut(&mut data);
        let mut col_sums = vec![0i32; npad];
        for p in 0..n_panels {
            let panel = &mut bytes[p * panel_len..(p + 1) * panel_len];
            for c in 0..nr.min(n - p * nr) {
                let j = p * nr + c;
                let mut s = 0i32;
                for kk in 0..k {
                    let v = get(kk, j);
                    s += v as i32;
                    panel[(kk / kgroup) * nr * kgroup + c * kgroup + kk % kgroup] = v;
                }
                col_sums[j] = s;
            }
        }
        let mut zps = vec![0i32; npad];
        for (j, z) in zps.iter_mut().enumerate().take(n) {
            let zp = if zero_points.len() == 1 {
                zero_points[0]
            } else {
                zero_points[j]
            };
            *z = zp + zp_shift;
        }
        let zw_all_zero = zps.iter().all(|&z| z == 0);
        Ok(PackedWeights {
            k,
            n,
            geom,
            kgroups,
            n_panels,
            data,
            col_sums,
            zero_points: zps,
            zw_all_zero,
        })
    }

    /// Reduction length K.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Whether every weight zero point is 0, so that the epilogue ignores activation row
    /// sums.
    pub(crate) fn zero_points_all_zero(&self) -> bool {
        self.zw_all_zero
    }

    /// Number of output columns N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes held by the packed data.
    pub fn packed_bytes(&self) -> usize {
        self.data.len() * 64
    }

    #[inline(always)]
    pub(super) fn panel(&self, p: usize) -> &[i8] {
        let len = self.kgroups * self.geom.nr * self.geom.kgroup;
        &lines_as_bytes(&self.data)[p * len..(p + 1) * len]
    }
}

fn lines_as_bytes(lines: &[Line]) -> &[i8] {
    // SAFETY: `Line` is `repr(C)` around `[i8; 64]` with no padding (size 64, align 64), so
    // the slice is `64·len` initialised bytes.
    unsafe { std::slice::from_raw_parts(lines.as_ptr() as *const i8, lines.len() * 64) }
}

fn lines_as_bytes_mut(lines: &mut [Line]) -> &mut [i8] {
    // SAFETY: as in `lines_as_bytes`; the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr() as *mut i8, lines.len() * 64) }
}
