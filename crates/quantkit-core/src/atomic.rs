//! The one atomic file writer: every output file of quantkit (models, `.npy`/`.npz`
//! outputs, reports, plots, checkpoints) is written through [`write_atomic`], so a reader
//! sees either the old file or the complete new one, never a half-written file.
//!
//! How: the bytes go to a fresh temporary file created in the target's own folder (so the
//! final rename stays on one file system) by the `tempfile` crate — an unpredictable name,
//! opened with `O_EXCL`, so a pre-planted file or symlink of that name is never followed —
//! then the file is flushed, `fsync`ed and renamed over the target. On every error path the
//! temporary file is removed. While it exists its path sits in a process-wide registry that
//! [`remove_pending`] empties: the `quantkit` binary calls it from its SIGINT/SIGTERM
//! handler, so an interrupted run leaves no temporary file behind.
//!
//! The target must be absent or a regular file. A directory, FIFO, socket, device or
//! **symlink** at the target path is refused with an error (a symlink is neither followed
//! nor silently replaced: `-o link.onnx` pointing elsewhere is more likely a mistake or an
//! attack than an intent; remove it or name the real file).
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("out.txt");
//! quantkit_core::atomic::write_atomic(&path, |w| w.write_all(b"hello"))?;
//! assert_eq!(std::fs::read(&path)?, b"hello");
//! assert!(std::fs::symlink_metadata(dir.path().join("out.txt")).is_ok());
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::BTreeSet;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Suffix of the temporary files (after a random part): `.out.onnx.XXXXXX.tmp-quantkit`.
pub const TEMP_SUFFIX: &str = ".tmp-quantkit";

static PENDING: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

fn pending() -> MutexGuard<'static, BTreeSet<PathBuf>> {
    // A writer that panicked while holding the lock leaves a set that is still valid.
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes `path` atomically with `write` (see the module documentation). The error does
/// not repeat `path`: callers wrap it with the path (`GraphError::Io`, `DataError::Io`,
/// anyhow's context in the binary).
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    check_target(path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?
        .to_string_lossy()
        .into_owned();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(TEMP_SUFFIX);
    // The finished file gets the mode an ordinary create would give it: a replaced file
    // keeps its own mode, a new one gets 0666 less the umask (the temporary file is
    // created with that mode, so it is never more open than the result). Without this,
    // `tempfile`'s private 0600 would leave every report and model unreadable to others.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = match std::fs::metadata(path) {
            Ok(m) => m.permissions().mode() & 0o7777,
            Err(_) => 0o666,
        };
        builder.permissions(std::fs::Permissions::from_mode(mode));
    }
    // Created and registered under the registry lock: a signal handler emptying the
    // registry either runs first (and then holds the lock, so no file is created) or sees
    // the file registered. Registering after creating left a window in which a signal
    // found the file on disk but not in the registry (tests/malformed.rs caught it).
    let mut reg = pending();
    let tmp = builder.tempfile_in(&dir)?;
    let tmp_path = tmp.path().to_path_buf();
    test_hook_sleep("QUANTKIT_TEST_SLOW_CREATE_MS");
    reg.insert(tmp_path.clone());
    drop(reg);
    let result = (|| {
        let mut w = BufWriter::new(tmp.as_file());
        write(&mut w)?;
        w.flush()?;
        drop(w);
        tmp.as_file().sync_all()?;
        test_hook_sleep("QUANTKIT_TEST_SLOW_WRITE_MS");
        // Re-checked just before the rename: the target may have changed meanwhile.
        check_target(path)?;
        // Renamed while holding the registry lock, so a signal handler emptying the
        // registry sees either the temporary file (and removes it) or the finished rename.
        let mut reg = pending();
        let done = tmp.persist(path).map_err(|e| e.error);
        reg.remove(&tmp_path);
        done.map(drop)
    })();
    if result.is_err() {
        // `NamedTempFile` removes the file when dropped; this covers a failed persist too.
        let _ = std::fs::remove_file(&tmp_path);
        pending().remove(&tmp_path);
    }
    result
}

/// Test hooks (tests/malformed.rs): sleep for the milliseconds the variable `var` holds, to
/// widen a window so that a test can deliver a signal inside it:
/// `QUANTKIT_TEST_SLOW_CREATE_MS` between creating the temporary file and registering it,
/// `QUANTKIT_TEST_SLOW_WRITE_MS` between the fsync and the rename.
fn test_hook_sleep(var: &str) {
    if let Some(v) = std::env::var_os(var) {
        let ms = v.to_str().and_then(|s| s.parse().ok()).unwrap_or(0);
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// [`write_atomic`] of a byte slice.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic(path, |w| w.write_all(bytes))
}

/// Removes every temporary file a [`write_atomic`] in progress has created, and keeps the
/// registry locked until the process ends if `hold` is set (the signal handler's case: no
/// rename may start after the cleanup). Returns how many files were removed.
pub fn remove_pending(hold: bool) -> usize {
    let mut reg = pending();
    let n = reg
        .iter()
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count();
    reg.clear();
    if hold {
        std::mem::forget(reg);
    }
    n
}

/// The target must be absent or a regular file (not a symlink, directory, FIFO...).
fn check_target(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.file_type().is_file() => Ok(()),
        Ok(m) => {
            let what = if m.file_type().is_symlink() {
                "a symbolic link (refused: neither followed nor replaced; remove it or name the real file)"
            } else if m.is_dir() {
                "a directory"
            } else {
                "not a regular file (FIFO, socket or device)"
            };
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("output path is {what}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(TEMP_SUFFIX))
            .collect()
    }

    #[test]
    fn replaces_a_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.onnx");
        std::fs::write(&p, b"old").unwrap();
        write_bytes(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_failing_writer_keeps_the_old_file_and_removes_the_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.onnx");
        std::fs::write(&p, b"old").unwrap();
        let e = write_atomic(&p, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(leftovers(dir.path()).is_empty());
        assert!(pending().is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn new_files_follow_the_umask_and_replaced_files_keep_their_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh.onnx");
        write_bytes(&fresh, b"x").unwrap();
        // The process umask, read back from a file created the ordinary way.
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode(&fresh),
            mode(&plain),
            "a new file gets the ordinary mode"
        );
        let kept = dir.path().join("kept.onnx");
        std::fs::write(&kept, b"old").unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_bytes(&kept, b"new").unwrap();
        assert_eq!(mode(&kept), 0o640, "a replaced file keeps its mode");
        assert_eq!(std::fs::read(&kept).unwrap(), b"new");
    }

    #[test]
    fn directories_and_symlinks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let e = write_bytes(&sub, b"x").unwrap_err().to_string();
        assert!(e.contains("directory"), "{e}");
        #[cfg(unix)]
        {
            let victim = dir.path().join("victim");
            std::fs::write(&victim, b"keep").unwrap();
            let link = dir.path().join("link.onnx");
            std::os::unix::fs::symlink(&victim, &link).unwrap();
            let e = write_bytes(&link, b"x").unwrap_err().to_string();
            assert!(e.contains("symbolic link"), "{e}");
            assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
            assert!(std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink());
        }
        assert!(leftovers(dir.path()).is_empty());
    }
}
