//! The module cache: compiled PTX and CUBINs keyed by a hash of source,
//! options and NVRTC version, in memory and on disk.
//!
//! Disk location: `$MPMD_CACHE_DIR`, else `$XDG_CACHE_HOME/mpmd`, else
//! `$HOME/.cache/mpmd` (none of them set: memory only). Each entry stores its
//! full key next to the output and is used only when the key matches
//! exactly, so a hash collision can never return the wrong module. Disk
//! errors only cost a recompile.
//!
//! The memory side holds at most [`MEMORY_ENTRIES`] modules, the least
//! recently used going first (a process that compiles many distinct maps
//! does not keep them all); an evicted module is read from disk again, or
//! compiled again. The disk side is a directory the user may clear.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use mpmd_core::lru::Lru;

/// Modules the memory cache holds (PTX or CUBIN, tens of KB each).
pub const MEMORY_ENTRIES: usize = 256;

/// The exact text the cache compares: source, options and NVRTC version.
pub fn key_text(source: &str, args: &[String], nvrtc_version: (i32, i32)) -> String {
    format!(
        "nvrtc {}.{}\noptions {}\n{}",
        nvrtc_version.0,
        nvrtc_version.1,
        args.join(" "),
        source
    )
}

/// A 128-bit FNV-1a hash of the key, as 32 hex digits ([`fnv128_hex`]).
pub fn key_hash(key: &str) -> String {
    fnv128_hex(key.as_bytes())
}

/// A 128-bit FNV-1a hash of `bytes`, as 32 hex digits (two 64-bit passes
/// with different offsets).
pub fn fnv128_hex(bytes: &[u8]) -> String {
    fn fnv(bytes: &[u8], offset: u64) -> u64 {
        let mut h = offset;
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    }
    format!(
        "{:016x}{:016x}",
        fnv(bytes, 0xcbf2_9ce4_8422_2325),
        fnv(bytes, 0x6c62_272e_07bb_0142)
    )
}

/// A name part unique to this call in this machine: process id and a counter.
pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Where the disk cache lives, if anywhere.
pub fn default_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("MPMD_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("mpmd"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".cache").join("mpmd"))
}

pub struct ModuleCache {
    memory: Mutex<Lru<String, Vec<u8>>>,
    dir: Option<PathBuf>,
}

impl ModuleCache {
    /// A cache on disk at `dir` (none: memory only) holding at most
    /// [`MEMORY_ENTRIES`] modules in memory.
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self::with_capacity(dir, MEMORY_ENTRIES)
    }

    /// A cache holding at most `entries` modules in memory.
    pub fn with_capacity(dir: Option<PathBuf>, entries: usize) -> Self {
        ModuleCache {
            memory: Mutex::new(Lru::new(entries)),
            dir,
        }
    }

    /// The process-wide cache, on disk at [`default_dir`].
    pub fn global() -> &'static ModuleCache {
        static GLOBAL: OnceLock<ModuleCache> = OnceLock::new();
        GLOBAL.get_or_init(|| ModuleCache::new(default_dir().map(|d| d.join("cuda"))))
    }

    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        if let Some(hit) = self.memory.lock().ok()?.get(key) {
            return Some(hit.clone());
        }
        let dir = self.dir.as_ref()?;
        let hash = key_hash(key);
        let stored_key = std::fs::read_to_string(dir.join(format!("{hash}.key"))).ok()?;
        if stored_key != key {
            return None;
        }
        let bytes = std::fs::read(dir.join(format!("{hash}.bin"))).ok()?;
        if let Ok(mut memory) = self.memory.lock() {
            memory.insert(key.to_string(), bytes.clone());
        }
        Some(bytes)
    }

    pub fn put(&self, key: &str, bytes: &[u8]) {
        if let Ok(mut memory) = self.memory.lock() {
            memory.insert(key.to_string(), bytes.to_vec());
        }
        let Some(dir) = &self.dir else { return };
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let hash = key_hash(key);
        // Output first, key last: a reader that sees the key sees the output.
        // Written through temporary names so that readers never see a partial file.
        let write = |name: String, data: &[u8]| {
            let tmp = dir.join(format!("{name}.{}.tmp", unique_suffix()));
            if std::fs::write(&tmp, data).is_ok() {
                let _ = std::fs::rename(&tmp, dir.join(name));
            }
        };
        write(format!("{hash}.bin"), bytes);
        write(format!("{hash}.key"), key.as_bytes());
    }

    /// Entries in memory (for tests and reports).
    pub fn memory_entries(&self) -> usize {
        self.memory.lock().map(|m| m.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable() {
        assert_eq!(
            key_hash(""),
            "cbf29ce484222325".to_string() + "6c62272e07bb0142"
        );
        assert_ne!(key_hash("a"), key_hash("b"));
    }

    #[test]
    fn disk_round_trip_and_key_check() {
        let dir = std::env::temp_dir().join(format!("mpmd-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = ModuleCache::new(Some(dir.clone()));
        cache.put("key one", b"module");
        let fresh = ModuleCache::new(Some(dir.clone()));
        assert_eq!(fresh.get("key one"), Some(b"module".to_vec()));
        assert_eq!(fresh.get("key two"), None);
        // A stored key that differs (a collision) is not used.
        std::fs::write(dir.join(format!("{}.key", key_hash("key one"))), "other").unwrap();
        assert_eq!(ModuleCache::new(Some(dir.clone())).get("key one"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn memory_keeps_the_most_recently_used_modules_up_to_its_bound() {
        let cache = ModuleCache::with_capacity(None, 3);
        for k in 0..3 {
            cache.put(&format!("key {k}"), &[k]);
        }
        // A hit makes `key 0` the most recently used: `key 1` goes next.
        assert_eq!(cache.get("key 0"), Some(vec![0]));
        cache.put("key 3", &[3]);
        assert_eq!(cache.memory_entries(), 3);
        assert_eq!(cache.get("key 1"), None);
        for k in [0u8, 2, 3] {
            assert_eq!(cache.get(&format!("key {k}")), Some(vec![k]));
        }
        for k in 4..40u8 {
            cache.put(&format!("key {k}"), &[k]);
            assert!(cache.memory_entries() <= 3);
        }
        assert_eq!(cache.memory_entries(), 3);
        assert_eq!(cache.get("key 39"), Some(vec![39]));
        assert_eq!(cache.get("key 0"), None);
    }

    #[test]
    fn an_evicted_module_comes_back_from_disk() {
        let dir = std::env::temp_dir().join(format!("mpmd-cache-evict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = ModuleCache::with_capacity(Some(dir.clone()), 1);
        cache.put("first", b"one");
        cache.put("second", b"two");
        assert_eq!(cache.memory_entries(), 1);
        assert_eq!(cache.get("first"), Some(b"one".to_vec()));
        assert_eq!(cache.memory_entries(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
