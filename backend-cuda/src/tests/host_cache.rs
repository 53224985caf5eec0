//! cuda-host's folder of compiled programs runs only what it built: a
//! private folder, entries checked against the digest recorded at build
//! time, killed builds cleaned, the folder bounded.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::host_cache::{digest, verify, BinaryCache, CacheError, STALE_TEMP_AGE};

/// A fresh folder for one test (its parent exists and is private).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mpmd-host-cache-{name}-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Stores `bytes` under `key` as a build would.
fn store(cache: &BinaryCache, key: &str, bytes: &[u8]) -> crate::host_cache::Verified {
    cache
        .store(key, |path| std::fs::write(path, bytes), |e| e)
        .unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn the_folder_is_created_private() {
    let dir = scratch("private");
    BinaryCache::open(&dir, 1 << 20).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_folder_others_may_write_to_is_refused() {
    let dir = scratch("shared");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = BinaryCache::open(&dir, 1 << 20).unwrap_err();
    assert_eq!(
        error,
        CacheError {
            dir: dir.display().to_string(),
            reason: "others may write to it (mode 777); it must be private (0700): remove it, or `chmod 700` it if only you wrote there".into()
        }
    );
    assert!(error
        .to_string()
        .ends_with("set MPMD_CACHE_DIR to a folder of your own"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_folder_that_is_a_symbolic_link_is_refused() {
    let target = scratch("link-target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = scratch("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let error = BinaryCache::open(&link, 1 << 20).unwrap_err();
    assert_eq!(error.reason, "it is a symbolic link");
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_dir_all(&target).unwrap();
}

#[test]
fn a_folder_of_another_user_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Only root can give a folder away; the check is the same uid compare.
        return;
    }
    let dir = scratch("other-user");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let error = BinaryCache::open(&dir, 1 << 20).unwrap_err();
    assert_eq!(
        error.reason,
        "it belongs to user 65534, not to user 0 who runs this"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_entry_runs_only_while_its_binary_is_the_one_built() {
    let dir = scratch("tamper");
    let cache = BinaryCache::open(&dir, 1 << 20).unwrap();
    let built = store(&cache, "key", b"the binary that was built");
    assert_eq!(built.digest, digest(b"the binary that was built"));
    assert_eq!(cache.lookup("key"), Some(built.clone()));
    assert_eq!(cache.lookup("another key"), None);
    // Replaced (same size): refused, and the entry goes, so it is built again.
    std::fs::write(&built.path, b"the binary that was PLANT").unwrap();
    assert!(!verify(&built, None));
    assert_eq!(cache.lookup("key"), None);
    assert_eq!(names(&dir), Vec::<String>::new());
    // Truncated: refused.
    let built = store(&cache, "key", b"the binary that was built");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&built.path)
        .unwrap();
    file.set_len(4).unwrap();
    assert_eq!(cache.lookup("key"), None);
    // A symbolic link to a file with the right bytes: never followed.
    let built = store(&cache, "key", b"the binary that was built");
    let elsewhere = scratch("elsewhere");
    std::fs::write(&elsewhere, b"the binary that was built").unwrap();
    std::fs::remove_file(&built.path).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &built.path).unwrap();
    assert_eq!(cache.lookup("key"), None);
    std::fs::remove_file(&elsewhere).unwrap();
    // A broken entry file goes too.
    let built = store(&cache, "key", b"the binary that was built");
    let entry = dir.join(format!("{}.entry", crate::cache::key_hash("key")));
    std::fs::write(&entry, b"garbage").unwrap();
    assert_eq!(cache.lookup("key"), None);
    assert!(!built.path.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_build_leaves_nothing_and_killed_builds_are_swept() {
    let dir = scratch("temps");
    let cache = BinaryCache::open(&dir, 1 << 20).unwrap();
    let failed: Result<_, String> = cache.store(
        "key",
        |path| {
            std::fs::write(path, b"half").unwrap();
            Err("the compiler failed".to_string())
        },
        |e| e.to_string(),
    );
    assert_eq!(failed.unwrap_err(), "the compiler failed");
    assert_eq!(names(&dir), Vec::<String>::new());
    // What a killed build leaves: old temporaries go, a running build's stay.
    let old = SystemTime::now() - STALE_TEMP_AGE - Duration::from_secs(1);
    for name in ["a.1-0.tmp", "a.1-0.cpp"] {
        let file = std::fs::File::create(dir.join(name)).unwrap();
        file.set_modified(old).unwrap();
    }
    std::fs::write(dir.join("b.2-0.tmp"), b"building").unwrap();
    cache.remove_stale_temporaries(STALE_TEMP_AGE);
    assert_eq!(names(&dir), vec!["b.2-0.tmp".to_string()]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_folder_keeps_the_most_recently_used_entries_within_its_bound() {
    let dir = scratch("bound");
    // Each entry: 1000 bytes of binary and an entry file of about 50 bytes.
    let cache = BinaryCache::open(&dir, 3_200).unwrap();
    let binary = |k: u8| vec![k; 1000];
    let at = |seconds: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds);
    let set_used = |key: &str, seconds: u64| {
        let entry = dir.join(format!("{}.entry", crate::cache::key_hash(key)));
        std::fs::File::open(entry)
            .unwrap()
            .set_modified(at(seconds))
            .unwrap();
    };
    for k in 0..3u8 {
        store(&cache, &format!("key {k}"), &binary(k));
        set_used(&format!("key {k}"), k as u64);
    }
    assert!(cache.bytes() <= 3_200);
    // `key 0` is used again: `key 1` is now the least recently used.
    assert!(cache.lookup("key 0").is_some());
    store(&cache, "key 3", &binary(3));
    assert!(cache.bytes() <= 3_200, "{} bytes", cache.bytes());
    assert_eq!(cache.lookup("key 1"), None);
    for k in [0u8, 2, 3] {
        assert!(cache.lookup(&format!("key {k}")).is_some(), "key {k}");
    }
    // An entry bigger than the bound alone stays until the next build.
    let big = BinaryCache::open(&dir, 10).unwrap();
    store(&big, "key 4", &binary(4));
    assert_eq!(names(&dir).len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
