//! Small file-system helpers shared by the writers.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::error::{DataError, Result};

/// Writes `path` through quantkit-core's one atomic writer
/// ([`quantkit_core::atomic::write_atomic`]: O_EXCL temporary file in the same folder,
/// fsync, rename; removed on every error path and on SIGINT/SIGTERM in the binary).
pub(crate) fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    quantkit_core::atomic::write_atomic(path, write).map_err(|e| DataError::io(path, e))
}

/// Reads a whole regular file, naming it in the error. A device, FIFO or socket is refused:
/// its length is unknown, and `/dev/zero` would be read until memory runs out.
pub(crate) fn read_all(path: &Path) -> Result<Vec<u8>> {
    let meta = fs::metadata(path).map_err(|e| DataError::io(path, e))?;
    if !meta.is_file() {
        return Err(DataError::format(
            path,
            "not a regular file (a device, FIFO or socket cannot be read as data)",
        ));
    }
    fs::read(path).map_err(|e| DataError::io(path, e))
}
