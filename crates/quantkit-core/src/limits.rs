//! Resource limits for untrusted input, in one place.
//!
//! Model and data files are often downloaded: a file may *claim* sizes (dims of an
//! initializer, an `.npy` header's shape, an IDX header, a PNG header, pads of a Conv) that
//! it does not contain, or compress gigabytes into a few kilobytes. Every reader and every
//! operator that allocates from such a claim checks it here first, and the error names the
//! tensor, the size it claims and the limit (see `docs/security.md`).
//!
//! The limits are read once per process from the environment variable
//! `QUANTKIT_LIMITS`, a comma-separated list of `key=value` pairs (values are integers,
//! optionally with a `K`, `M`, `G` or `T` binary suffix), for example
//! `QUANTKIT_LIMITS=tensor_elements=4G,inflated_bytes=8G`. Keys and defaults:
//!
//! | key | default | what it bounds |
//! |---|---|---|
//! | `tensor_elements` | 2^28 (268,435,456; 1 GiB of f32) | elements of one tensor allocated from declared dims or computed output shapes |
//! | `file_bytes` | 4 GiB | total bytes of the tensors one model file declares (initializers, sparse initializers) |
//! | `nesting` | 30 | depth of nested subgraphs (`If`/`Loop`/`Scan` bodies); 30 is also the most the model decoder can read |
//! | `inflated_bytes` | 1 GiB | bytes one compressed stream (an `.npz` member, a gzip IDX file) may expand to |
//! | `inflate_ratio` | 1024 | expansion ratio of a compressed stream, checked once it has produced more than 64 MiB |
//! | `npz_members` | 4096 | members of one `.npz` archive |
//! | `image_pixels` | 2^26 (8192 × 8192) | pixels of one image, read from its header before decoding |
//!
//! ```
//! use quantkit_core::limits::Limits;
//!
//! let l = Limits::parse("tensor_elements=1K,npz_members=8")?;
//! assert_eq!(l.tensor_elements, 1024);
//! assert!(l.check_shape("w", &[32, 32]).is_ok());
//! let e = l.check_shape("w", &[1 << 20, 1 << 20]).unwrap_err();
//! assert!(e.to_string().starts_with("w claims shape [1048576, 1048576]"));
//! # Ok::<(), quantkit_core::limits::LimitError>(())
//! ```

use std::sync::OnceLock;

/// The environment variable the limits are read from.
pub const ENV_VAR: &str = "QUANTKIT_LIMITS";

/// A claimed size beyond a limit, or a malformed `QUANTKIT_LIMITS`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A tensor, file or stream whose (claimed) size exceeds a limit or overflows.
    #[error(
        "{what} claims {claimed}, over the limit of {limit} (raise it with {ENV_VAR}={key}=...)"
    )]
    Exceeded {
        /// The tensor, file or stream, by name (quoted by the caller where it is a name:
        /// ``tensor `w` ``).
        what: String,
        /// The size it claims, in words (`[1048576, 1048576] = 1099511627776 elements`).
        claimed: String,
        /// The limit, in words.
        limit: String,
        /// The `QUANTKIT_LIMITS` key that raises it.
        key: &'static str,
    },
    /// `QUANTKIT_LIMITS` could not be parsed.
    #[error("{ENV_VAR}: {0}")]
    Malformed(String),
}

/// The resource limits (see the module documentation for each field's default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Elements of one tensor allocated from declared dims or computed output shapes.
    pub tensor_elements: u64,
    /// Total bytes of the tensors one model file declares.
    pub file_bytes: u64,
    /// Depth of nested subgraphs.
    pub nesting: u64,
    /// Bytes one compressed stream may expand to.
    pub inflated_bytes: u64,
    /// Expansion ratio of one compressed stream (checked beyond [`Limits::RATIO_FLOOR`]).
    pub inflate_ratio: u64,
    /// Members of one `.npz` archive.
    pub npz_members: u64,
    /// Pixels of one decoded image.
    pub image_pixels: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

static CURRENT: OnceLock<Limits> = OnceLock::new();

impl Limits {
    /// The defaults.
    pub const DEFAULT: Limits = Limits {
        tensor_elements: 1 << 28,
        file_bytes: 4 << 30,
        nesting: 30,
        inflated_bytes: 1 << 30,
        inflate_ratio: 1024,
        npz_members: 4096,
        image_pixels: 1 << 26,
    };

    /// Output size below which the expansion ratio is not checked (small, highly
    /// compressible arrays, such as all-zero masks, are legitimate).
    pub const RATIO_FLOOR: u64 = 64 << 20;

    /// The process's limits: `QUANTKIT_LIMITS` parsed on first use, the defaults when it is
    /// unset. A malformed value falls back to the defaults here; front ends call
    /// [`Limits::from_env`] first to report it (the `quantkit` binary does).
    pub fn current() -> &'static Limits {
        CURRENT.get_or_init(|| Limits::from_env().unwrap_or_default())
    }

    /// Sets the process's limits before their first use (returns `false` if they were
    /// already fixed).
    pub fn install(limits: Limits) -> bool {
        CURRENT.set(limits).is_ok()
    }

    /// The defaults overridden by `QUANTKIT_LIMITS`, if set.
    pub fn from_env() -> Result<Limits, LimitError> {
        match std::env::var(ENV_VAR) {
            Ok(s) => Limits::parse(&s),
            Err(std::env::VarError::NotPresent) => Ok(Limits::DEFAULT),
            Err(e) => Err(LimitError::Malformed(e.to_string())),
        }
    }

    /// The defaults overridden by `key=value` pairs separated by commas.
    pub fn parse(spec: &str) -> Result<Limits, LimitError> {
        let mut l = Limits::DEFAULT;
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once('=').ok_or_else(|| {
                LimitError::Malformed(format!("expected key=value, got `{item}`"))
            })?;
            let v = parse_size(value.trim())
                .ok_or_else(|| LimitError::Malformed(format!("`{key}`: bad value `{value}`")))?;
            let slot = match key.trim() {
                "tensor_elements" => &mut l.tensor_elements,
                "file_bytes" => &mut l.file_bytes,
                "nesting" => &mut l.nesting,
                "inflated_bytes" => &mut l.inflated_bytes,
                "inflate_ratio" => &mut l.inflate_ratio,
                "npz_members" => &mut l.npz_members,
                "image_pixels" => &mut l.image_pixels,
                other => return Err(LimitError::Malformed(format!("unknown key `{other}`"))),
            };
            *slot = v;
        }
        Ok(l)
    }

    /// The element count of a tensor `what` of `shape`, or an error if the product
    /// overflows or exceeds [`Limits::tensor_elements`].
    pub fn check_shape(&self, what: &str, shape: &[usize]) -> Result<usize, LimitError> {
        let n = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        match n {
            Some(n) if n <= self.tensor_elements => Ok(n as usize),
            _ => Err(LimitError::Exceeded {
                what: what.to_string(),
                claimed: format!(
                    "shape {shape:?} = {} elements",
                    n.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
                ),
                limit: format!("{} elements", self.tensor_elements),
                key: "tensor_elements",
            }),
        }
    }

    /// Like [`Limits::check_shape`] for signed dims as a file declares them (a negative
    /// dim is the caller's error to report; here it counts as overflow).
    pub fn check_dims(&self, what: &str, dims: &[i64]) -> Result<usize, LimitError> {
        let n = dims.iter().try_fold(1u64, |acc, &d| {
            u64::try_from(d).ok().and_then(|d| acc.checked_mul(d))
        });
        match n {
            Some(n) if n <= self.tensor_elements => Ok(n as usize),
            _ => Err(LimitError::Exceeded {
                what: what.to_string(),
                claimed: format!(
                    "dims {dims:?} = {} elements",
                    n.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
                ),
                limit: format!("{} elements", self.tensor_elements),
                key: "tensor_elements",
            }),
        }
    }

    /// Checks a count `n` of something `what` against one limit `limit` named `key`
    /// (`unit` words the numbers: "bytes", "members", "pixels").
    pub fn check(
        what: &str,
        n: u64,
        limit: u64,
        key: &'static str,
        unit: &str,
    ) -> Result<(), LimitError> {
        if n <= limit {
            return Ok(());
        }
        Err(LimitError::Exceeded {
            what: what.to_string(),
            claimed: format!("{n} {unit}"),
            limit: format!("{limit} {unit}"),
            key,
        })
    }

    /// Checks the output of a compressed stream `what` so far: `out` bytes produced from
    /// `compressed` bytes of input (the stream's whole compressed size when known).
    pub fn check_inflated(&self, what: &str, out: u64, compressed: u64) -> Result<(), LimitError> {
        Limits::check(
            what,
            out,
            self.inflated_bytes,
            "inflated_bytes",
            "bytes after decompression",
        )?;
        if out > Limits::RATIO_FLOOR && out / compressed.max(1) > self.inflate_ratio {
            return Err(LimitError::Exceeded {
                what: what.to_string(),
                claimed: format!("{out} bytes from {compressed} compressed bytes"),
                limit: format!("an expansion ratio of {}", self.inflate_ratio),
                key: "inflate_ratio",
            });
        }
        Ok(())
    }
}

/// `123`, `4K`, `16M`, `2G`, `1T` (binary multiples) or `1e9`-style integers.
fn parse_size(s: &str) -> Option<u64> {
    let (digits, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        'T' | 't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    if let Ok(v) = digits.parse::<u64>() {
        return v.checked_mul(mult);
    }
    let f: f64 = digits.parse().ok()?;
    let v = f * mult as f64;
    (v.is_finite() && v >= 0.0 && v < u64::MAX as f64 && v.fract() == 0.0).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_overrides_only_the_keys_given() {
        let l = Limits::parse("tensor_elements=2G, inflate_ratio=10,npz_members=1e3").unwrap();
        assert_eq!(l.tensor_elements, 2 << 30);
        assert_eq!(l.inflate_ratio, 10);
        assert_eq!(l.npz_members, 1000);
        assert_eq!(l.file_bytes, Limits::DEFAULT.file_bytes);
        assert!(Limits::parse("bogus=1").is_err());
        assert!(Limits::parse("tensor_elements").is_err());
        assert!(Limits::parse("tensor_elements=-1").is_err());
        assert!(Limits::parse("tensor_elements=99999999999T").is_err());
    }

    #[test]
    fn check_shape_catches_overflow_and_the_cap() {
        let l = Limits::DEFAULT;
        assert_eq!(l.check_shape("t", &[2, 3]).unwrap(), 6);
        assert_eq!(l.check_shape("t", &[]).unwrap(), 1);
        assert_eq!(l.check_shape("t", &[0, usize::MAX]).unwrap(), 0);
        let e = l
            .check_shape("big", &[1 << 20, 1 << 20])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("big claims") && e.contains("1099511627776"),
            "{e}"
        );
        let e = l
            .check_shape("wrap", &[usize::MAX, 3])
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 2^64"), "{e}");
        assert!(l.check_dims("neg", &[-1, 2]).is_err());
        assert_eq!(l.check_dims("d", &[4, 5]).unwrap(), 20);
    }

    #[test]
    fn inflation_ratio_is_checked_only_beyond_the_floor() {
        let l = Limits::DEFAULT;
        assert!(l.check_inflated("z", 1 << 20, 1).is_ok());
        assert!(l.check_inflated("z", 65 << 20, 1 << 10).is_err());
        assert!(l.check_inflated("z", 65 << 20, 1 << 20).is_ok());
        assert!(l.check_inflated("z", (1 << 30) + 1, 1 << 30).is_err());
    }
}
