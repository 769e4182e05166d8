//! The activation matrix A as the GEMM receives it: u8, i8, or rows gathered on demand.

/// The activation matrix `A[M,K]`, row-major and contiguous, with its zero point.
#[derive(Debug, Clone, Copy)]
pub struct Activations<'a> {
    pub(super) data: ActData<'a>,
    pub(super) m: usize,
    pub(super) k: usize,
    pub(super) zero_point: i32,
}

#[derive(Clone, Copy)]
pub(super) enum ActData<'a> {
    U8(&'a [u8]),
    I8(&'a [i8]),
    /// Rows produced on demand (`f(first, out)` writes rows `first..first + out.len() / k`,
    /// `k` bytes each: u8 values, or the bit patterns of i8 values when `signed`): an
    /// implicit im2col, gathered panel by panel right before packing instead of
    /// materialising `[M, K]`.
    Gather {
        f: &'a (dyn Fn(usize, &mut [u8]) + Sync),
        signed: bool,
        /// Optional direct packer of whole panels in the pairs geometry (scalar, AVX2):
        /// `panel(p, dst, sums)` writes panel `p` (rows `6p..6p+6`, all inside M) and its
        /// row sums exactly as gathering and packing those rows would.
        panel: Option<&'a PanelFn<'a>>,
    },
}

/// A direct packer of one full activation panel: `(panel index, words, row sums)`.
pub(crate) type PanelFn<'a> = dyn Fn(usize, &mut [u32], &mut [i32]) + Sync + 'a;

impl std::fmt::Debug for ActData<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActData::U8(d) => write!(f, "U8({} values)", d.len()),
            ActData::I8(d) => write!(f, "I8({} values)", d.len()),
            ActData::Gather { signed, .. } => write!(f, "Gather {{ signed: {signed} }}"),
        }
    }
}

impl<'a> Activations<'a> {
    /// u8 activations `[m, k]` with zero point `zero_point` (normally in `0..=255`).
    pub fn u8(data: &'a [u8], m: usize, k: usize, zero_point: i32) -> Self {
        Activations {
            data: ActData::U8(data),
            m,
            k,
            zero_point,
        }
    }

    /// i8 activations `[m, k]` with zero point `zero_point` (normally in `-128..=127`).
    pub fn i8(data: &'a [i8], m: usize, k: usize, zero_point: i32) -> Self {
        Activations {
            data: ActData::I8(data),
            m,
            k,
            zero_point,
        }
    }

    /// Activations `[m, k]` whose rows `f(first, out)` writes on demand (rows
    /// `first..first + out.len() / k`; u8 values, or the bit patterns of i8 values when
    /// `signed`), with zero point `zero_point` in the value domain. The GEMM gathers each
    /// panel of rows right before packing it, so `[m, k]` is never materialised (the
    /// convolution's implicit im2col). With `panel`, full panels in the pairs geometry are
    /// packed by it directly instead (see [`PanelFn`]).
    pub(crate) fn gather(
        f: &'a (dyn Fn(usize, &mut [u8]) + Sync),
        panel: Option<&'a PanelFn<'a>>,
        signed: bool,
        m: usize,
        k: usize,
        zero_point: i32,
    ) -> Self {
        Activations {
            data: ActData::Gather { f, signed, panel },
            m,
            k,
            zero_point,
        }
    }

    /// Number of rows M.
    pub fn m(&self) -> usize {
        self.m
    }

    pub(super) fn len(&self) -> usize {
        match self.data {
            ActData::U8(d) => d.len(),
            ActData::I8(d) => d.len(),
            ActData::Gather { .. } => self.m * self.k,
        }
    }

    /// Zero point in the stored (u8) domain.
    pub(super) fn stored_zero_point(&self) -> i32 {
        match self.data {
            ActData::U8(_) | ActData::Gather { signed: false, .. } => self.zero_point,
            ActData::I8(_) | ActData::Gather { signed: true, .. } => self.zero_point + 128,
        }
    }
}
