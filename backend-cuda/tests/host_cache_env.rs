//! Where `cuda-host` keeps its programs, as the environment names it, and
//! what it does with a folder it cannot trust. One test: it sets the
//! process's environment. Needs a C++17 compiler (`c++`).

// RunError is the shared error type of every backend.
#![allow(clippy::result_large_err)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::corpus_plan;
use mpmd_core::ir::Literal;
use mpmd_core::{Backend, CallArgs, HostTensor, Mode, RunError, RunOptions};
use mpmd_cuda::{host_compilations, HostCudaBackend};

/// One call on a fresh backend (the resident starts at zero).
fn run() -> Result<Vec<i32>, RunError> {
    let mut backend = HostCudaBackend::new();
    let plan = corpus_plan("resident_input_written_in_place");
    let mut args = CallArgs::default();
    let x: Vec<i32> = (0..64).collect();
    args.inputs
        .insert("x".into(), HostTensor::from_i32(vec![64], &x));
    args.scalars.insert("step".into(), Literal::I32(3));
    let options = RunOptions {
        mode: Mode::Checked,
        seed: 0,
    };
    let out = backend.run(&plan, &args, &options)?;
    Ok(out.outputs["y"].to_i32())
}

fn expected() -> Vec<i32> {
    (0..64).map(|i| 3 * i).collect()
}

/// The binaries in `dir` (files without an extension) other than the probe's.
fn binaries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_none())
        .filter(|p| {
            let entry = std::fs::read_to_string(p.with_extension("entry")).unwrap_or_default();
            !entry.contains("int main() { return 0; }")
        })
        .collect()
}

#[test]
fn the_cache_runs_only_what_it_built() {
    let root = std::env::temp_dir().join(format!("mpmd-host-cache-env-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();

    // A folder others may write to is an error of every run (not a skip).
    let shared = root.join("shared");
    std::fs::create_dir_all(shared.join("cuda-host")).unwrap();
    std::fs::set_permissions(
        shared.join("cuda-host"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    std::env::set_var("MPMD_CACHE_DIR", &shared);
    assert_eq!(
        run().unwrap_err(),
        RunError::Backend(format!(
            "cuda-host cannot use its cache folder {}/cuda-host: others may write to it (mode 777); it must be private (0700): remove it, or `chmod 700` it if only you wrote there; set MPMD_CACHE_DIR to a folder of your own",
            shared.display()
        ))
    );

    // A private folder: built once, then a replaced binary is never run
    // but built again, and so is a truncated one.
    let own = root.join("own");
    std::env::set_var("MPMD_CACHE_DIR", &own);
    let before = host_compilations();
    assert_eq!(run().unwrap(), expected());
    assert_eq!(
        std::fs::metadata(own.join("cuda-host"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    let built = binaries(&own.join("cuda-host"));
    assert_eq!(built.len(), 1, "{built:?}");
    let marker = root.join("planted-binary-ran");
    std::fs::write(
        &built[0],
        format!("#!/bin/sh\necho ran > {}\n", marker.display()),
    )
    .unwrap();
    let compiled = host_compilations();
    assert!(compiled > before);
    assert_eq!(run().unwrap(), expected());
    assert!(!marker.exists(), "the replaced binary ran");
    assert_eq!(host_compilations(), compiled + 1, "rebuilt once");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&built[0])
        .unwrap();
    file.set_len(4000).unwrap();
    drop(file);
    assert_eq!(run().unwrap(), expected());
    assert_eq!(host_compilations(), compiled + 2, "rebuilt once more");
    assert_eq!(run().unwrap(), expected());
    assert_eq!(host_compilations(), compiled + 2, "then used as it is");

    // No MPMD_CACHE_DIR, XDG_CACHE_HOME or HOME: a folder of the user's own
    // under the temporary folder, never one another user made there.
    std::env::remove_var("MPMD_CACHE_DIR");
    std::env::remove_var("XDG_CACHE_HOME");
    std::env::remove_var("HOME");
    std::env::set_var("TMPDIR", &root);
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let fallback = root.join(format!("mpmd-cuda-host-{uid}"));
    assert_eq!(run().unwrap(), expected());
    assert_eq!(
        std::fs::metadata(&fallback).unwrap().permissions().mode() & 0o777,
        0o700
    );
    if uid == 0 {
        // Another user's folder of that name (only root can make one here).
        std::fs::remove_dir_all(&fallback).unwrap();
        std::fs::create_dir(&fallback).unwrap();
        std::fs::set_permissions(&fallback, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&fallback, Some(65534), Some(65534)).unwrap();
        let error = run().unwrap_err();
        assert_eq!(
            error,
            RunError::Backend(format!(
                "cuda-host cannot use its cache folder {}: it belongs to user 65534, not to user 0 who runs this; set MPMD_CACHE_DIR to a folder of your own",
                fallback.display()
            ))
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}
