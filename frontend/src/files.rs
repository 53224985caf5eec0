//! The one rule for the files the front ends read and write (the CLI, the
//! Python package: `mpmd.Module.from_file`).
//!
//! Reading: only regular files, at most a stated number of bytes (a FIFO,
//! `/dev/zero` or a terminal given as a file would block forever or fill
//! memory). Writing: a file in an output folder is created beside its final
//! name and renamed onto it, so a symlink planted under that name is
//! replaced, never followed.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The bytes of the regular file at `path` (a symlink to one is read, as
/// every tool does), or an error if it is not a regular file or holds more
/// than `max_bytes`.
pub fn read_regular(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    let mut file = open_for_reading(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {}, not a regular file", kind_of(&meta.file_type())),
        ));
    }
    if meta.len() > max_bytes {
        return Err(too_large(meta.len(), max_bytes));
    }
    // The size can change after the check: read at most one byte past the
    // bound to tell a file that grew from one that fits.
    let mut bytes = Vec::new();
    // An error, not an abort, when memory cannot hold the file.
    bytes
        .try_reserve_exact(usize::try_from(meta.len()).unwrap_or(usize::MAX))
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("its {} bytes do not fit in memory", meta.len()),
            )
        })?;
    Read::by_ref(&mut file)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(bytes.len() as u64, max_bytes));
    }
    Ok(bytes)
}

fn too_large(size: u64, max_bytes: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it holds {size} bytes or more, and at most {max_bytes} are read here"),
    )
}

/// Opens without blocking: opening a FIFO for reading waits for a writer
/// unless `O_NONBLOCK` is given (regular files ignore the flag).
#[cfg(unix)]
fn open_for_reading(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_for_reading(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).open(path)
}

fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        "a folder"
    } else {
        "not a plain file"
    }
}

/// Writes `bytes` as the file `path`: into a new temporary file beside it
/// (created exclusively, so no existing file or symlink is opened), then
/// renamed onto `path`. A symlink at `path` is replaced by the file, never
/// followed; an interrupted write leaves `path` as it was.
pub fn write_replacing(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let dir = path.parent().unwrap_or_else(|| Path::new(""));
    let (temp, mut file) = loop {
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(
            ".{}.{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let temp: PathBuf = dir.join(temp_name);
        match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => break (temp, file),
            // Someone else's file (or a planted link) under the name: try
            // another name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    };
    let written = file
        .write_all(bytes)
        .and_then(|()| std::fs::rename(&temp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_regular_files_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_regular(&path, 5).unwrap(), b"12345");
        let err = read_regular(&path, 4).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it holds 5 bytes or more, and at most 4 are read here"
        );
    }

    #[cfg(unix)]
    #[test]
    fn refuses_devices_folders_and_fifos_without_blocking() {
        let err = read_regular(Path::new("/dev/zero"), u64::MAX).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it is a character device, not a regular file"
        );
        let dir = tempfile::tempdir().unwrap();
        let err = read_regular(dir.path(), u64::MAX).unwrap_err();
        assert_eq!(err.to_string(), "it is a folder, not a regular file");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Without O_NONBLOCK this open would wait for a writer forever.
        let err = read_regular(&fifo, u64::MAX).unwrap_err();
        assert_eq!(err.to_string(), "it is a FIFO, not a regular file");
    }

    #[cfg(unix)]
    #[test]
    fn writing_replaces_a_planted_symlink_without_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let out = dir.path().join("y.npy");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        write_replacing(&out, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(!std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        // A dangling link too (O_CREAT alone would create its target).
        let dangling = dir.path().join("z.npy");
        let target = dir.path().join("created-elsewhere");
        std::os::unix::fs::symlink(&target, &dangling).unwrap();
        write_replacing(&dangling, b"z").unwrap();
        assert!(!target.exists());
        assert_eq!(std::fs::read(&dangling).unwrap(), b"z");
        // No temporary file is left behind.
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["victim", "y.npy", "z.npy"]);
    }
}
