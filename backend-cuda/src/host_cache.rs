//! `cuda-host`'s compiled programs on disk: it runs only what it built.
//!
//! The folder is `cache::default_dir()/cuda-host`, else (no `MPMD_CACHE_DIR`,
//! `XDG_CACHE_HOME` or `HOME`) `$TMPDIR/mpmd-cuda-host-<uid>`. It must be
//! private: created `0700`, and used only when it is a real folder (not a
//! symbolic link) owned by the user running, that no one else may write to
//! (mode `& 0o022 == 0`). Anything else is refused with
//! [`CacheError`]: another user who could write there could plant a binary
//! that would run as the caller.
//!
//! An entry is two files: the binary `<hash>` and `<hash>.entry`, which holds
//! a digest of the binary and its size (recorded when it was built) and the
//! full key (compiler, flags, source). A binary runs only when the entry's key
//! is the key asked for and the file (opened without following symbolic
//! links) has that size and digest, checked before each run; an entry that
//! fails the check (truncated, corrupt, replaced) is removed and built again.
//!
//! A build writes `<hash>.<pid>-<n>.cpp` and `.tmp` and renames the binary into
//! place before writing the entry, so a killed compile leaves only temporary
//! files; those older than [`STALE_TEMP_AGE`] are removed when a process
//! first uses the folder. After each build the entries are bounded to
//! [`DISK_BYTES`] in all, the least recently used (the entry's modification
//! time, renewed by each use) going first.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use thiserror::Error;

use crate::cache::{default_dir, fnv128_hex, key_hash, unique_suffix};

/// The bound of the folder's entries, binaries and entry files together.
pub const DISK_BYTES: u64 = 256 << 20;

/// Temporary files of a build older than this are a killed build's.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(600);

/// The first line of an entry file.
const ENTRY_MAGIC: &str = "mpmd-cuda-host-entry 1";

/// Why the cache folder cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("cuda-host cannot use its cache folder {dir}: {reason}; set MPMD_CACHE_DIR to a folder of your own")]
pub struct CacheError {
    pub dir: String,
    pub reason: String,
}

/// The digest recorded for a binary: a 128-bit FNV-1a hash of its bytes, as
/// 32 hex digits. It finds truncated and corrupt files; the folder's privacy
/// keeps others from writing there at all.
pub fn digest(bytes: &[u8]) -> String {
    fnv128_hex(bytes)
}

/// The folder compiled programs are kept in (see the module's text).
pub fn default_folder() -> PathBuf {
    default_dir()
        .map(|d| d.join("cuda-host"))
        .unwrap_or_else(|| {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let uid = unsafe { libc::geteuid() };
            std::env::temp_dir().join(format!("mpmd-cuda-host-{uid}"))
        })
}

/// A built program that passed the check: where it is and its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub path: PathBuf,
    pub digest: String,
}

/// A cache folder that was found private.
#[derive(Debug)]
pub struct BinaryCache {
    dir: PathBuf,
    max_bytes: u64,
}

impl BinaryCache {
    /// Opens (creating it `0700` if absent) the folder `dir`, checks that it
    /// is private, and removes killed builds' temporary files. Entries are
    /// bounded to `max_bytes`.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<BinaryCache, CacheError> {
        let refuse = |reason: String| CacheError {
            dir: dir.display().to_string(),
            reason,
        };
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| refuse(format!("cannot create {}: {e}", parent.display())))?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(refuse(format!("cannot create it: {e}"))),
        }
        let meta = std::fs::symlink_metadata(dir).map_err(|e| refuse(e.to_string()))?;
        if meta.file_type().is_symlink() {
            return Err(refuse("it is a symbolic link".into()));
        }
        if !meta.is_dir() {
            return Err(refuse("it is not a folder".into()));
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        if meta.uid() != uid {
            return Err(refuse(format!(
                "it belongs to user {}, not to user {uid} who runs this",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(refuse(format!(
                "others may write to it (mode {:o}); it must be private (0700): remove it, or `chmod 700` it if only you wrote there",
                meta.mode() & 0o7777
            )));
        }
        let cache = BinaryCache {
            dir: dir.to_path_buf(),
            max_bytes,
        };
        // Once per folder and process: a killed build's files stay at most
        // until the next process.
        static SWEPT: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
        let first = SWEPT
            .lock()
            .map(|mut swept| swept.insert(dir.to_path_buf()))
            .unwrap_or(true);
        if first {
            cache.remove_stale_temporaries(STALE_TEMP_AGE);
        }
        Ok(cache)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn binary_path(&self, hash: &str) -> PathBuf {
        self.dir.join(hash)
    }

    fn entry_path(&self, hash: &str) -> PathBuf {
        self.dir.join(format!("{hash}.entry"))
    }

    /// The binary stored under `key` if its entry names exactly `key` and the
    /// file has the recorded size and digest; an entry that fails the check
    /// is removed. Renews the entry's last use.
    pub fn lookup(&self, key: &str) -> Option<Verified> {
        let hash = key_hash(key);
        let entry = read_no_follow(&self.entry_path(&hash)).ok()?;
        let entry = String::from_utf8(entry).ok();
        let parsed = entry.as_deref().and_then(|text| {
            let (header, stored_key) = text.split_once('\n')?;
            let mut words = header.strip_prefix(ENTRY_MAGIC)?.split_whitespace();
            let digest = words.next()?.to_string();
            let size: u64 = words.next()?.parse().ok()?;
            (stored_key == key).then_some((digest, size))
        });
        let Some((recorded, size)) = parsed else {
            // Another key under the same hash is left alone; a broken entry goes.
            if entry.is_none_or(|t| !t.starts_with(ENTRY_MAGIC)) {
                self.remove(&hash);
            }
            return None;
        };
        let verified = Verified {
            path: self.binary_path(&hash),
            digest: recorded,
        };
        if !verify(&verified, Some(size)) {
            self.remove(&hash);
            return None;
        }
        if let Ok(file) = File::open(self.entry_path(&hash)) {
            let _ = file.set_modified(SystemTime::now());
        }
        Some(verified)
    }

    /// Builds the binary of `key` with `build` (which writes the file it is
    /// given, or fails), records its digest, and bounds the folder.
    pub fn store<E>(
        &self,
        key: &str,
        build: impl FnOnce(&Path) -> Result<(), E>,
        io: impl Fn(std::io::Error) -> E,
    ) -> Result<Verified, E> {
        let hash = key_hash(key);
        let tmp = self.dir.join(format!("{hash}.{}.tmp", unique_suffix()));
        let built = build(&tmp);
        if let Err(e) = built {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let bytes = match read_no_follow(&tmp) {
            Ok(bytes) => bytes,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(io(e));
            }
        };
        let digest = digest(&bytes);
        let entry = format!("{ENTRY_MAGIC} {digest} {}\n{key}", bytes.len());
        let binary = self.binary_path(&hash);
        // The binary first, the entry last: an entry names a whole binary.
        let renamed = std::fs::rename(&tmp, &binary);
        if let Err(e) = renamed {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(e));
        }
        let entry_tmp = self.dir.join(format!("{hash}.{}.tmp", unique_suffix()));
        let written = write_new(&entry_tmp, entry.as_bytes())
            .and_then(|()| std::fs::rename(&entry_tmp, self.entry_path(&hash)));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&entry_tmp);
            return Err(io(e));
        }
        self.evict_to(self.max_bytes, &hash);
        Ok(Verified {
            path: binary,
            digest,
        })
    }

    /// Removes the entry of key hash `hash`.
    fn remove(&self, hash: &str) {
        let _ = std::fs::remove_file(self.entry_path(hash));
        let _ = std::fs::remove_file(self.binary_path(hash));
    }

    /// Removes temporary files (`.tmp`, `.cpp`) older than `age`, which a
    /// killed build left.
    pub fn remove_stale_temporaries(&self, age: Duration) {
        let Ok(listing) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        for item in listing.flatten() {
            let name = item.file_name();
            let name = name.to_string_lossy();
            if !(name.ends_with(".tmp") || name.ends_with(".cpp")) {
                continue;
            }
            let old = item
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|d| d >= age);
            if old {
                let _ = std::fs::remove_file(item.path());
            }
        }
    }

    /// Bytes the entries take (binaries and entry files), by key hash, with
    /// each entry's last use.
    fn entries(&self) -> Vec<(String, u64, SystemTime)> {
        let Ok(listing) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for item in listing.flatten() {
            let name = item.file_name().to_string_lossy().into_owned();
            let Some(hash) = name.strip_suffix(".entry") else {
                continue;
            };
            let Ok(meta) = item.metadata() else { continue };
            let binary = std::fs::symlink_metadata(self.binary_path(hash))
                .map(|m| m.len())
                .unwrap_or(0);
            let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            out.push((hash.to_string(), meta.len() + binary, used));
        }
        out
    }

    /// Bytes the entries take in all.
    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.entries().iter().map(|e| e.1).sum()
    }

    /// Removes the least recently used entries (never `keep`) until they
    /// take at most `max_bytes`.
    fn evict_to(&self, max_bytes: u64, keep: &str) {
        let mut entries = self.entries();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort_by_key(|e| e.2);
        for (hash, bytes, _) in entries {
            if total <= max_bytes {
                break;
            }
            if hash != keep {
                self.remove(&hash);
                total -= bytes;
            }
        }
    }
}

/// Whether `binary`'s file is a regular file (not followed through a
/// symbolic link) of `size` bytes (when given) whose digest is the one
/// recorded.
pub fn verify(binary: &Verified, size: Option<u64>) -> bool {
    let Ok(bytes) = read_no_follow(&binary.path) else {
        return false;
    };
    size.is_none_or(|s| s == bytes.len() as u64) && digest(&bytes) == binary.digest
}

/// The bytes of the regular file at `path`, never through a symbolic link.
fn read_no_follow(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes a new file (never an existing one, never through a link).
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}
