//! Small file-system helpers shared by the writers.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{DataError, Result};

/// Writes `path` atomically: the bytes go to a fresh temporary file in the same folder
/// (so the final `rename` stays on one file system), which is flushed, synced and then
/// renamed over `path`. On any error the temporary file is removed, so a failed write
/// never leaves a half-written output behind.
pub(crate) fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| DataError::format(path, "not a file name"))?
        .to_string_lossy()
        .into_owned();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        let mut w = BufWriter::new(file);
        write(&mut w)?;
        w.flush()?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(DataError::io(path, e));
    }
    Ok(())
}

/// Reads a whole file, naming it in the error.
pub(crate) fn read_all(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| DataError::io(path, e))
}
